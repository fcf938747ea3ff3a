// RealCalls: the libc functions the LD_PRELOAD shim forwards to.
//
// Each Real*() calls the next definition of the symbol (dlsym(RTLD_NEXT)), resolved once by
// ResolveRealCalls() from the library's constructor. Before that (a call from another
// library's constructor, or from inside dlsym itself, which may allocate and so map memory)
// and whenever resolution failed, it issues the raw system call instead, which allocates
// nothing and takes no lock. The system-call fallback is not a pthread cancellation point;
// it is used only until the constructor has run.
//
// Thread safety: every function may be called from any thread at any time, including from
// a signal handler (the resolved pointers are read with one relaxed atomic load).
#ifndef UMAP_RUNTIME_PRELOAD_REAL_CALLS_H_
#define UMAP_RUNTIME_PRELOAD_REAL_CALLS_H_

#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>

namespace umap::preload {

// Resolves every pointer with dlsym(RTLD_NEXT). Idempotent; call from the constructor.
void ResolveRealCalls();

void* RealMmap(void* addr, size_t len, int prot, int flags, int fd, off_t off);
int RealMunmap(void* addr, size_t len);
int RealMsync(void* addr, size_t len, int flags);
void* RealMremap(void* old_addr, size_t old_len, size_t new_len, int flags, void* new_addr);
int RealMadvise(void* addr, size_t len, int advice);
int RealMprotect(void* addr, size_t len, int prot);
// Before resolution: glibc's exported __sigaction (a raw rt_sigaction would need libc's
// signal-return trampoline).
int RealSigaction(int sig, const struct sigaction* act, struct sigaction* old);
// signal() (BSD semantics) and sysv_signal(); before resolution emulated with sigaction as
// glibc defines them.
sighandler_t RealSignal(int sig, sighandler_t handler);
sighandler_t RealSysvSignal(int sig, sighandler_t handler);

ssize_t RealRead(int fd, void* buf, size_t n);
ssize_t RealWrite(int fd, const void* buf, size_t n);
ssize_t RealPread(int fd, void* buf, size_t n, off_t off);
ssize_t RealPwrite(int fd, const void* buf, size_t n, off_t off);
ssize_t RealReadv(int fd, const struct iovec* iov, int iovcnt);
ssize_t RealWritev(int fd, const struct iovec* iov, int iovcnt);
ssize_t RealPreadv(int fd, const struct iovec* iov, int iovcnt, off_t off);
ssize_t RealPwritev(int fd, const struct iovec* iov, int iovcnt, off_t off);
ssize_t RealRecv(int fd, void* buf, size_t n, int flags);
ssize_t RealSend(int fd, const void* buf, size_t n, int flags);
ssize_t RealRecvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* from,
                     socklen_t* fromlen);
ssize_t RealSendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* to,
                   socklen_t tolen);

}  // namespace umap::preload

#endif  // UMAP_RUNTIME_PRELOAD_REAL_CALLS_H_
