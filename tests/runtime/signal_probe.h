// ProbeRead: reads one byte and reports the signal it raised (SIGBUS, SIGSEGV) or 0, catching
// it in the calling thread with siglongjmp. For tests of mmap-like fault behaviour.
#ifndef UMAP_TESTS_RUNTIME_SIGNAL_PROBE_H_
#define UMAP_TESTS_RUNTIME_SIGNAL_PROBE_H_

#include <setjmp.h>
#include <signal.h>

// From include/umap/umap.h, which C++ code inside namespace umap cannot include.
extern "C" int umap_handle_signal(int sig, void* info, void* ucontext);

// Top-level namespace: usable from C API tests (see temp_dir.h).
namespace umaptest {

inline sigjmp_buf g_probe_jump;
inline volatile sig_atomic_t g_probe_signal = 0;

// A handler installed after Umap's chains to it first (include/umap/umap.h): in signal fault
// mode an ordinary miss is a SIGBUS that Umap resolves.
inline void OnProbeSignal(int sig, siginfo_t* info, void* ucontext) {
  if (umap_handle_signal(sig, info, ucontext)) return;
  g_probe_signal = sig;
  siglongjmp(g_probe_jump, 1);
}

inline int ProbeRead(const volatile char* p) {
  struct sigaction sa = {}, old_bus = {}, old_segv = {};
  sa.sa_sigaction = OnProbeSignal;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGBUS, &sa, &old_bus);
  sigaction(SIGSEGV, &sa, &old_segv);
  g_probe_signal = 0;
  if (sigsetjmp(g_probe_jump, 1) == 0) {
    (void)*p;
  }
  sigaction(SIGBUS, &old_bus, nullptr);
  sigaction(SIGSEGV, &old_segv, nullptr);
  return g_probe_signal;
}

}  // namespace umaptest

#endif  // UMAP_TESTS_RUNTIME_SIGNAL_PROBE_H_
