// umap's cache under a memory budget, for runs where the runtime does not size its cache
// itself: the budget minus what the rest of the process needs. That rest is
//   - the I/O channels' buffers: (handler_threads x io_depth + io_channels) x io_max_bytes,
//     allocated once, resident as they are used (a scan touches all of them);
//   - the process without its cache: code, heap, RocksDB, the worker threads:
//     kProcessReserve, measured with a 1 MiB cache in a memory cgroup (docs/benchmarks.md,
//     "How umap's fixed cache is sized");
//   - when the run writes, what each writing thread adds to it: kWriterReservePerThread x
//     the threads. Every thread that umsyncs commits to the journal, and the memtable
//     blocks it allocates are freed into its own malloc arena, so the journal's share of
//     the heap grows with the threads (measured the same way);
//   - a margin of budget/8 for umsync's capture copies, heap growth and the page cache
//     that buffered writes of the journal use.
#ifndef UMAP_BENCH_BUDGET_H_
#define UMAP_BENCH_BUDGET_H_

#include <cstdint>
#include <string>

#include "umap/umap_types.h"

namespace umap_bench {

inline constexpr uint64_t kProcessReserve = uint64_t{24} << 20;
inline constexpr uint64_t kWriterReservePerThread = uint64_t{5} << 19;  // 2.5 MiB

struct CacheFit {
  uint64_t cache_bytes = 0;  // 0: the budget is too small for any cache
  uint64_t io_buffer_bytes = 0;
  uint64_t writer_bytes = 0;
  uint64_t margin_bytes = 0;
  std::string how;  // "256 MiB budget - 17 MiB I/O buffers - 24 MiB process - 32 MiB margin"
};

// `cfg` gives the handler threads, I/O depth and sizes the runtime will use;
// `writer_threads` is how many application threads write and umsync at once (0: the run
// only reads).
CacheFit FitCacheToBudget(uint64_t budget, const umap_config& cfg, unsigned writer_threads = 0);

}  // namespace umap_bench

#endif  // UMAP_BENCH_BUDGET_H_
