// The read/write and file families libumap_preload.so puts in front of libc's
// (docs/preload.md). Two concerns meet here:
//   - the buffer: a read into or a write from a Umap mapping is touched from user space
//     first (KernelAccess: the kernel cannot fault Umap pages in for itself);
//   - the file: a call that reads or writes a file the program maps with Umap is kept
//     coherent with the mappings (FileApi: one copy, as the kernel's page cache gives).
// Umap's own calls (InternalIo, ReentryGuard) go straight to libc. No ReentryGuard around
// the call itself: touching the buffer may fault into the runtime, which must not see this
// thread as inside the shim; only FileApi's work runs inside one.
#include <fcntl.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <shared_mutex>

#include "base/internal_io.h"
#include "base/keep_locks.h"
#include "runtime/preload/real_calls.h"
#include "runtime/preload/real_file_calls.h"
#include "runtime/preload/shim.h"

using umap::preload::FileApi;
using umap::preload::FileKey;
using umap::preload::ReentryGuard;
using umap::preload::Shim;
namespace real = umap::preload;

namespace {

inline Shim* Active() {
  if (ReentryGuard::active()) return nullptr;
  Shim* s = Shim::Get();
  return s != nullptr ? s : Shim::AdoptInChild();  // a fork() child's first call
}

size_t IovBytes(const struct iovec* iov, int iovcnt) {
  size_t n = 0;
  for (int i = 0; iov != nullptr && i < iovcnt; ++i) n += iov[i].iov_len;
  return n;
}

// Where a call on `fd` reads or writes: `off` when given (>= 0), else the descriptor's
// offset (O_APPEND: the end). `*span` becomes kToEnd when that cannot be told.
uint64_t Where(int fd, int64_t off, bool write, uint64_t* span) {
  if (off < 0) off = FileApi::CurrentOffset(fd, write);
  if (off < 0) *span = FileApi::kToEnd;
  return off < 0 ? 0 : static_cast<uint64_t>(off);
}

// A call that writes `len` bytes of the file on `fd` at `off` (-1: its offset).
template <typename Call>
ssize_t Writing(Shim* s, int fd, int64_t off, uint64_t len, Call call) {
  FileKey key;
  if (s == nullptr || !s->files().Mapped(fd, &key)) return call();
  std::shared_lock<std::shared_mutex> own(s->own_writes_mu());
  uint64_t span = len;
  const uint64_t at = Where(fd, off, /*write=*/true, &span);
  {
    ReentryGuard guard;
    if (s->files().BeforeWrite(key, at, span) != 0) return -1;
  }
  const ssize_t r = call();
  const int err = errno;
  if (r > 0) {
    ReentryGuard guard;
    s->files().AfterWrite(key, fd, at, span == FileApi::kToEnd ? span : static_cast<uint64_t>(r));
  }
  errno = err;
  return r;
}

// A call that reads `len` bytes of the file on `fd` at `off` (-1: its offset).
template <typename Call>
ssize_t Reading(Shim* s, int fd, int64_t off, uint64_t len, Call call) {
  FileKey key;
  if (s == nullptr || !s->files().Mapped(fd, &key)) return call();
  uint64_t span = len;
  const uint64_t at = Where(fd, off, /*write=*/false, &span);
  {
    ReentryGuard guard;
    if (s->files().BeforeRead(key, at, span) != 0) return -1;
  }
  return call();
}

// A call that changes file bytes from `off` on (or, with `len`, [off, off + len)) without
// a count of bytes written: resizes and fallocate.
template <typename Call>
int Resizing(Shim* s, int fd, const char* path, uint64_t off, uint64_t len, Call call) {
  FileKey key;
  const bool mapped =
      s != nullptr && (fd >= 0 ? s->files().Mapped(fd, &key) : s->files().MappedPath(path, &key));
  if (!mapped) return call();
  std::shared_lock<std::shared_mutex> own(s->own_writes_mu());
  {
    ReentryGuard guard;
    if (s->files().BeforeWrite(key, off, len) != 0) return -1;
  }
  const int r = call();
  const int err = errno;
  {
    ReentryGuard guard;
    s->files().AfterWrite(key, fd, off, len, path);
  }
  errno = err;
  return r;
}

}  // namespace

