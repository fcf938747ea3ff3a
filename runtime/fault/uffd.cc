#include "runtime/fault/uffd.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/posix_error.h"
#include "runtime/cache/eviction_batch.h"
#include "runtime/fault/uffd_compat.h"

namespace umap::runtime {
namespace {

inline int IoctlErrno(int fd, unsigned long req, void* arg) {
  for (;;) {
    if (::ioctl(fd, req, arg) == 0) return 0;
    if (errno != EINTR) return errno;
  }
}

}  // namespace

const char* UffdAccessName(UffdAccess a) {
  switch (a) {
    case UffdAccess::kSyscall: return "userfaultfd";
    case UffdAccess::kDevice: return "/dev/userfaultfd";
    case UffdAccess::kUserModeOnly: return "user-mode-only";
  }
  return "?";
}

namespace {

// A new userfaultfd the way `access` names, or -errno.
int NewUffd(UffdAccess access) {
  constexpr int kFlags = O_CLOEXEC | O_NONBLOCK;
  int fd = -1;
  switch (access) {
    case UffdAccess::kSyscall:
      fd = static_cast<int>(::syscall(SYS_userfaultfd, kFlags));
      break;
    case UffdAccess::kDevice: {
      const int dev = ::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
      if (dev < 0) return -errno;
      fd = ::ioctl(dev, USERFAULTFD_IOC_NEW, kFlags);
      const int err = errno;
      ::close(dev);
      if (fd < 0) return -err;
      break;
    }
    case UffdAccess::kUserModeOnly:
      fd = static_cast<int>(::syscall(SYS_userfaultfd, kFlags | UFFD_USER_MODE_ONLY));
      break;
  }
  return fd < 0 ? -errno : fd;
}

// UFFDIO_API on `fd` with `wanted`; the granted features, or -errno. May succeed once per fd.
int64_t Negotiate(int fd, uint64_t wanted) {
  struct uffdio_api api = {};
  api.api = UFFD_API;
  api.features = wanted;
  if (::ioctl(fd, UFFDIO_API, &api) != 0) return -errno;
  return static_cast<int64_t>(api.features);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Uffd>> Uffd::Open(bool sigbus) {
  const uint64_t required = UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_PAGEFAULT_FLAG_WP |
                            (sigbus ? UFFD_FEATURE_SIGBUS : 0);
  int open_err = 0;
  for (UffdAccess access :
       {UffdAccess::kSyscall, UffdAccess::kDevice, UffdAccess::kUserModeOnly}) {
    int fd = NewUffd(access);
    if (fd < 0) {
      open_err = -fd;
      // ENOSYS from the system call is not the last word: a seccomp filter (or a tool that
      // runs the program, such as valgrind) can hide userfaultfd(2) while the device works.
      if (open_err == ENOSYS && access == UffdAccess::kDevice) break;
      continue;
    }
    // Ask for everything we can use; drop the optional POISON if the kernel refuses it (the
    // API call works once per descriptor, so the retry needs a fresh one).
    int64_t got = Negotiate(fd, required | UFFD_FEATURE_POISON);
    if (got == -EINVAL) {
      ::close(fd);
      fd = NewUffd(access);
      if (fd < 0) return PosixError(-fd, "userfaultfd() failed on retry");
      got = Negotiate(fd, required);
    }
    if (got < 0) {
      ::close(fd);
      return PosixError(static_cast<int>(-got),
                        absl::StrCat("UFFDIO_API through ", UffdAccessName(access),
                                     ": the kernel lacks write-protect, thread-id",
                                     sigbus ? " or SIGBUS" : "", " support"));
    }
    return std::unique_ptr<Uffd>(new Uffd(fd, static_cast<uint64_t>(got), access));
  }
  return PosixError(open_err,
                    "userfaultfd() failed every way: Umap needs userfaultfd (kernel >= 5.11 "
                    "with CONFIG_USERFAULTFD). A site can let users in with read-write access "
                    "to /dev/userfaultfd (e.g. a udev rule giving it to a group) or with "
                    "vm.unprivileged_userfaultfd=1 (docs/operations.md)");
}

Uffd::~Uffd() { ::close(fd_); }

int Uffd::Register(void* addr, size_t len, bool write_protect) {
  struct uffdio_register reg = {};
  reg.range.start = reinterpret_cast<uint64_t>(addr);
  reg.range.len = len;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING | (write_protect ? UFFDIO_REGISTER_MODE_WP : 0);
  return IoctlErrno(fd_, UFFDIO_REGISTER, &reg);
}

int Uffd::Unregister(void* addr, size_t len) {
  struct uffdio_range range = {reinterpret_cast<uint64_t>(addr), len};
  return IoctlErrno(fd_, UFFDIO_UNREGISTER, &range);
}

int Uffd::Copy(void* dst, const void* src, size_t len, bool write_protect, bool dont_wake) {
  struct uffdio_copy copy = {};
  copy.dst = reinterpret_cast<uint64_t>(dst);
  copy.src = reinterpret_cast<uint64_t>(src);
  copy.len = len;
  copy.mode = (write_protect ? UFFDIO_COPY_MODE_WP : 0) |
              (dont_wake ? UFFDIO_COPY_MODE_DONTWAKE : 0);
  for (;;) {
    if (::ioctl(fd_, UFFDIO_COPY, &copy) == 0) return 0;
    // EAGAIN: the mm changed under us (e.g. a concurrent madvise); retry the remainder.
    if (errno == EAGAIN || errno == EINTR) {
      if (copy.copy > 0) {
        copy.dst += static_cast<uint64_t>(copy.copy);
        copy.src += static_cast<uint64_t>(copy.copy);
        copy.len -= static_cast<uint64_t>(copy.copy);
      }
      copy.copy = 0;
      continue;
    }
    return errno;
  }
}

int Uffd::WriteProtect(void* addr, size_t len, bool protect) {
  struct uffdio_writeprotect wp = {};
  wp.range.start = reinterpret_cast<uint64_t>(addr);
  wp.range.len = len;
  wp.mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
  return IoctlErrno(fd_, UFFDIO_WRITEPROTECT, &wp);
}

int Uffd::Wake(void* addr, size_t len) {
  struct uffdio_range range = {reinterpret_cast<uint64_t>(addr), len};
  return IoctlErrno(fd_, UFFDIO_WAKE, &range);
}

int Uffd::Poison(void* addr, size_t len) {
  if (!has_poison()) return ENOSYS;
  struct uffdio_poison p = {};
  p.range.start = reinterpret_cast<uint64_t>(addr);
  p.range.len = len;
  int err = IoctlErrno(fd_, UFFDIO_POISON, &p);
  return err == EEXIST ? 0 : err;
}

int Uffd::Read(uffd_msg* msgs, int max) {
  for (;;) {
    ssize_t n = ::read(fd_, msgs, sizeof(uffd_msg) * static_cast<size_t>(max));
    if (n >= 0) return static_cast<int>(static_cast<size_t>(n) / sizeof(uffd_msg));
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return 0;
    return -errno;
  }
}

absl::StatusOr<char*> ReserveRegion(void* addr, size_t len, int prot, bool fixed) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (fixed ? MAP_FIXED : 0);
  void* p = ::mmap(addr, len, prot, flags, -1, 0);
  if (p == MAP_FAILED) return PosixError(errno, "mmap of the mapping's address range");
  // A fork child would see the anonymous region without our handler: zeros where the file
  // has data. Not inheriting it makes a child's access fail loudly (SIGSEGV) instead.
  if (::madvise(p, len, MADV_DONTFORK) != 0 || ::madvise(p, len, MADV_NOHUGEPAGE) != 0) {
    int err = errno;
    ::munmap(p, len);
    return PosixError(err, "madvise(DONTFORK/NOHUGEPAGE) on the mapping");
  }
  return static_cast<char*>(p);
}

void ReleaseRegion(char* base, size_t len) { ::munmap(base, len); }

int ProtectRegion(char* base, size_t len, int prot) {
  // The system call itself, as in DiscardPages: the LD_PRELOAD shim refuses a program's
  // mprotect of a Umap mapping, which must never apply to the runtime's own.
  return ::syscall(SYS_mprotect, base, len, prot) == 0 ? 0 : errno;
}

char* MapBuffer(size_t len) {
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

void UnmapBuffer(char* p, size_t len) {
  if (p != nullptr) ::munmap(p, len);
}

int DiscardPages(void* addr, size_t len) {
  // The system call itself, not libc's madvise(): handler threads evict, and an LD_PRELOAD
  // shim (runtime/preload) answers an application's MADV_DONTNEED on a mapping by doing
  // nothing, which must never apply to the runtime's own discards.
  return ::syscall(SYS_madvise, addr, len, MADV_DONTNEED) == 0 ? 0 : errno;
}

int ProtectPages(void* addr, size_t len, int prot) {
  // The system call itself: the LD_PRELOAD shim refuses an application's mprotect of a Umap
  // mapping, which must never apply to the runtime's own.
  return ::syscall(SYS_mprotect, addr, len, prot) == 0 ? 0 : errno;
}

void DiscardBatch(int pidfd, EvictionBatch* batch) {
  const int n = batch->count;
  size_t advised = 0;
  if (pidfd >= 0 && n > 1) {
    // Returns the bytes advised: less than the total when it stopped at a failing range.
    const long rc = ::syscall(SYS_process_madvise, pidfd, batch->ranges, static_cast<size_t>(n),
                              MADV_DONTNEED, 0u);
    if (rc > 0) advised = static_cast<size_t>(rc);
  }
  for (int i = 0; i < n; ++i) {
    const iovec& r = batch->ranges[i];
    if (advised >= r.iov_len) {
      advised -= r.iov_len;
      batch->victims[i].discarded = true;
      continue;
    }
    advised = 0;
    // Not covered by the batched call (an older kernel, or a range it stopped at): one by one.
    batch->victims[i].discarded = DiscardPages(r.iov_base, r.iov_len) == 0;
  }
}

}  // namespace umap::runtime
