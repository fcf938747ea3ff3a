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
#ifndef UMAP_RUNTIME_FAULT_SIGNAL_H_
#define UMAP_RUNTIME_FAULT_SIGNAL_H_

#include <signal.h>

#include "absl/status/status.h"

namespace umap::runtime {

class Runtime;

// Registers `rt` with the dispatcher, installing the SIGBUS handler on first use.
// Errors: ENOMEM when too many runtimes are registered; sigaction's errno.
absl::Status AttachFaultSignal(Runtime* rt);
// Removes `rt`; when this returns no signal handler is using it any more.
void DetachFaultSignal(Runtime* rt);

// Resolves the fault described by (sig, info, ucontext) if it belongs to a registered
// runtime; true when it did (the faulting access is retried when the handler returns).
// Async-signal-safe on the success path.
bool DispatchFaultSignal(int sig, siginfo_t* info, void* ucontext);

// Hands a signal on to the disposition `prev` that a Umap handler replaced: its handler, or
// the default action (a fault re-executes the access and meets the default disposition; a
// signal sent by kill(2) is raised again). Async-signal-safe.
void ChainToPrevious(const struct sigaction& prev, int sig, siginfo_t* info, void* ucontext);

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_FAULT_SIGNAL_H_
