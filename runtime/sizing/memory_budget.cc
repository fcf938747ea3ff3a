#include "runtime/sizing/memory_budget.h"

#include <algorithm>

namespace umap::runtime {

uint64_t MemoryBudget::BaseMargin(uint64_t limit) { return std::max(kMinMargin, limit / 8); }

void MemoryBudget::Update(const MemorySample& s, uint64_t cache_bytes, uint64_t unrealized) {
  const uint64_t margin = BaseMargin(s.limit) + unrealized;
  // The room may be negative (others took more): the cache gives that much back.
  const uint64_t have = s.limit + cache_bytes;
  const uint64_t taken = margin + s.used + reserved();
  limit_.store(s.limit, std::memory_order_relaxed);
  used_.store(s.used, std::memory_order_relaxed);
  margin_.store(margin, std::memory_order_relaxed);
  allowance_.store(have > taken ? have - taken : 0, std::memory_order_relaxed);
  cgroup_limited_.store(s.cgroup_limited, std::memory_order_relaxed);
  known_.store(true, std::memory_order_release);
}

uint64_t MemoryBudget::Headroom(uint64_t cache_bytes, uint64_t cache_floor) const {
  const uint64_t taken = margin() + used() + reserved();
  const uint64_t room = limit() > taken ? limit() - taken : 0;
  return room + (cache_bytes > cache_floor ? cache_bytes - cache_floor : 0);
}

bool MemoryBudget::near_limit() const {
  return known() && used() + BaseMargin(limit()) / 2 >= limit();
}

}  // namespace umap::runtime
