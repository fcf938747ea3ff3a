// GuardedCopy and ProbeRead: an access that reports the signal it raised (SIGBUS, SIGSEGV)
// or 0, catching it in the calling thread with siglongjmp. For tests of mmap-like fault
// behaviour.
#ifndef UMAP_TESTS_RUNTIME_SIGNAL_PROBE_H_
#define UMAP_TESTS_RUNTIME_SIGNAL_PROBE_H_

#include <setjmp.h>
#include <signal.h>

#include <cstddef>
#include <cstring>

// From include/umap/umap.h, which C++ code inside namespace umap cannot include.
extern "C" int umap_handle_signal(int sig, void* info, void* ucontext);

// Top-level namespace: usable from C API tests (see temp_dir.h).
namespace umaptest {

inline sigjmp_buf g_probe_jump;
inline volatile sig_atomic_t g_probe_signal = 0;
// This thread is inside a guarded access: the handler is process-wide while it runs.
inline thread_local volatile sig_atomic_t t_probe_guarded = 0;
inline struct sigaction g_probe_old_bus, g_probe_old_segv;

// A handler installed after Umap's chains to it first (include/umap/umap.h): in signal fault
// mode an ordinary miss is a SIGBUS that Umap resolves. Another thread's fault is not the
// access's to report, and jumping into its context from that thread would only crash
// elsewhere: the disposition from before is put back and the faulting access, run again,
// meets it (Umap's handler, a crash report, or the default action).
inline void OnProbeSignal(int sig, siginfo_t* info, void* ucontext) {
  if (umap_handle_signal(sig, info, ucontext)) return;
  if (!t_probe_guarded) {
    sigaction(sig, sig == SIGBUS ? &g_probe_old_bus : &g_probe_old_segv, nullptr);
    return;
  }
  g_probe_signal = sig;
  siglongjmp(g_probe_jump, 1);
}

// Copies n bytes (dst and/or src in a mapping); returns the signal raised, or 0.
inline int GuardedCopy(char* dst, const char* src, size_t n) {
  struct sigaction sa = {};
  sa.sa_sigaction = OnProbeSignal;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGBUS, &sa, &g_probe_old_bus);
  sigaction(SIGSEGV, &sa, &g_probe_old_segv);
  g_probe_signal = 0;
  if (sigsetjmp(g_probe_jump, 1) == 0) {
    t_probe_guarded = 1;
    std::memcpy(dst, src, n);
  }
  t_probe_guarded = 0;
  sigaction(SIGBUS, &g_probe_old_bus, nullptr);
  sigaction(SIGSEGV, &g_probe_old_segv, nullptr);
  return g_probe_signal;
}

inline int ProbeRead(const volatile char* p) {
  char c;
  return GuardedCopy(&c, const_cast<const char*>(p), 1);
}

}  // namespace umaptest

#endif  // UMAP_TESTS_RUNTIME_SIGNAL_PROBE_H_
