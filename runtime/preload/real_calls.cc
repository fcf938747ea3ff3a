#include "runtime/preload/real_calls.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "runtime/preload/real_file_calls.h"

namespace umap::preload {
namespace {

enum Fn : int {
  kMmap,
  kMunmap,
  kMsync,
  kMremap,
  kMadvise,
  kMprotect,
  kRead,
  kWrite,
  kPread,
  kPwrite,
  kReadv,
  kWritev,
  kPreadv,
  kPwritev,
  kRecv,
  kSend,
  kRecvfrom,
  kSendto,
  kSigaction,
  kSignal,
  kSysvSignal,
  kCount
};

constexpr const char* kNames[kCount] = {
    "mmap",  "munmap",  "msync",    "mremap", "madvise",   "mprotect", "read",
    "write", "pread64", "pwrite64", "readv",  "writev",    "preadv64", "pwritev64",
    "recv",  "send",    "recvfrom", "sendto", "sigaction", "signal",   "sysv_signal"};

std::atomic<void*> g_fn[kCount];

template <typename F>
F Next(Fn f) {
  return reinterpret_cast<F>(g_fn[f].load(std::memory_order_relaxed));
}

// Raw system calls return -1 with errno set (glibc's syscall() wrapper does that).
inline long Hi(off_t off) { return static_cast<long>(static_cast<uint64_t>(off) >> 32); }

}  // namespace

extern "C" int __sigaction(int sig, const struct sigaction* act, struct sigaction* old);

void ResolveRealCalls() {
  ResolveRealFileCalls();
  for (int i = 0; i < kCount; ++i) {
    if (g_fn[i].load(std::memory_order_relaxed) != nullptr) continue;
    // dlsym may allocate (its error buffer), and allocation may map memory: those calls
    // come back here with the pointer still null and take the system-call path.
    void* p = ::dlsym(RTLD_NEXT, kNames[i]);
    g_fn[i].store(p, std::memory_order_relaxed);
  }
}

void* RealMmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (auto f = Next<void* (*)(void*, size_t, int, int, int, off_t)>(kMmap)) {
    return f(addr, len, prot, flags, fd, off);
  }
  return reinterpret_cast<void*>(::syscall(SYS_mmap, addr, len, prot, flags, fd, off));
}

int RealMunmap(void* addr, size_t len) {
  if (auto f = Next<int (*)(void*, size_t)>(kMunmap)) return f(addr, len);
  return static_cast<int>(::syscall(SYS_munmap, addr, len));
}

int RealMsync(void* addr, size_t len, int flags) {
  if (auto f = Next<int (*)(void*, size_t, int)>(kMsync)) return f(addr, len, flags);
  return static_cast<int>(::syscall(SYS_msync, addr, len, flags));
}

void* RealMremap(void* old_addr, size_t old_len, size_t new_len, int flags, void* new_addr) {
  if (auto f = Next<void* (*)(void*, size_t, size_t, int, ...)>(kMremap)) {
    return f(old_addr, old_len, new_len, flags, new_addr);
  }
  return reinterpret_cast<void*>(
      ::syscall(SYS_mremap, old_addr, old_len, new_len, flags, new_addr));
}

int RealMadvise(void* addr, size_t len, int advice) {
  if (auto f = Next<int (*)(void*, size_t, int)>(kMadvise)) return f(addr, len, advice);
  return static_cast<int>(::syscall(SYS_madvise, addr, len, advice));
}

int RealMprotect(void* addr, size_t len, int prot) {
  if (auto f = Next<int (*)(void*, size_t, int)>(kMprotect)) return f(addr, len, prot);
  return static_cast<int>(::syscall(SYS_mprotect, addr, len, prot));
}

int RealSigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (auto f = Next<int (*)(int, const struct sigaction*, struct sigaction*)>(kSigaction)) {
    return f(sig, act, old);
  }
  return __sigaction(sig, act, old);
}

