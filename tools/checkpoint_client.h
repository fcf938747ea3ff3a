// The client side of the checkpoint control socket (runtime/control/checkpoint_control.h), for
// umap-ctl: ask a Umap process to quiesce, resume or say its state; find the processes of
// a tree; and the criu --action-script that drives them around a dump and a restore
// (docs/operations.md "Checkpoint a job with CRIU").
#ifndef UMAP_TOOLS_CHECKPOINT_CLIENT_H_
#define UMAP_TOOLS_CHECKPOINT_CLIENT_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace umap::tools {

// Sends `command` ("quiesce", "resume", "state") to process `pid` and returns the state it
// answered ("running", "quiesced", ...). Errors: kNotFound (errno ECONNREFUSED) when the
// process serves no control socket; the process's own error (its errno and message, e.g.
// ESTALE for a fenced runtime); ETIMEDOUT after `timeout_s` seconds without an answer.
absl::StatusOr<std::string> Request(pid_t pid, const std::string& command, int timeout_s);

// `root` and all its descendants, parents first (from /proc/*/stat).
std::vector<pid_t> ProcessTree(pid_t root);

// Whether process `pid` holds a userfaultfd or an io_uring (what CRIU cannot dump).
bool HoldsUndumpable(pid_t pid);

struct ControlResult {
  std::vector<pid_t> done;  // processes that answered OK
  int exit_code = 0;        // 0 all done; 1 a process refused or failed; 3 one unreachable
};

// Sends `command` to every Umap process among `pids`; with `tree`, to every Umap process
// in their trees (processes without a control socket and without a userfaultfd or
// io_uring are not Umap's and are skipped; one that holds either but serves no socket is an
// error: it was started without UMAP_CHECKPOINT=1). Prints one line per process.
ControlResult Control(const std::vector<pid_t>& pids, const std::string& command, bool tree,
                      int timeout_s);

// criu --action-script mode (CRTOOLS_SCRIPT_ACTION, CRTOOLS_INIT_PID): pre-dump quiesces
// the dumped tree and leaves a guardian that resumes its processes if they are still alive
// once criu exits (the dump failed, or --leave-running); post-resume resumes the restored
// tree; other actions do nothing. Returns the exit code for criu (non-zero: criu aborts a
// dump; after a restore it reports the failure).
int CriuHook(int timeout_s);

}  // namespace umap::tools

#endif  // UMAP_TOOLS_CHECKPOINT_CLIENT_H_
