// umap-bench --procs N: one run of a workload by N processes at once on the *same* file, all
// in one memory cgroup, each with its own backend instance (its own umap runtime and cache,
// its own mmap), as N jobs of one node reading one input would. The groundwork for comparing
// "1 process x 4 threads" with "4 processes x 1 thread" under one budget (issue 39).
//
// The processes are forked by RunInMemoryCgroup (cgroup_runner.h) after the file is
// prepared and the cgroup made, start together (each waits on its socket for the parent's
// go), and send their results back as JSON lines. The ops are split: each process runs
// --threads threads doing ops/N ops each (the first ops%N processes one more), so the total
// is what one process with --threads threads does; each process draws its own items (its
// seed is the run's plus its index). The run's figures: ops of all of them over the wall
// time from the common start to the last finish (the parent's clock), the cgroup's peak for
// the whole group, and each process's own figures.
//
// Only read workloads (each child verifies and restores only its own writes). The caller
// must be single-threaded (fork).
#ifndef UMAP_BENCH_MULTI_PROCESS_H_
#define UMAP_BENCH_MULTI_PROCESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/bench_file.h"
#include "bench/cgroup_runner.h"
#include "bench/run_result.h"
#include "bench/workload.h"

namespace umap_bench {

// One run: `run.workload.procs` processes on `run.file`, with the workload's ops per thread
// being the total for one process (split as above).
struct SameFileOutcome {
  RunResult total;  // the group: summed ops, CPU, faults, RSS; wall_s from the common start
  std::vector<ChildOutcome> processes;  // each process's own result, in process order
  std::string json;         // one JSON line (no newline): total's fields, "procs", "per_process"
  bool oom_killed = false;  // the OOM killer ended at least one process
  // "process 2 of 4 (pid 1234) killed by signal 9 (Killed); ..." for every process a signal
  // ended, "" when none was.
  std::string killed;
};

// Runs it in a new cgroup `name` under `parent` limited to `limit_bytes` (removed after).
// An error status means the run could not be started, not that it failed.
absl::StatusOr<SameFileOutcome> RunSameFile(const std::string& parent, const std::string& name,
                                            uint64_t limit_bytes, const ChildRun& run);

// Process p's share of `ops` ops per thread among `procs` processes.
uint64_t OpsOfProcess(uint64_t ops, unsigned procs, unsigned p);

// One line per process for the progress output: ops, seconds, ops/s, CPU, peak RSS, how it
// ended.
std::string ProcessLines(const SameFileOutcome& o);

}  // namespace umap_bench

#endif  // UMAP_BENCH_MULTI_PROCESS_H_
