// One application thread of a run: waits for the start flag, then does its ops through the
// backend, checking every read and recording every item it writes.
#ifndef UMAP_BENCH_WORKER_H_
#define UMAP_BENCH_WORKER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/backend.h"
#include "bench/workload.h"

namespace umap_bench {

// Per-thread state, one cache line apart so the progress counters do not false-share.
// `done` and `item_now` are read by the watchdog while the thread runs; the rest is read
// after the thread is joined.
struct alignas(64) Worker {
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> item_now{~0ull};
  std::vector<uint64_t> written;  // bitmap of items this thread wrote
  uint64_t read_checks = 0;
  uint64_t bad_reads = 0;
  std::string first_bad;  // where the first wrong read was
  absl::Status error;     // first I/O or sync error; the thread stops there
};

// Start and stop flags shared by the workers of one run.
struct WorkerFlags {
  std::atomic<bool> go{false};    // set once: start the ops
  std::atomic<bool> stop{false};  // set at most once: stop before the next op
};

// Thread `t`'s ops of run `repeat` with write tag `tag` over `items` items, after
// flags.go, until done, an error, or flags.stop.
void WorkerLoop(BenchBackend& backend, const Workload& w, uint64_t items, unsigned t, int repeat,
                uint32_t tag, const WorkerFlags& flags, Worker& me);

}  // namespace umap_bench

#endif  // UMAP_BENCH_WORKER_H_
