// The symbols libumap_preload.so puts in front of libc's (docs/preload.md). Each forwards
// to libc at once unless the shim is installed and the calling thread is not already
// inside it; the mmap family then goes through Shim, the read/write family through
// KernelAccess. Only these symbols are exported (preload.map).
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "runtime/preload/real_calls.h"
#include "runtime/preload/shim.h"

using umap::preload::ReentryGuard;
using umap::preload::Shim;
namespace real = umap::preload;

static_assert(sizeof(off_t) == sizeof(off64_t), "the *64 aliases assume a 64-bit off_t");

namespace {

// The shim when this call should go through it, else null.
inline Shim* Active() {
  Shim* s = Shim::Get();
  return s != nullptr && !ReentryGuard::active() ? s : nullptr;
}

// Runs the library's constructor before main(), and before most other libraries'
// constructors (preloaded objects are initialised early); until it has run every call goes
// to libc.
__attribute__((constructor)) void InstallShim() { Shim::Install(); }

}  // namespace

extern "C" {

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) noexcept {
  Shim* s = Active();
  if (s == nullptr) return real::RealMmap(addr, len, prot, flags, fd, off);
  ReentryGuard guard;
  return s->Mmap(addr, len, prot, flags, fd, off);
}

// The 64-bit names are the same functions (off_t is 64 bits here).
void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off64_t off) noexcept
    __attribute__((alias("mmap")));

int munmap(void* addr, size_t len) noexcept {
  Shim* s = Active();
  if (s == nullptr) return real::RealMunmap(addr, len);
  ReentryGuard guard;
  return s->Munmap(addr, len);
}

int msync(void* addr, size_t len, int flags) {
  Shim* s = Active();
  if (s == nullptr) return real::RealMsync(addr, len, flags);
  ReentryGuard guard;
  return s->Msync(addr, len, flags);
}

void* mremap(void* old_addr, size_t old_len, size_t new_len, int flags, ...) noexcept {
  void* new_addr = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_addr = va_arg(ap, void*);
    va_end(ap);
  }
  Shim* s = Active();
  if (s == nullptr) return real::RealMremap(old_addr, old_len, new_len, flags, new_addr);
  ReentryGuard guard;
  return s->Mremap(old_addr, old_len, new_len, flags, new_addr);
}

int madvise(void* addr, size_t len, int advice) noexcept {
  Shim* s = Active();
  if (s == nullptr) return real::RealMadvise(addr, len, advice);
  ReentryGuard guard;
  return s->Madvise(addr, len, advice);
}

int mprotect(void* addr, size_t len, int prot) noexcept {
  Shim* s = Active();
  if (s == nullptr) return real::RealMprotect(addr, len, prot);
  ReentryGuard guard;
  return s->Mprotect(addr, len, prot);
}

// SIGBUS dispositions: virtual once the runtime runs in signal mode (SigbusChain); every
// other signal, and every call before that, goes to libc.
int sigaction(int sig, const struct sigaction* act, struct sigaction* old) noexcept {
  Shim* s = Active();
  if (s == nullptr || sig != SIGBUS || !s->sigbus().active()) {
    return real::RealSigaction(sig, act, old);
  }
  return s->sigbus().Sigaction(act, old);
}

namespace {

// signal() and sysv_signal() for SIGBUS while the chain is active: the same dispositions
// glibc would set with sigaction, through the chain.
sighandler_t ChainedSignal(Shim* s, sighandler_t handler, int flags, bool mask_self) {
  struct sigaction act = {}, old = {};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  if (mask_self) sigaddset(&act.sa_mask, SIGBUS);
  act.sa_flags = flags;
  if (s->sigbus().Sigaction(&act, &old) != 0) return SIG_ERR;
  return old.sa_handler;  // shares its storage with sa_sigaction (a union in glibc)
}

}  // namespace

sighandler_t signal(int sig, sighandler_t handler) noexcept {
  Shim* s = Active();
  if (s == nullptr || sig != SIGBUS || !s->sigbus().active()) {
    return real::RealSignal(sig, handler);
  }
  return ChainedSignal(s, handler, SA_RESTART, /*mask_self=*/true);
}

sighandler_t bsd_signal(int sig, sighandler_t handler) noexcept __attribute__((alias("signal")));

sighandler_t sysv_signal(int sig, sighandler_t handler) noexcept {
  Shim* s = Active();
  if (s == nullptr || sig != SIGBUS || !s->sigbus().active()) {
    return real::RealSysvSignal(sig, handler);
  }
  return ChainedSignal(s, handler, SA_RESETHAND | SA_NODEFER, /*mask_self=*/false);
}

sighandler_t __sysv_signal(int sig, sighandler_t handler) noexcept
    __attribute__((alias("sysv_signal")));

// The read/write family: no ReentryGuard here. Touching the buffer faults into the
// runtime's handler threads, which must not see this thread as "inside" anything, and
// these calls never enter the runtime themselves.
ssize_t read(int fd, void* buf, size_t n) {
  Shim* s = Active();
  return s ? s->kernel_access().Read(fd, buf, n) : real::RealRead(fd, buf, n);
}

ssize_t write(int fd, const void* buf, size_t n) {
  Shim* s = Active();
  return s ? s->kernel_access().Write(fd, buf, n) : real::RealWrite(fd, buf, n);
}

ssize_t pread(int fd, void* buf, size_t n, off_t off) {
  Shim* s = Active();
  return s ? s->kernel_access().Pread(fd, buf, n, off) : real::RealPread(fd, buf, n, off);
}

ssize_t pread64(int fd, void* buf, size_t n, off64_t off) __attribute__((alias("pread")));

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  Shim* s = Active();
  return s ? s->kernel_access().Pwrite(fd, buf, n, off) : real::RealPwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off64_t off) __attribute__((alias("pwrite")));

ssize_t readv(int fd, const struct iovec* iov, int iovcnt) {
  Shim* s = Active();
  return s ? s->kernel_access().Readv(fd, iov, iovcnt) : real::RealReadv(fd, iov, iovcnt);
}

ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  Shim* s = Active();
  return s ? s->kernel_access().Writev(fd, iov, iovcnt) : real::RealWritev(fd, iov, iovcnt);
}

ssize_t preadv(int fd, const struct iovec* iov, int iovcnt, off_t off) {
  Shim* s = Active();
  return s ? s->kernel_access().Preadv(fd, iov, iovcnt, off)
           : real::RealPreadv(fd, iov, iovcnt, off);
}

ssize_t preadv64(int fd, const struct iovec* iov, int iovcnt, off64_t off)
    __attribute__((alias("preadv")));

ssize_t pwritev(int fd, const struct iovec* iov, int iovcnt, off_t off) {
  Shim* s = Active();
  return s ? s->kernel_access().Pwritev(fd, iov, iovcnt, off)
           : real::RealPwritev(fd, iov, iovcnt, off);
}

ssize_t pwritev64(int fd, const struct iovec* iov, int iovcnt, off64_t off)
    __attribute__((alias("pwritev")));

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

}  // extern "C"
