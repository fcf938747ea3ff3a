// The sequence of items (op-size units of the file) one worker thread touches, and whether
// each op writes; reproducible from the seed. Not thread-safe: one per worker thread.
#ifndef UMAP_BENCH_ITEM_GEN_H_
#define UMAP_BENCH_ITEM_GEN_H_

#include <algorithm>
#include <cstdint>

#include "bench/rng.h"
#include "bench/workload.h"

namespace umap_bench {

class ItemGen {
 public:
  // `items` in the file; thread `thread` of w.threads.
  ItemGen(const Workload& w, uint64_t items, unsigned thread, uint64_t seed)
      : w_(w), items_(items), rng_(seed) {
    part_start_ = items * thread / w.threads;
    uint64_t part_end = items * (thread + 1) / w.threads;
    part_len_ = std::max<uint64_t>(1, part_end - part_start_);
    prev_ = part_start_;
    working_set_ = std::clamp<uint64_t>(
        static_cast<uint64_t>(static_cast<double>(items) * w.working_set), 1, items);
    shrunk_set_ = std::max<uint64_t>(1, working_set_ / 4);
  }
  uint64_t Next() {
    uint64_t item;
    switch (w_.pattern) {
      case Pattern::kRandom:
        if (i_ > 0 && w_.locality > 0 && rng_.Unit() < w_.locality) {
          item = prev_ + 1 == items_ ? 0 : prev_ + 1;
        } else {
          item = rng_.Below(items_);
        }
        break;
      case Pattern::kSequential:
        item = part_start_ + (i_ % part_len_);
        break;
      case Pattern::kReuse:
        item = rng_.Below(working_set_);
        break;
      case Pattern::kPhase:
        item = rng_.Below(2 * i_ < w_.ops_per_thread ? working_set_ : shrunk_set_);
        break;
      case Pattern::kStrided:
      default:
        item = (part_start_ + i_ * w_.stride_items) % items_;
        break;
    }
    ++i_;
    prev_ = item;
    return item;
  }
  bool NextIsWrite() {
    switch (w_.access) {
      case Access::kRead:
        return false;
      case Access::kWrite:
        return true;
      case Access::kMixed:
      default:
        return rng_.Unit() < w_.write_fraction;
    }
  }

 private:
  const Workload& w_;
  const uint64_t items_;
  Rng rng_;
  uint64_t part_start_ = 0, part_len_ = 1, prev_ = 0, i_ = 0;
  uint64_t working_set_ = 1, shrunk_set_ = 1;  // reuse and phase: items re-visited
};

}  // namespace umap_bench

#endif  // UMAP_BENCH_ITEM_GEN_H_
