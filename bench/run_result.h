// What one timed run measured (filled by RunOnce and the backend's Collect), as printed in
// the tables and the JSON lines (docs/benchmarks.md names every field).
#ifndef UMAP_BENCH_RUN_RESULT_H_
#define UMAP_BENCH_RUN_RESULT_H_

#include <cstdint>
#include <string>

namespace umap_bench {

struct RunResult {
  std::string backend;  // the backend's name as given ("umap", "mmap+random", ...)
  std::string workload;
  unsigned threads = 0;
  int repeat = 0;
  uint64_t ops = 0;
  double wall_s = 0;
  double ops_per_s = 0;
  double mb_per_s = 0;  // 10^6 bytes of ops per second
  uint64_t faults = 0;  // umap: MISSING + WP faults; the others: minor + major (getrusage)
  uint64_t major_faults = 0;
  uint64_t process_faults = 0;  // minor + major of the whole process during the run
  // getrusage of the whole process over the timed region: user + system CPU seconds, and
  // voluntary (waits) and involuntary (preemptions) context switches.
  double cpu_s = 0;
  uint64_t voluntary_switches = 0, involuntary_switches = 0;
  bool capped = false;  // stopped at RunConfig::max_seconds before doing every op
  // Storage requests the ops waited for, when the backend can count them (misses_counted):
  // umap MISSING faults, mmap major faults, one per op for O_DIRECT backends.
  uint64_t misses = 0;
  bool misses_counted = false;
  // umap runtime counters (0 for the others)
  uint64_t umap_faults_missing = 0;
  uint64_t umap_cache_used = 0, umap_cache_peak = 0, umap_cache_limit = 0;
  // Cache sizing at the end of the run: the capacity the runtime chose, its virtual
  // capacity, what it could have grown to, and its re-misses.
  uint64_t umap_cache_capacity = 0, umap_cache_virtual = 0, umap_cache_ceiling = 0,
           umap_remisses = 0;
  uint64_t umap_blocks_read = 0, umap_blocks_written = 0, umap_evictions = 0,
           umap_dirty_evictions = 0, umap_io_errors = 0, umap_sigbus = 0;
  // umap I/O channels: merged reads and writes, their bytes, read-ahead blocks
  uint64_t umap_io_reads = 0, umap_io_bytes = 0, umap_io_writes = 0, umap_io_write_bytes = 0,
           umap_prefetched = 0;
  uint64_t file_cached_bytes = 0;  // page cache of the file after the run (mincore)
  uint64_t peak_rss = 0;           // VmHWM of the run (reset before it)
  // Memory cgroup mode (filled by the parent): the cgroup's limit and its peak usage over
  // the timed region (processes plus their page cache), how often usage hit the limit, OOM
  // kills; with several processes in one cgroup, this is process `process` of `processes`.
  uint64_t cgroup_limit = 0, cgroup_peak = 0, cgroup_limit_hits = 0, oom_kills = 0;
  unsigned process = 0, processes = 1;
  uint64_t read_checks = 0;  // read ops whose data was compared
  bool verified = false;     // reads matched and (write runs) the file checked out
  std::string error;         // what failed and where; empty when verified
};

}  // namespace umap_bench

#endif  // UMAP_BENCH_RUN_RESULT_H_