extern "C" {

ssize_t read(int fd, void* buf, size_t n) {
  Shim* s = Active();
  if (s == nullptr) return real::RealRead(fd, buf, n);
  return Reading(s, fd, -1, n, [&] { return s->kernel_access().Read(fd, buf, n); });
}

ssize_t write(int fd, const void* buf, size_t n) {
  Shim* s = Active();
  if (s == nullptr) return real::RealWrite(fd, buf, n);
  return Writing(s, fd, -1, n, [&] { return s->kernel_access().Write(fd, buf, n); });
}

ssize_t pread(int fd, void* buf, size_t n, off_t off) {
  Shim* s = Active();
  if (s == nullptr) return real::RealPread(fd, buf, n, off);
  return Reading(s, fd, off, n, [&] { return s->kernel_access().Pread(fd, buf, n, off); });
}

ssize_t pread64(int fd, void* buf, size_t n, off64_t off) __attribute__((alias("pread")));

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  Shim* s = Active();
  if (s == nullptr) return real::RealPwrite(fd, buf, n, off);
  return Writing(s, fd, off, n, [&] { return s->kernel_access().Pwrite(fd, buf, n, off); });
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off64_t off) __attribute__((alias("pwrite")));

ssize_t readv(int fd, const struct iovec* iov, int iovcnt) {
  Shim* s = Active();
  if (s == nullptr) return real::RealReadv(fd, iov, iovcnt);
  return Reading(s, fd, -1, IovBytes(iov, iovcnt),
                 [&] { return s->kernel_access().Readv(fd, iov, iovcnt); });
}

ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  Shim* s = Active();
  if (s == nullptr) return real::RealWritev(fd, iov, iovcnt);
  return Writing(s, fd, -1, IovBytes(iov, iovcnt),
                 [&] { return s->kernel_access().Writev(fd, iov, iovcnt); });
}

ssize_t preadv(int fd, const struct iovec* iov, int iovcnt, off_t off) {
  Shim* s = Active();
  if (s == nullptr) return real::RealPreadv(fd, iov, iovcnt, off);
  return Reading(s, fd, off, IovBytes(iov, iovcnt),
                 [&] { return s->kernel_access().Preadv(fd, iov, iovcnt, off); });
}

ssize_t preadv64(int fd, const struct iovec* iov, int iovcnt, off64_t off)
    __attribute__((alias("preadv")));

ssize_t pwritev(int fd, const struct iovec* iov, int iovcnt, off_t off) {
  Shim* s = Active();
  if (s == nullptr) return real::RealPwritev(fd, iov, iovcnt, off);
  return Writing(s, fd, off, IovBytes(iov, iovcnt),
                 [&] { return s->kernel_access().Pwritev(fd, iov, iovcnt, off); });
}

ssize_t pwritev64(int fd, const struct iovec* iov, int iovcnt, off64_t off)
    __attribute__((alias("pwritev")));

// preadv2/pwritev2 with offset -1 use the descriptor's offset. Their buffers are touched
// like preadv's (KernelAccess covers the vector calls without flags only: the flags change
// nothing about which pages the kernel touches).
ssize_t preadv2(int fd, const struct iovec* iov, int iovcnt, off_t off, int flags) {
  Shim* s = Active();
  if (s == nullptr) return real::RealPreadv2(fd, iov, iovcnt, off, flags);
  s->kernel_access().TouchIov(iov, iovcnt, umap::preload::KernelAccess::Dir::kKernelWrites);
  return Reading(s, fd, off, IovBytes(iov, iovcnt),
                 [&] { return real::RealPreadv2(fd, iov, iovcnt, off, flags); });
}

ssize_t preadv64v2(int fd, const struct iovec* iov, int iovcnt, off64_t off, int flags)
    __attribute__((alias("preadv2")));

ssize_t pwritev2(int fd, const struct iovec* iov, int iovcnt, off_t off, int flags) {
  Shim* s = Active();
  if (s == nullptr) return real::RealPwritev2(fd, iov, iovcnt, off, flags);
  s->kernel_access().TouchIov(iov, iovcnt, umap::preload::KernelAccess::Dir::kKernelReads);
  return Writing(s, fd, off, IovBytes(iov, iovcnt),
                 [&] { return real::RealPwritev2(fd, iov, iovcnt, off, flags); });
}

