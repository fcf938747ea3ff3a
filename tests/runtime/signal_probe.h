// ProbeRead: reads one byte and reports the signal it raised (SIGBUS, SIGSEGV) or 0, catching
// it in the calling thread with siglongjmp. For tests of mmap-like fault behaviour.
#ifndef UMAP_TESTS_RUNTIME_SIGNAL_PROBE_H_
#define UMAP_TESTS_RUNTIME_SIGNAL_PROBE_H_

#include <setjmp.h>
#include <signal.h>

// Top-level namespace: usable from C API tests (see temp_dir.h).
namespace umaptest {

inline sigjmp_buf g_probe_jump;
inline volatile sig_atomic_t g_probe_signal = 0;

inline void OnProbeSignal(int sig) {
  g_probe_signal = sig;
  siglongjmp(g_probe_jump, 1);
}

inline int ProbeRead(const volatile char* p) {
  struct sigaction sa = {}, old_bus = {}, old_segv = {};
  sa.sa_handler = OnProbeSignal;
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
