#include "runtime/cache/block_pool.h"

#include <algorithm>
#include <thread>

namespace umap::runtime {

BlockPool::BlockPool(uint32_t capacity, uint32_t limit)
    : capacity_(capacity),
      cache_blocks_(capacity),
      free_(capacity),
      limit_(limit == 0 ? capacity : std::min(limit, capacity)) {}

void BlockPool::set_limit(uint32_t n) {
  limit_.store(std::clamp<uint32_t>(n, 1, capacity_), std::memory_order_relaxed);
}

bool BlockPool::TryRaiseLimit(uint32_t from, uint32_t to) {
  to = std::min(to, capacity_);
  return to > from && limit_.compare_exchange_strong(from, to, std::memory_order_relaxed);
}

void BlockPool::NoteResident(int delta) {
  uint32_t now = resident_.fetch_add(static_cast<uint32_t>(delta), std::memory_order_relaxed) +
                 static_cast<uint32_t>(delta);
  uint32_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

uint32_t BlockPool::TakeFree() {
  uint32_t h = held_.load(std::memory_order_relaxed);
  do {
    if (h >= limit_.load(std::memory_order_relaxed)) return kNone;
  } while (!held_.compare_exchange_weak(h, h + 1, std::memory_order_relaxed));
  uint32_t cache_block = free_.Pop();
  if (cache_block == IndexStack::kEmpty) {
    // CBs never used before are taken in order; their metadata is still all zero.
    uint32_t f = fresh_.load(std::memory_order_relaxed);
    do {
      if (f >= capacity_) {
        held_.fetch_sub(1, std::memory_order_relaxed);
        return kNone;
      }
    } while (!fresh_.compare_exchange_weak(f, f + 1, std::memory_order_relaxed));
    cache_block = f;
  }
  cache_blocks_[cache_block].state.store(kBusyState, std::memory_order_relaxed);
  return cache_block;
}

void BlockPool::PushFree(uint32_t cache_block) {
  cache_blocks_[cache_block].state.store(kFree, std::memory_order_release);
  free_.Push(cache_block);
  held_.fetch_sub(1, std::memory_order_relaxed);
}

void BlockPool::Retire(uint32_t cache_block, bool forced) {
  Cb& c = cache_blocks_[cache_block];
  if (forced) forced_.fetch_add(1, std::memory_order_relaxed);
  c.owner.store(0, std::memory_order_relaxed);
  // New generation, no references: stale references to the old content are ignored.
  const uint64_t rg = c.refgen.load(std::memory_order_relaxed);
  c.refgen.store(((rg >> 32) + 1) << 32, std::memory_order_release);
  NoteResident(-1);
}

uint32_t BlockPool::Acquire(EvictFn evict, ReclaimFn reclaim) {
  VictimsOf<1> one;
  return AcquireBatched(
      [&](const uint32_t* cache_blocks, const uint64_t* owners, int n, bool* freed, int) {
        for (int i = 0; i < n; ++i) freed[i] = evict(cache_blocks[i], owners[i]);
      },
      reclaim, &one, 1);
}

void BlockPool::Collect(int pass, int max, uint64_t* budget, Victims* v) {
  v->n = 0;
  const uint32_t high = fresh_.load(std::memory_order_acquire);
  if (high == 0) {
    *budget = 0;
    return;
  }
  for (; *budget > 0 && v->n < max; --*budget) {
    const uint32_t idx =
        static_cast<uint32_t>(hand_.fetch_add(1, std::memory_order_relaxed) % high);
    Cb& c = cache_blocks_[idx];
    if (c.state.load(std::memory_order_relaxed) != kResident) continue;
    if (pass < 2 && static_cast<uint32_t>(c.refgen.load(std::memory_order_relaxed)) != 0) {
      continue;
    }
    if (pass == 0 && c.referenced.exchange(0, std::memory_order_relaxed)) continue;
    uint32_t expected = kResident;
    if (!c.state.compare_exchange_strong(expected, kBusyState, std::memory_order_acquire)) {
      continue;
    }
    v->cache_blocks[v->n] = idx;
    v->owners[v->n] = owner(idx);
    ++v->n;
  }
}

uint32_t BlockPool::Evict(BatchEvictFn evict, int pass, Victims* v, bool keep_one,
                          uint32_t* freed_count) {
  evict(v->cache_blocks, v->owners, v->n, v->freed, pass);
  uint32_t kept = kNone;
  for (int k = 0; k < v->n; ++k) {
    const uint32_t cache_block = v->cache_blocks[k];
    if (!v->freed[k]) {
      cache_blocks_[cache_block].state.store(kResident, std::memory_order_release);
      continue;
    }
    ++*freed_count;
    Retire(cache_block, pass == 2);
    if (keep_one && kept == kNone) {
      kept = cache_block;
    } else {
      PushFree(cache_block);
    }
  }
  return kept;
}

uint32_t BlockPool::AcquireBatched(BatchEvictFn evict, ReclaimFn reclaim, Victims* victims,
                                   int max_batch) {
  uint32_t cache_block = TakeFree();
  if (cache_block != kNone) return cache_block;
  max_batch = std::clamp(max_batch, 1, victims->capacity);
  Victims& v = *victims;
  uint32_t freed = 0;
  // Pass 0: clock with second chance, live references respected. Pass 1: the same after
  // dropping dead threads' references. Pass 2: references ignored (more live threads than
  // CBs would otherwise deadlock); counted as forced evictions.
  for (int pass = 0; pass < 3; ++pass) {
    if (pass == 1) reclaim();
    uint64_t budget = 2ull * fresh_.load(std::memory_order_relaxed) + 1;
    while (budget > 0) {
      // A CB freed concurrently (uunmap, another thread's batch, a raised limit) first.
      if ((cache_block = TakeFree()) != kNone) return cache_block;
      Collect(pass, max_batch, &budget, &v);
      if (v.n == 0) break;
      cache_block = Evict(evict, pass, &v, /*keep_one=*/true, &freed);
      if (cache_block != kNone) return cache_block;
    }
  }
  return kNone;
}

uint32_t BlockPool::Shrink(BatchEvictFn evict, Victims* victims, int max_batch,
                           uint32_t max_blocks) {
  max_batch = std::clamp(max_batch, 1, victims->capacity);
  Victims& v = *victims;
  uint32_t freed = 0;
  auto excess = [&] {
    const uint32_t h = held(), l = limit();
    return std::min(h > l ? h - l : 0, max_blocks - freed);
  };
  for (int pass = 0; pass < 2 && excess() > 0; ++pass) {
    uint64_t budget = 2ull * fresh_.load(std::memory_order_relaxed) + 1;
    while (budget > 0 && excess() > 0) {
      Collect(pass, std::min<int>(max_batch, static_cast<int>(excess())), &budget, &v);
      if (v.n == 0) break;
      Evict(evict, pass, &v, /*keep_one=*/false, &freed);
    }
  }
  return freed;
}

void BlockPool::Publish(uint32_t cache_block, uint64_t owner) {
  Cb& c = cache_blocks_[cache_block];
  c.owner.store(owner + 1, std::memory_order_relaxed);
  c.referenced.store(1, std::memory_order_relaxed);
  c.state.store(kResident, std::memory_order_release);
  NoteResident(1);
}

void BlockPool::Release(uint32_t cache_block) {
  Cb& c = cache_blocks_[cache_block];
  if (c.owner.load(std::memory_order_relaxed) != 0) {
    c.owner.store(0, std::memory_order_relaxed);
    NoteResident(-1);
  }
  uint64_t rg = c.refgen.load(std::memory_order_relaxed);
  c.refgen.store(((rg >> 32) + 1) << 32, std::memory_order_release);
  PushFree(cache_block);
}

bool BlockPool::Claim(uint32_t cache_block) {
  Cb& c = cache_blocks_[cache_block];
  for (;;) {
    uint32_t expected = kResident;
    if (c.state.compare_exchange_weak(expected, kBusyState, std::memory_order_acquire)) {
      return true;
    }
    if (expected == kFree) return false;
    // Busy: a handler is filling or evicting it right now; that takes microseconds.
    std::this_thread::yield();
  }
}

void BlockPool::Unclaim(uint32_t cache_block) {
  cache_blocks_[cache_block].state.store(kResident, std::memory_order_release);
}

bool BlockPool::AddRef(uint32_t cache_block, uint32_t gen) {
  std::atomic<uint64_t>& rg = cache_blocks_[cache_block].refgen;
  uint64_t v = rg.load(std::memory_order_relaxed);
  while (static_cast<uint32_t>(v >> 32) == gen) {
    if (rg.compare_exchange_weak(v, v + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

void BlockPool::DropRef(uint32_t cache_block, uint32_t gen) {
  std::atomic<uint64_t>& rg = cache_blocks_[cache_block].refgen;
  uint64_t v = rg.load(std::memory_order_relaxed);
  while (static_cast<uint32_t>(v >> 32) == gen && static_cast<uint32_t>(v) != 0) {
    if (rg.compare_exchange_weak(v, v - 1, std::memory_order_relaxed)) return;
  }
}

CbState BlockPool::state(uint32_t cache_block) const {
  const Cb& c = cache_blocks_[cache_block];
  switch (c.state.load(std::memory_order_acquire)) {
    case kFree:
      return CbState::kInactive;
    case kBusyState:
      return CbState::kBusy;
    default:
      return static_cast<uint32_t>(c.refgen.load(std::memory_order_relaxed)) != 0
                 ? CbState::kActive
                 : CbState::kSemiActive;
  }
}

}  // namespace umap::runtime