ssize_t pwritev64v2(int fd, const struct iovec* iov, int iovcnt, off64_t off, int flags)
    __attribute__((alias("pwritev2")));

ssize_t recv(int fd, void* buf, size_t n, int flags) {
  Shim* s = Active();
  return s ? s->kernel_access().Recv(fd, buf, n, flags) : real::RealRecv(fd, buf, n, flags);
}

ssize_t send(int fd, const void* buf, size_t n, int flags) {
  Shim* s = Active();
  return s ? s->kernel_access().Send(fd, buf, n, flags) : real::RealSend(fd, buf, n, flags);
}

ssize_t recvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* from,
                 socklen_t* fromlen) {
  Shim* s = Active();
  return s ? s->kernel_access().Recvfrom(fd, buf, n, flags, from, fromlen)
           : real::RealRecvfrom(fd, buf, n, flags, from, fromlen);
}

ssize_t sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* to,
               socklen_t tolen) {
  Shim* s = Active();
  return s ? s->kernel_access().Sendto(fd, buf, n, flags, to, tolen)
           : real::RealSendto(fd, buf, n, flags, to, tolen);
}

// In-kernel copies: the source side is read, the destination side written.
ssize_t copy_file_range(int in, off64_t* in_off, int out, off64_t* out_off, size_t len,
                        unsigned flags) {
  Shim* s = Active();
  auto call = [&] { return real::RealCopyFileRange(in, in_off, out, out_off, len, flags); };
  if (s == nullptr) return call();
  return Writing(s, out, out_off ? *out_off : -1, len,
                 [&] { return Reading(s, in, in_off ? *in_off : -1, len, call); });
}

ssize_t sendfile(int out, int in, off_t* off, size_t count) {
  Shim* s = Active();
  auto call = [&] { return real::RealSendfile(out, in, off, count); };
  if (s == nullptr) return call();
  return Writing(s, out, -1, count, [&] { return Reading(s, in, off ? *off : -1, count, call); });
}

ssize_t sendfile64(int out, int in, off64_t* off, size_t count) __attribute__((alias("sendfile")));

ssize_t splice(int in, off64_t* in_off, int out, off64_t* out_off, size_t len, unsigned flags) {
  Shim* s = Active();
  auto call = [&] { return real::RealSplice(in, in_off, out, out_off, len, flags); };
  if (s == nullptr) return call();
  return Writing(s, out, out_off ? *out_off : -1, len,
                 [&] { return Reading(s, in, in_off ? *in_off : -1, len, call); });
}

int ftruncate(int fd, off_t len) {
  Shim* s = Active();
  auto call = [&] { return real::RealFtruncate(fd, len); };
  if (s == nullptr || len < 0) return call();
  return Resizing(s, fd, nullptr, static_cast<uint64_t>(len), FileApi::kToEnd, call);
}

int ftruncate64(int fd, off64_t len) __attribute__((alias("ftruncate")));

int truncate(const char* path, off_t len) {
  Shim* s = Active();
  auto call = [&] { return real::RealTruncate(path, len); };
  if (s == nullptr || len < 0) return call();
  return Resizing(s, -1, path, static_cast<uint64_t>(len), FileApi::kToEnd, call);
}

int truncate64(const char* path, off64_t len) __attribute__((alias("truncate")));

int fallocate(int fd, int mode, off_t off, off_t len) {
  Shim* s = Active();
  auto call = [&] { return real::RealFallocate(fd, mode, off, len); };
  if (s == nullptr || off < 0 || len <= 0) return call();
  // Collapsing or inserting a range moves every byte after it.
  const bool shifts = (mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)) != 0;
  return Resizing(s, fd, nullptr, static_cast<uint64_t>(off),
                  shifts ? FileApi::kToEnd : static_cast<uint64_t>(len), call);
}

int fallocate64(int fd, int mode, off64_t off, off64_t len) __attribute__((alias("fallocate")));

