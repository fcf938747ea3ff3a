// CheckpointControl: the process's checkpoint control socket, through which a CRIU action
// script (umap-ctl, tools/) tells a running Umap program to quiesce before a dump and to
// resume after a restore (docs/operations.md "Checkpoint a job with CRIU"; why a socket and
// not a signal or a CRIU plugin: docs/design.md "Quiesce and resume").
//
// One listening socket per process, in the abstract unix namespace (ControlSocketName: no
// file to clean up, gone with the process), served by one thread ("umap-ctl"), started by
// the first runtime created with umap_config.checkpoint_control (UMAP_CHECKPOINT=1). That
// thread and the socket are the only Umap parts that stay through a quiesce and a dump:
// the thread waits in accept(2), which CRIU restarts after a restore, and a listening unix
// socket is dumped and restored by CRIU.
//
// Protocol: the client sends one line, "quiesce", "resume" or "state", and reads one line:
// "ok STATE" or "error ERRNO-NAME MESSAGE"; then the server closes the connection (so no
// connected socket is left in the process when the client sees end of file). Only root and
// the process's own user may connect (SO_PEERCRED); others get "error EACCES".
#ifndef UMAP_RUNTIME_CONTROL_CHECKPOINT_CONTROL_H_
#define UMAP_RUNTIME_CONTROL_CHECKPOINT_CONTROL_H_

#include <sys/types.h>

#include <functional>
#include <string>

#include "absl/status/status.h"

namespace umap::runtime {

// The abstract socket name of process `pid` (without the leading NUL byte).
std::string ControlSocketName(pid_t pid);

struct CheckpointHandlers {
  std::function<absl::Status()> quiesce;
  std::function<absl::Status()> resume;
  std::function<std::string()> state;  // "running", "quiesced", ...
};

// Starts the control thread the first time in this process (binding
// ControlSocketName(getpid())); later calls do nothing and return OK. Errors: the socket cannot be created or bound (EADDRINUSE:
// another process of this pid namespace and network namespace holds the name).
absl::Status StartCheckpointControl(CheckpointHandlers handlers);

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_CONTROL_CHECKPOINT_CONTROL_H_
