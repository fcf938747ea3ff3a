// The symbols libumap_preload.so puts in front of libc's (docs/preload.md): the mmap family
// and SIGBUS dispositions here, the read/write and file families in interpose_io.cc. Each
// forwards to libc at once unless the shim is installed and the calling thread is not
// already inside it; the mmap family then goes through Shim. Only these symbols are
// exported (preload.map).
#include <stdarg.h>
#include <sys/mman.h>
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
  if (ReentryGuard::active()) return nullptr;
  Shim* s = Shim::Get();
  return s != nullptr ? s : Shim::AdoptInChild();  // a fork() child's first call
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

}  // extern "C"
