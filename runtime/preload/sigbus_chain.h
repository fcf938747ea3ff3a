// SigbusChain: keeps Umap's SIGBUS handling first when a program installs its own handler.
//
// In signal fault mode (the runtime's default) Umap resolves page faults inside a SIGBUS
// handler that it installs when its runtime starts, chaining to whatever was there before.
// A program that sets a SIGBUS handler later (Python's faulthandler.enable(), a JVM, a
// crash reporter) would replace it, and the next fault on a Umap page would reach the
// program as a bus error. So once the shim's runtime runs in signal mode, the program's
// SIGBUS calls (sigaction, signal, bsd_signal, sysv_signal) are virtual: the program sees
// and sets its own disposition as if nothing were in between, while the kernel's handler
// becomes one that asks Umap first (umap_handle_signal) and otherwise delivers the signal
// as the program's disposition says: its handler with its flags and mask (SA_SIGINFO,
// SA_RESETHAND, sa_mask), SIG_IGN (a kill(2) is ignored; a real bus error still kills, as
// the kernel does for a fault), or SIG_DFL (the process dies with SIGBUS).
//
// Thread and signal safety: the handler reads the program's disposition from one of two
// buffers flipped atomically; the calls that change it are serialised by a spin flag and
// never allocate (sigaction is async-signal-safe, so this stays so).
#ifndef UMAP_RUNTIME_PRELOAD_SIGBUS_CHAIN_H_
#define UMAP_RUNTIME_PRELOAD_SIGBUS_CHAIN_H_

#include <signal.h>

#include <atomic>

namespace umap::preload {

class SigbusChain {
 public:
  // Before the shim starts its runtime: takes the program's SIGBUS disposition as the
  // program's view (what Umap's handler will chain to).
  void BeforeRuntime();
  // The runtime started in signal mode: from now on Sigaction() serves the program.
  void Activate();
  bool active() const { return active_.load(std::memory_order_acquire); }

  // sigaction(SIGBUS, act, old) for the program while active: old gets the program's
  // previous view; a new act becomes its view, and the kernel's handler is the chain's.
  // Returns 0, or -1 with errno from the kernel.
  int Sigaction(const struct sigaction* act, struct sigaction* old);

  // In a fork() child, whose shim is off: gives the kernel the program's own disposition
  // back (the parent's Umap state must not be used from the child), and deactivates the
  // chain until the child's own runtime starts. Async-signal-safe.
  void RestoreProgramDisposition();

 private:
  static void Handler(int sig, siginfo_t* info, void* ucontext);
  // Delivers a SIGBUS that was not Umap's as disposition `a` says.
  void Deliver(const struct sigaction& a, int sig, siginfo_t* info, void* ucontext);
  void SetView(const struct sigaction& a);

  std::atomic<bool> active_{false};
  std::atomic<bool> installed_{false};  // the kernel's handler is Handler
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  struct sigaction views_[2] = {};
  std::atomic<int> current_{0};
};

}  // namespace umap::preload

#endif  // UMAP_RUNTIME_PRELOAD_SIGBUS_CHAIN_H_
