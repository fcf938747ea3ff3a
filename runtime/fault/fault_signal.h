// The process-wide SIGBUS dispatcher of runtimes in signal fault mode.
//
// In signal mode a runtime's userfaultfd has UFFD_FEATURE_SIGBUS: a fault on a mapped page
// that is not resident (or, in a writable mapping, write-protected) raises SIGBUS in the
// faulting thread instead of queueing a message for a handler thread. The handler installed
// here resolves the fault in that thread — reads the block, installs it, returns — so a miss
// costs what the kernel's own page-cache miss costs: one sleep on the I/O, no hand-off to
// another thread and back.
//
// Any SIGBUS that is not such a fault (a poisoned page: end of file or a failed read; a bus
// error elsewhere; a signal sent with kill) goes to the handler that was installed before
// Umap's (SIG_DFL: the process dies with SIGBUS, as it would without Umap).
//
// A program that installs its own SIGBUS handler after the first signal-mode runtime exists
// must call umap_handle_signal() first in it (include/umap/umap.h); the preload library does
// that for programs it runs.
//
// Checkpoints (Runtime::Quiesce): a quiesced runtime's ranges are PROT_NONE and no longer
// registered with a userfaultfd, so an access raises SIGSEGV. The SIGSEGV handler installed
// by InstallQuiesceSignal (at the first quiesce, chaining to the handler before it) parks
// such a thread until the runtime runs again, then returns so that the access is retried;
// an access to a fenced runtime's range goes on to the previous SIGSEGV disposition. A
// fault taken while a quiesce is writing back (signal mode: SIGBUS) parks the same way.
// Parked threads sleep on one process-wide futex word, so a runtime can be destroyed while
// threads sleep on it.
#ifndef UMAP_RUNTIME_FAULT_FAULT_SIGNAL_H_
#define UMAP_RUNTIME_FAULT_FAULT_SIGNAL_H_

#include <signal.h>

#include "absl/status/status.h"

namespace umap::runtime {

// What the signal handlers need of a runtime. Runtime implements it; every call is made
// from a signal handler and must be async-signal-safe.
class FaultSignalTarget {
 public:
  // Signal dispatch of a SIGSEGV (SEGV_ACCERR) at addr: kNotOurs (not in one of its
  // mappings, or the mapping's protection forbids it: the application's own error),
  // kRetry (running again since a quiesce made the page inaccessible), kPark (quiescing or
  // quiesced: wait, then retry), kFenced (the application gets the SIGSEGV).
  enum class QuiescedAccess { kNotOurs, kRetry, kPark, kFenced };
  virtual QuiescedAccess ClassifyQuiescedAccess(uint64_t addr, bool write) = 0;
  // Signal fault mode: resolves a fault at `addr` in the calling thread if it lies in one
  // of its mappings; false when it does not.
  virtual bool HandleFaultSignal(uint64_t addr, bool write) = 0;
  virtual bool signal_mode() const = 0;

 protected:
  ~FaultSignalTarget() = default;
};

// Registers `rt` with the dispatcher (every runtime, whatever its fault mode), installing
// the SIGBUS handler on first use by a signal-mode runtime.
// Errors: ENOMEM when too many runtimes are registered; sigaction's errno.
absl::Status AttachFaultSignal(FaultSignalTarget* rt);
// Installs the SIGSEGV handler for quiesced ranges (once per process; later calls do
// nothing). Errors: sigaction's errno.
absl::Status InstallQuiesceSignal();
// Removes `rt`; when this returns no signal handler is using it any more.
void DetachFaultSignal(FaultSignalTarget* rt);

// Resolves the fault described by (sig, info, ucontext) if it belongs to a registered
// runtime; true when it did (the faulting access is retried when the handler returns).
// SIGBUS: a userfaultfd fault of a signal-mode runtime. SIGSEGV: an access to a quiesced
// range (returns once the runtime runs again; false when it is fenced).
// Async-signal-safe on the success path.
bool DispatchFaultSignal(int sig, siginfo_t* info, void* ucontext);

// The parking word's generation, read before deciding to park.
uint32_t ParkGeneration();
// Sleeps until the generation is no longer `generation` (a runtime resumed or was fenced).
// Async-signal-safe.
void ParkFaultingThread(uint32_t generation);
// Bumps the generation and wakes every parked thread: each retries its access.
void WakeParkedThreads();

// fork(): held across it by the runtime's pthread_atfork handlers; in the child the
// parent's runtimes are forgotten (their threads do not exist there).
void LockFaultSignalForFork();
void UnlockFaultSignalAfterFork(bool child);
// The SIGBUS disposition is no longer Umap's handler (the LD_PRELOAD shim gave a fork()
// child the program's own back): the next runtime in signal mode installs it again.
void FaultSignalDispositionRestored();
// Hands a signal on to the disposition `prev` that a Umap handler replaced: its handler, or
// the default action (a fault re-executes the access and meets the default disposition; a
// signal sent by kill(2) is raised again). Async-signal-safe.
void ChainToPrevious(const struct sigaction& prev, int sig, siginfo_t* info, void* ucontext);

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_FAULT_FAULT_SIGNAL_H_
