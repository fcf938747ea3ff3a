// MemoryBudget: how much memory the runtime may use, and how much of it its cache may take
// (docs/configuration.md "Memory budget"). The one place to ask "how much may I use": the
// cache sizer sizes the cache from it, and any other part of the runtime that is about to
// hold memory outside the cache (write-back transactions, journal buffers) reserves it here
// first, so that the cache leaves room.
//
//   margin    = max(16 MiB, limit / 8) + the part of the I/O channels' buffers that is
//               not resident yet (address space that becomes memory as it is used)
//   room      = limit - margin - used - reserved            (negative when others took more)
//   allowance = max(0, the cache's bytes now + room)         (the cache's ceiling)
// where limit and used come from the MemoryProbe (the memory cgroup's limit and usage, or
// MemTotal and MemTotal - MemAvailable). So the cache may grow into the free room of the
// cgroup less the margin, and must give back what others take. near_limit(): used is within
// half of max(16 MiB, limit / 8) of the limit (the usage threshold that counts as memory
// pressure).
//
// Thread safety: Update from the sizer's thread; everything else from any thread.
#ifndef UMAP_RUNTIME_SIZING_MEMORY_BUDGET_H_
#define UMAP_RUNTIME_SIZING_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "runtime/sizing/memory_probe.h"

namespace umap::runtime {

class MemoryBudget {
 public:
  static constexpr uint64_t kMinMargin = uint64_t{16} << 20;

  MemoryBudget() = default;

  // The sizer: a new sample, the bytes the cache holds now, and memory the runtime will use
  // outside the cache that the sample does not show yet (I/O buffers not touched so far).
  void Update(const MemorySample& s, uint64_t cache_bytes, uint64_t unrealized);

  // Another consumer is about to hold `bytes` outside the cache: counted against the
  // cache's allowance until Release.
  void Reserve(uint64_t bytes) { reserved_.fetch_add(bytes, std::memory_order_relaxed); }
  void Release(uint64_t bytes) { reserved_.fetch_sub(bytes, std::memory_order_relaxed); }
  // What a consumer may still take now: the free room plus what the cache holds above
  // `cache_floor` (the cache shrinks to make room).
  uint64_t Headroom(uint64_t cache_bytes, uint64_t cache_floor) const;

  bool known() const { return known_.load(std::memory_order_acquire); }
  uint64_t allowance() const { return allowance_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t margin() const { return margin_.load(std::memory_order_relaxed); }
  uint64_t reserved() const { return reserved_.load(std::memory_order_relaxed); }
  bool cgroup_limited() const { return cgroup_limited_.load(std::memory_order_relaxed); }
  bool near_limit() const;

  // max(16 MiB, limit / 8).
  static uint64_t BaseMargin(uint64_t limit);

 private:
  std::atomic<bool> known_{false};
  std::atomic<bool> cgroup_limited_{false};
  std::atomic<uint64_t> limit_{0}, used_{0}, margin_{0}, allowance_{0}, reserved_{0};
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_SIZING_MEMORY_BUDGET_H_