int posix_fallocate(int fd, off_t off, off_t len) {
  Shim* s = Active();
  auto call = [&] { return real::RealPosixFallocate(fd, off, len); };
  if (s == nullptr || off < 0 || len <= 0) return call();
  // Only the size may change (the bytes it allocates read as zeros, as before).
  const int r = Resizing(s, fd, nullptr, static_cast<uint64_t>(off + len), 0, call);
  return r == -1 ? errno : r;
}

int posix_fallocate64(int fd, off64_t off, off64_t len) __attribute__((alias("posix_fallocate")));

// The kernel's fsync writes a mapping's dirty pages too; Umap's mappings umsync first.
int fsync(int fd) {
  Shim* s = Active();
  FileKey key;
  if (s != nullptr && s->files().Mapped(fd, &key)) {
    ReentryGuard guard;
    if (s->files().BeforeSync(key) != 0) return -1;
  }
  return real::RealFsync(fd);
}

int fdatasync(int fd) {
  Shim* s = Active();
  FileKey key;
  if (s != nullptr && s->files().Mapped(fd, &key)) {
    ReentryGuard guard;
    if (s->files().BeforeSync(key) != 0) return -1;
  }
  return real::RealFdatasync(fd);
}

int sync_file_range(int fd, off64_t off, off64_t len, unsigned flags) {
  Shim* s = Active();
  FileKey key;
  if (s != nullptr && s->files().Mapped(fd, &key)) {
    ReentryGuard guard;
    if (s->files().BeforeSync(key) != 0) return -1;
  }
  return real::RealSyncFileRange(fd, off, len, flags);
}

// The program's close of a file drops its POSIX locks on it: the descriptors Umap kept
// open so as not to drop them (base/keep_locks.h) can go now.
int close(int fd) {
  if (umap::ParkedDescriptors() == 0 || Shim::Get() == nullptr) return real::RealClose(fd);
  struct stat st;
  const bool file = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const int r = real::RealClose(fd);
  const int err = errno;
  if (r == 0 && file) umap::ReleaseParked(st.st_dev, st.st_ino);
  errno = err;
  return r;
}

// Locks: a program that locks a file it maps (SQLite) sees, once it holds the lock, every
// change another process made to the file before (NodeFiles::AtLock). Only taking a lock
// matters; releasing one, and every other command, goes to libc untouched.
int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);  // an int or a pointer: either fits (x86-64 ABI)
  va_end(ap);
  const int r = real::RealFcntl(fd, cmd, arg);
  if (r != 0 || (cmd != F_SETLK && cmd != F_SETLKW && cmd != F_OFD_SETLK && cmd != F_OFD_SETLKW)) {
    return r;
  }
  // Umap's own locks (its coherence locks, the journal's) are not the program's.
  Shim* s = umap::InternalIo::active() ? nullptr : Active();
  if (s == nullptr || s->registry().live() == 0 ||
      static_cast<const struct flock*>(arg)->l_type == F_UNLCK) {
    return r;
  }
  const int err = errno;
  s->nodes().AtLock(fd);
  errno = err;
  return r;
}

int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

int flock(int fd, int op) {
  const int r = real::RealFlock(fd, op);
  Shim* s = r == 0 && (op & LOCK_UN) == 0 && !umap::InternalIo::active() ? Active() : nullptr;
  if (s != nullptr && s->registry().live() > 0) s->nodes().AtLock(fd);
  return r;
}

int lockf(int fd, int cmd, off_t len) {
  const int r = real::RealLockf(fd, cmd, len);
  Shim* s = r == 0 && (cmd == F_LOCK || cmd == F_TLOCK) && !umap::InternalIo::active() ? Active()
                                                                                       : nullptr;
  if (s != nullptr && s->registry().live() > 0) s->nodes().AtLock(fd);
  return r;
}

int lockf64(int fd, int cmd, off64_t len) __attribute__((alias("lockf")));

// _exit and _Exit end the process without atexit handlers; the kernel still writes a
// MAP_SHARED mapping's dirty pages back, so the shim writes its mappings back first.
void _exit(int status) {
  Shim::BeforeExit();
  real::RealExit(status);
}

void _Exit(int status) {
  Shim::BeforeExit();
  real::RealExit2(status);
}

}  // extern "C"
