#include "runtime/preload/kernel_access.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "runtime/preload/real_calls.h"

namespace umap::preload {
namespace {

// Makes the page resident and writable without changing it: a locked read-modify-write
// that adds nothing. A concurrent plain store by another thread is not lost (the locked
// instruction either precedes it or follows it).
inline void TouchForWrite(uintptr_t p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("lock; orb $0, %0" : "+m"(*reinterpret_cast<volatile char*>(p)) : : "memory");
#else
  __atomic_fetch_or(reinterpret_cast<char*>(p), 0, __ATOMIC_RELAXED);
#endif
}

inline void TouchForRead(uintptr_t p) { (void)*reinterpret_cast<const volatile char*>(p); }

bool IsRegularFile(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

KernelAccess::KernelAccess(const MappingRegistry* registry, size_t chunk_bytes)
    : registry_(registry),
      chunk_bytes_(chunk_bytes),
      page_(static_cast<size_t>(::sysconf(_SC_PAGESIZE))) {}

bool KernelAccess::Overlaps(const void* buf, size_t len) const {
  if (registry_->live() == 0 || len == 0) return false;
  bool any = false;
  registry_->ForEachOverlapping(reinterpret_cast<uintptr_t>(buf), len,
                                [&](int, const ShimMapping&) { any = true; });
  return any;
}

bool KernelAccess::OverlapsIov(const struct iovec* iov, int iovcnt) const {
  if (registry_->live() == 0 || iov == nullptr) return false;
  for (int i = 0; i < iovcnt; ++i) {
    if (Overlaps(iov[i].iov_base, iov[i].iov_len)) return true;
  }
  return false;
}

bool KernelAccess::Touch(const void* buf, size_t len, Dir d) const {
  if (registry_->live() == 0 || len == 0) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(buf);
  bool any = false;
  registry_->ForEachOverlapping(a, len, [&](int, const ShimMapping& m) {
    any = true;
    const uintptr_t lo = std::max(a, m.base) / page_ * page_;
    const uintptr_t hi = std::min(a + len, m.data_end());
    const bool write = d == Dir::kKernelWrites && m.writable();
    for (uintptr_t p = lo; p < hi; p += page_) {
      if (write) {
        TouchForWrite(std::max(p, a));
      } else {
        TouchForRead(std::max(p, a));
      }
    }
  });
  return any;
}

bool KernelAccess::TouchIov(const struct iovec* iov, int iovcnt, Dir d) const {
  bool any = false;
  for (int i = 0; i < iovcnt; ++i) any |= Touch(iov[i].iov_base, iov[i].iov_len, d);
  return any;
}

template <typename Op, typename Retouch>
ssize_t KernelAccess::Retried(Op op, Retouch retouch) {
  for (int attempt = 1;; ++attempt) {
    const ssize_t r = op();
    // EFAULT after touching: a page was evicted again before the kernel reached it (a busy
    // cache). Touch and try again; a buffer that is really bad fails every attempt.
    if (r >= 0 || errno != EFAULT || attempt == kAttempts) return r;
    retouch();
  }
}

template <typename Op>
ssize_t KernelAccess::Whole(const void* buf, size_t n, Dir d, Op op) const {
  Touch(buf, n, d);
  return Retried(op, [&] { Touch(buf, n, d); });
}

template <typename Op>
ssize_t KernelAccess::WholeIov(const struct iovec* iov, int iovcnt, Dir d, Op op) const {
  TouchIov(iov, iovcnt, d);
  return Retried(op, [&] { TouchIov(iov, iovcnt, d); });
}

template <typename Op>
ssize_t KernelAccess::Chunked(int fd, const void* buf, size_t n, Dir d, Op op) const {
  const char* p = static_cast<const char*>(buf);
  if (n <= chunk_bytes_ || !IsRegularFile(fd)) {
    return Whole(p, n, d, [&] { return op(p, n, size_t{0}); });
  }
  size_t done = 0;
  while (done < n) {
    const size_t len = std::min(chunk_bytes_, n - done);
    Touch(p + done, len, d);
    const ssize_t r =
        Retried([&] { return op(p + done, len, done); }, [&] { Touch(p + done, len, d); });
    // An error after some chunks succeeded is a short count, as the kernel reports a
    // partial transfer; the caller sees the error on its next call.
    if (r < 0) return done > 0 ? static_cast<ssize_t>(done) : r;
    done += static_cast<size_t>(r);
    if (static_cast<size_t>(r) < len) break;  // end of file, or a short transfer
  }
  return static_cast<ssize_t>(done);
}

ssize_t KernelAccess::Read(int fd, void* buf, size_t n) const {
  if (!Overlaps(buf, n)) return RealRead(fd, buf, n);
  return Chunked(fd, buf, n, Dir::kKernelWrites, [&](const char* p, size_t len, size_t) {
    return RealRead(fd, const_cast<char*>(p), len);
  });
}

ssize_t KernelAccess::Write(int fd, const void* buf, size_t n) const {
  if (!Overlaps(buf, n)) return RealWrite(fd, buf, n);
  return Chunked(fd, buf, n, Dir::kKernelReads,
                 [&](const char* p, size_t len, size_t) { return RealWrite(fd, p, len); });
}

ssize_t KernelAccess::Pread(int fd, void* buf, size_t n, off_t off) const {
  if (!Overlaps(buf, n)) return RealPread(fd, buf, n, off);
  return Chunked(fd, buf, n, Dir::kKernelWrites, [&](const char* p, size_t len, size_t done) {
    return RealPread(fd, const_cast<char*>(p), len, off + static_cast<off_t>(done));
  });
}

ssize_t KernelAccess::Pwrite(int fd, const void* buf, size_t n, off_t off) const {
  if (!Overlaps(buf, n)) return RealPwrite(fd, buf, n, off);
  return Chunked(fd, buf, n, Dir::kKernelReads, [&](const char* p, size_t len, size_t done) {
    return RealPwrite(fd, p, len, off + static_cast<off_t>(done));
  });
}

ssize_t KernelAccess::Readv(int fd, const struct iovec* iov, int iovcnt) const {
  if (!OverlapsIov(iov, iovcnt)) return RealReadv(fd, iov, iovcnt);
  return WholeIov(iov, iovcnt, Dir::kKernelWrites, [&] { return RealReadv(fd, iov, iovcnt); });
}

ssize_t KernelAccess::Writev(int fd, const struct iovec* iov, int iovcnt) const {
  if (!OverlapsIov(iov, iovcnt)) return RealWritev(fd, iov, iovcnt);
  return WholeIov(iov, iovcnt, Dir::kKernelReads, [&] { return RealWritev(fd, iov, iovcnt); });
}

ssize_t KernelAccess::Preadv(int fd, const struct iovec* iov, int iovcnt, off_t off) const {
  if (!OverlapsIov(iov, iovcnt)) return RealPreadv(fd, iov, iovcnt, off);
  return WholeIov(iov, iovcnt, Dir::kKernelWrites,
                  [&] { return RealPreadv(fd, iov, iovcnt, off); });
}

ssize_t KernelAccess::Pwritev(int fd, const struct iovec* iov, int iovcnt, off_t off) const {
  if (!OverlapsIov(iov, iovcnt)) return RealPwritev(fd, iov, iovcnt, off);
  return WholeIov(iov, iovcnt, Dir::kKernelReads,
                  [&] { return RealPwritev(fd, iov, iovcnt, off); });
}

ssize_t KernelAccess::Recv(int fd, void* buf, size_t n, int flags) const {
  if (!Overlaps(buf, n)) return RealRecv(fd, buf, n, flags);
  return Whole(buf, n, Dir::kKernelWrites, [&] { return RealRecv(fd, buf, n, flags); });
}

ssize_t KernelAccess::Send(int fd, const void* buf, size_t n, int flags) const {
  if (!Overlaps(buf, n)) return RealSend(fd, buf, n, flags);
  return Whole(buf, n, Dir::kKernelReads, [&] { return RealSend(fd, buf, n, flags); });
}

ssize_t KernelAccess::Recvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* from,
                               socklen_t* fromlen) const {
  if (!Overlaps(buf, n)) return RealRecvfrom(fd, buf, n, flags, from, fromlen);
  return Whole(buf, n, Dir::kKernelWrites,
               [&] { return RealRecvfrom(fd, buf, n, flags, from, fromlen); });
}

ssize_t KernelAccess::Sendto(int fd, const void* buf, size_t n, int flags,
                             const struct sockaddr* to, socklen_t tolen) const {
  if (!Overlaps(buf, n)) return RealSendto(fd, buf, n, flags, to, tolen);
  return Whole(buf, n, Dir::kKernelReads, [&] { return RealSendto(fd, buf, n, flags, to, tolen); });
}

}  // namespace umap::preload
