// Runs benchmark runs in child processes inside one fresh memory cgroup, so that each
// backend is measured under the same memory budget: the limit applies to the child's whole
// memory, its page cache included, and the cgroup's peak over the timed region is reported.
//
// Every run gets its own fork()ed child, all in the same cgroup, started together: each
// child sets up its backend, reports ready, and waits; the parent resets the cgroup's peak
// and releases them all; when every child has ended its timed region the parent reads the
// peak, then collects each child's result (one JSON line, run_json.h) and exit status. A
// child killed by the OOM killer or a signal, or one that exits without a result, yields a
// failed RunResult that says what happened.
//
// The caller must be single-threaded (fork). Runs that write must each use their own file
// (each child verifies and restores only its own writes); runs that only read may share one
// (umap-bench --procs, bench/multi_process.h).
#ifndef UMAP_BENCH_CGROUP_RUNNER_H_
#define UMAP_BENCH_CGROUP_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/bench_file.h"
#include "bench/run_result.h"
#include "bench/workload.h"

namespace umap_bench {

struct ChildRun {
  const BenchFile* file = nullptr;  // not owned; outlives the call
  Workload workload;
  RunConfig config;
  int repeat = 0;
  uint32_t tag = 1;
  std::string label;  // for the JSON line
};

struct ChildOutcome {
  RunResult result;  // cgroup_* fields, process and processes filled in
  std::string json;  // the child's JSON line with the cgroup fields, "" when it had none
  bool oom_killed = false;
  int pid = 0;
  int wait_status = 0;  // waitpid's status: WIFSIGNALED/WTERMSIG say whether a signal ended it
  // The parent's clock from releasing the children to the last one's end of its timed
  // region (or death): the same in every outcome of one call.
  double group_wall_s = 0;
};

// "exit 0", "exit 3 (SIGBUS, see above)", "killed by signal 9 (Killed)", ...
std::string HowItEnded(int wait_status);

// Runs `runs` as described above in a new cgroup named `name` under `parent` with
// `limit_bytes`; the cgroup is removed afterwards. An error status means the runs could not
// be started (no cgroup, fork failed, caller not single-threaded), not that a run failed.
absl::StatusOr<std::vector<ChildOutcome>> RunInMemoryCgroup(const std::string& parent,
                                                            const std::string& name,
                                                            uint64_t limit_bytes,
                                                            const std::vector<ChildRun>& runs);

}  // namespace umap_bench

#endif  // UMAP_BENCH_CGROUP_RUNNER_H_
