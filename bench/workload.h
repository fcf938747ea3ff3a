// Workload runner shared by umap-bench and umap-demo: one timed run of one access pattern
// through one backend (backend.h) on one BenchFile, with the result checked. After a write
// run the whole file is read back and checked (written items: the tag value; the others:
// the original), then the written items are restored, so every run starts from the same
// file.
//
// Threads: RunOnce() is called from one thread at a time; it starts and joins its own
// workers. Nothing here is thread-safe across concurrent RunOnce() calls on one file.
#ifndef UMAP_BENCH_WORKLOAD_H_
#define UMAP_BENCH_WORKLOAD_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/backend.h"
#include "bench/bench_file.h"
#include "bench/run_result.h"

namespace umap_bench {

// kReuse: uniform over a working set (the first working_set of the file), re-visited;
// kPhase: like kReuse for the first half of each thread's ops, then over a quarter of that
// working set (the working set shrinks mid-run).
enum class Pattern { kRandom, kSequential, kStrided, kReuse, kPhase };
enum class Access { kRead, kWrite, kMixed };
// How much of every read op is compared with the expected words.
enum class ReadCheck { kEnds, kAll };

const char* PatternName(Pattern p);
const char* AccessName(Access a);
absl::StatusOr<Pattern> ParsePattern(const std::string& s);
absl::StatusOr<Access> ParseAccess(const std::string& s);

struct Workload {
  Pattern pattern = Pattern::kRandom;
  Access access = Access::kRead;
  size_t op_size = 4096;        // bytes per op; item unit for writes and verification
  double locality = 0;          // random only: P(next op is the item after the previous)
  uint64_t stride_items = 16;   // strided: distance between consecutive ops, in items
  double write_fraction = 0.5;  // mixed only
  double working_set = 0.25;    // reuse and phase: fraction of the file
  uint64_t ops_per_thread = 10000;
  unsigned threads = 1;
  uint64_t sync_every = 0;  // umsync/msync/fdatasync every N ops per thread (0: end only)
  ReadCheck read_check = ReadCheck::kEnds;
  uint64_t seed = 1;
  // Processes running this workload at once, each on its own file, all in one memory
  // cgroup (umap-bench --memory-limit --processes); RunOnce runs one of them.
  unsigned processes = 1;
  // Processes running this workload at once on the *same* file, all in one memory cgroup
  // (umap-bench --procs, bench/multi_process.h); RunOnce runs one of them, whose
  // ops_per_thread is then its share of the ops.
  unsigned procs = 1;

  bool writes() const { return access != Access::kRead; }
  // "random-read", "random-write-L0.8", "sequential-mixed50", ... (no thread count);
  // "-x2" at the end for two processes on their own files, "-p4" for four on one.
  std::string Name() const;
};

// Everything about one run that is not the workload.
struct RunConfig {
  std::string backend = "umap";  // a registered backend name (backend.h)
  BackendOptions options;
  bool drop_caches = false;    // also /proc/sys/vm/drop_caches before each run
  double stall_seconds = 120;  // no op finished for this long: report and exit(4)
  double max_seconds = 0;      // > 0: the workers stop after this long (ops done so far count)
  // Called after the set-up, when the workers wait for the start; the timed region starts
  // when it returns OK (a child in a memory cgroup waits here for its parent's go).
  std::function<absl::Status()> start_gate;
  // Called right after the timed region (the parent then reads the cgroup's peak).
  std::function<void()> timed_end;
  // Test hook: overwrite file word TEST_corrupt_word (read runs: before the run, restored
  // after it; write runs: after the run, before verification), to prove the checks bite.
  uint64_t TEST_corrupt_word = ~0ull;
};

// Fresh backend, page cache dropped, workers started and released together, timed until
// every op (and, for writes, the final sync) is done. A failed check is reported in
// RunResult::error (verified=false); a failure to run at all is an error status.
absl::StatusOr<RunResult> RunOnce(const BenchFile& file, const Workload& w, const RunConfig& rc,
                                  int repeat, uint32_t tag);

}  // namespace umap_bench

#endif  // UMAP_BENCH_WORKLOAD_H_