namespace {

// signal()/sysv_signal() on top of sigaction, as glibc implements them.
sighandler_t SignalVia(int sig, sighandler_t handler, int flags, bool mask_self) {
  struct sigaction act = {}, old = {};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  if (mask_self) sigaddset(&act.sa_mask, sig);
  act.sa_flags = flags;
  if (RealSigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

}  // namespace

sighandler_t RealSignal(int sig, sighandler_t handler) {
  if (auto f = Next<sighandler_t (*)(int, sighandler_t)>(kSignal)) return f(sig, handler);
  return SignalVia(sig, handler, SA_RESTART, /*mask_self=*/true);
}

sighandler_t RealSysvSignal(int sig, sighandler_t handler) {
  if (auto f = Next<sighandler_t (*)(int, sighandler_t)>(kSysvSignal)) return f(sig, handler);
  return SignalVia(sig, handler, SA_RESETHAND | SA_NODEFER, /*mask_self=*/false);
}

ssize_t RealRead(int fd, void* buf, size_t n) {
  if (auto f = Next<ssize_t (*)(int, void*, size_t)>(kRead)) return f(fd, buf, n);
  return ::syscall(SYS_read, fd, buf, n);
}

ssize_t RealWrite(int fd, const void* buf, size_t n) {
  if (auto f = Next<ssize_t (*)(int, const void*, size_t)>(kWrite)) return f(fd, buf, n);
  return ::syscall(SYS_write, fd, buf, n);
}

ssize_t RealPread(int fd, void* buf, size_t n, off_t off) {
  if (auto f = Next<ssize_t (*)(int, void*, size_t, off_t)>(kPread)) return f(fd, buf, n, off);
  return ::syscall(SYS_pread64, fd, buf, n, off);
}

ssize_t RealPwrite(int fd, const void* buf, size_t n, off_t off) {
  if (auto f = Next<ssize_t (*)(int, const void*, size_t, off_t)>(kPwrite)) {
    return f(fd, buf, n, off);
  }
  return ::syscall(SYS_pwrite64, fd, buf, n, off);
}

ssize_t RealReadv(int fd, const struct iovec* iov, int iovcnt) {
  if (auto f = Next<ssize_t (*)(int, const struct iovec*, int)>(kReadv)) return f(fd, iov, iovcnt);
  return ::syscall(SYS_readv, fd, iov, iovcnt);
}

ssize_t RealWritev(int fd, const struct iovec* iov, int iovcnt) {
  if (auto f = Next<ssize_t (*)(int, const struct iovec*, int)>(kWritev)) {
    return f(fd, iov, iovcnt);
  }
  return ::syscall(SYS_writev, fd, iov, iovcnt);
}

ssize_t RealPreadv(int fd, const struct iovec* iov, int iovcnt, off_t off) {
  if (auto f = Next<ssize_t (*)(int, const struct iovec*, int, off_t)>(kPreadv)) {
    return f(fd, iov, iovcnt, off);
  }
  return ::syscall(SYS_preadv, fd, iov, iovcnt, static_cast<long>(off), Hi(off));
}

ssize_t RealPwritev(int fd, const struct iovec* iov, int iovcnt, off_t off) {
  if (auto f = Next<ssize_t (*)(int, const struct iovec*, int, off_t)>(kPwritev)) {
    return f(fd, iov, iovcnt, off);
  }
  return ::syscall(SYS_pwritev, fd, iov, iovcnt, static_cast<long>(off), Hi(off));
}

ssize_t RealRecv(int fd, void* buf, size_t n, int flags) {
  if (auto f = Next<ssize_t (*)(int, void*, size_t, int)>(kRecv)) return f(fd, buf, n, flags);
  return ::syscall(SYS_recvfrom, fd, buf, n, flags, nullptr, nullptr);
}

ssize_t RealSend(int fd, const void* buf, size_t n, int flags) {
  if (auto f = Next<ssize_t (*)(int, const void*, size_t, int)>(kSend)) return f(fd, buf, n, flags);
  return ::syscall(SYS_sendto, fd, buf, n, flags, nullptr, 0);
}

ssize_t RealRecvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* from,
                     socklen_t* fromlen) {
  if (auto f =
          Next<ssize_t (*)(int, void*, size_t, int, struct sockaddr*, socklen_t*)>(kRecvfrom)) {
    return f(fd, buf, n, flags, from, fromlen);
  }
  return ::syscall(SYS_recvfrom, fd, buf, n, flags, from, fromlen);
}

ssize_t RealSendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* to,
                   socklen_t tolen) {
  if (auto f = Next<ssize_t (*)(int, const void*, size_t, int, const struct sockaddr*, socklen_t)>(
          kSendto)) {
    return f(fd, buf, n, flags, to, tolen);
  }
  return ::syscall(SYS_sendto, fd, buf, n, flags, to, tolen);
}

}  // namespace umap::preload
