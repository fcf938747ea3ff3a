#include "runtime/preload/real_file_calls.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace umap::preload {
namespace {

enum Fn : int {
  kPreadv2,
  kPwritev2,
  kCopyFileRange,
  kSendfile,
  kSplice,
  kFtruncate,
  kTruncate,
  kFallocate,
  kPosixFallocate,
  kFsync,
  kFdatasync,
  kSyncFileRange,
  kClose,
  kExit,
  kExit2,
  kFcntl,
  kFlock,
  kLockf,
  kCount
};

constexpr const char* kNames[kCount] = {"preadv64v2", "pwritev64v2", "copy_file_range",
                                        "sendfile64", "splice",      "ftruncate64",
                                        "truncate64", "fallocate64", "posix_fallocate64",
                                        "fsync",      "fdatasync",   "sync_file_range",
                                        "close",      "_exit",       "_Exit",
                                        "fcntl64",    "flock",       "lockf64"};
// Every function has its name: a missing one would be a null name for dlsym.
constexpr bool AllNamed() {
  for (const char* n : kNames) {
    if (n == nullptr) return false;
  }
  return true;
}
static_assert(AllNamed(), "a Fn without its name in kNames");

std::atomic<void*> g_fn[kCount];

template <typename F>
F Next(Fn f) {
  return reinterpret_cast<F>(g_fn[f].load(std::memory_order_relaxed));
}

inline long Hi(off_t off) { return static_cast<long>(static_cast<uint64_t>(off) >> 32); }

}  // namespace

void ResolveRealFileCalls() {
  for (int i = 0; i < kCount; ++i) {
    if (g_fn[i].load(std::memory_order_relaxed) == nullptr) {
      g_fn[i].store(::dlsym(RTLD_NEXT, kNames[i]), std::memory_order_relaxed);
    }
  }
}

ssize_t RealPreadv2(int fd, const struct iovec* iov, int iovcnt, off_t off, int flags) {
  if (auto f = Next<ssize_t (*)(int, const struct iovec*, int, off_t, int)>(kPreadv2)) {
    return f(fd, iov, iovcnt, off, flags);
  }
  return ::syscall(SYS_preadv2, fd, iov, iovcnt, static_cast<long>(off), Hi(off), flags);
}

ssize_t RealPwritev2(int fd, const struct iovec* iov, int iovcnt, off_t off, int flags) {
  if (auto f = Next<ssize_t (*)(int, const struct iovec*, int, off_t, int)>(kPwritev2)) {
    return f(fd, iov, iovcnt, off, flags);
  }
  return ::syscall(SYS_pwritev2, fd, iov, iovcnt, static_cast<long>(off), Hi(off), flags);
}

ssize_t RealCopyFileRange(int in, off_t* in_off, int out, off_t* out_off, size_t len,
                          unsigned flags) {
  if (auto f = Next<ssize_t (*)(int, off_t*, int, off_t*, size_t, unsigned)>(kCopyFileRange)) {
    return f(in, in_off, out, out_off, len, flags);
  }
  return ::syscall(SYS_copy_file_range, in, in_off, out, out_off, len, flags);
}

ssize_t RealSendfile(int out, int in, off_t* off, size_t count) {
  if (auto f = Next<ssize_t (*)(int, int, off_t*, size_t)>(kSendfile)) {
    return f(out, in, off, count);
  }
  return ::syscall(SYS_sendfile, out, in, off, count);
}

ssize_t RealSplice(int in, off_t* in_off, int out, off_t* out_off, size_t len, unsigned flags) {
  if (auto f = Next<ssize_t (*)(int, off_t*, int, off_t*, size_t, unsigned)>(kSplice)) {
    return f(in, in_off, out, out_off, len, flags);
  }
  return ::syscall(SYS_splice, in, in_off, out, out_off, len, flags);
}

int RealFtruncate(int fd, off_t len) {
  if (auto f = Next<int (*)(int, off_t)>(kFtruncate)) return f(fd, len);
  return static_cast<int>(::syscall(SYS_ftruncate, fd, len));
}

int RealTruncate(const char* path, off_t len) {
  if (auto f = Next<int (*)(const char*, off_t)>(kTruncate)) return f(path, len);
  return static_cast<int>(::syscall(SYS_truncate, path, len));
}

int RealFallocate(int fd, int mode, off_t off, off_t len) {
  if (auto f = Next<int (*)(int, int, off_t, off_t)>(kFallocate)) return f(fd, mode, off, len);
  return static_cast<int>(::syscall(SYS_fallocate, fd, mode, off, len));
}

int RealPosixFallocate(int fd, off_t off, off_t len) {
  if (auto f = Next<int (*)(int, off_t, off_t)>(kPosixFallocate)) return f(fd, off, len);
  return ::syscall(SYS_fallocate, fd, 0, off, len) == 0 ? 0 : errno;
}

int RealFsync(int fd) {
  if (auto f = Next<int (*)(int)>(kFsync)) return f(fd);
  return static_cast<int>(::syscall(SYS_fsync, fd));
}

int RealFdatasync(int fd) {
  if (auto f = Next<int (*)(int)>(kFdatasync)) return f(fd);
  return static_cast<int>(::syscall(SYS_fdatasync, fd));
}

int RealSyncFileRange(int fd, off_t off, off_t len, unsigned flags) {
  if (auto f = Next<int (*)(int, off_t, off_t, unsigned)>(kSyncFileRange)) {
    return f(fd, off, len, flags);
  }
  return static_cast<int>(::syscall(SYS_sync_file_range, fd, off, len, flags));
}

int RealClose(int fd) {
  if (auto f = Next<int (*)(int)>(kClose)) return f(fd);
  return static_cast<int>(::syscall(SYS_close, fd));
}

int RealFcntl(int fd, int cmd, void* arg) {
  if (auto f = Next<int (*)(int, int, ...)>(kFcntl)) return f(fd, cmd, arg);
  return static_cast<int>(::syscall(SYS_fcntl, fd, cmd, arg));
}

int RealFlock(int fd, int op) {
  if (auto f = Next<int (*)(int, int)>(kFlock)) return f(fd, op);
  return static_cast<int>(::syscall(SYS_flock, fd, op));
}

int RealLockf(int fd, int cmd, off_t len) {
  if (auto f = Next<int (*)(int, int, off_t)>(kLockf)) return f(fd, cmd, len);
  errno = ENOSYS;  // only before the constructor ran: glibc builds it on fcntl
  return -1;
}

void RealExit(int status) {
  if (auto f = Next<void (*)(int)>(kExit)) f(status);
  for (;;) ::syscall(SYS_exit_group, status);
}

void RealExit2(int status) {
  if (auto f = Next<void (*)(int)>(kExit2)) f(status);
  for (;;) ::syscall(SYS_exit_group, status);
}

}  // namespace umap::preload
