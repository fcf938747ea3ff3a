#include "runtime/block_pool.h"

#include <algorithm>
#include <thread>

namespace umap::runtime {

BlockPool::BlockPool(uint32_t capacity)
    : capacity_(capacity), cbs_(new Cb[capacity]), free_(capacity) {
  // Push in reverse so CB 0 is handed out first (stable order helps debugging).
  for (uint32_t i = capacity; i-- > 0;) free_.Push(i);
}

void BlockPool::NoteResident(int delta) {
  uint32_t now = resident_.fetch_add(static_cast<uint32_t>(delta), std::memory_order_relaxed) +
                 static_cast<uint32_t>(delta);
  uint32_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

uint32_t BlockPool::PopFree() {
  const uint32_t cb = free_.Pop();
  if (cb != kNone) cbs_[cb].state.store(kBusyState, std::memory_order_relaxed);
  return cb;
}

void BlockPool::Retire(uint32_t cb, bool forced) {
  Cb& c = cbs_[cb];
  if (forced) forced_.fetch_add(1, std::memory_order_relaxed);
  c.owner.store(kNoOwner, std::memory_order_relaxed);
  // New generation, no references: stale references to the old content are ignored.
  const uint64_t rg = c.refgen.load(std::memory_order_relaxed);
  c.refgen.store(((rg >> 32) + 1) << 32, std::memory_order_release);
  NoteResident(-1);
}

uint32_t BlockPool::Acquire(EvictFn evict, ReclaimFn reclaim) {
  return AcquireBatched(
      [&](const uint32_t* cbs, const uint64_t* owners, int n, bool* freed) {
        for (int i = 0; i < n; ++i) freed[i] = evict(cbs[i], owners[i]);
      },
      reclaim, 1);
}

uint32_t BlockPool::AcquireBatched(BatchEvictFn evict, ReclaimFn reclaim, int max_batch) {
  uint32_t cb = PopFree();
  if (cb != kNone) return cb;
  max_batch = std::clamp(max_batch, 1, kMaxBatch);
  uint32_t victims[kMaxBatch];
  uint64_t owners[kMaxBatch];
  bool freed[kMaxBatch];
  // Pass 0: clock with second chance, live references respected. Pass 1: the same after
  // dropping dead threads' references. Pass 2: references ignored (more live threads than
  // CBs would otherwise deadlock); counted as forced evictions.
  const uint64_t sweep = 2ull * capacity_ + 1;
  for (int pass = 0; pass < 3; ++pass) {
    if (pass == 1) reclaim();
    uint64_t i = 0;
    while (i < sweep) {
      int n = 0;
      for (; i < sweep && n < max_batch; ++i) {
        // A CB freed concurrently (uunmap, another thread's batch) is taken first.
        if (n == 0 && (cb = PopFree()) != kNone) return cb;
        const uint32_t idx = static_cast<uint32_t>(hand_.fetch_add(1, std::memory_order_relaxed) %
                                                   capacity_);
        Cb& c = cbs_[idx];
        if (c.state.load(std::memory_order_relaxed) != kResident) continue;
        if (pass < 2 && static_cast<uint32_t>(c.refgen.load(std::memory_order_relaxed)) != 0) {
          continue;
        }
        if (pass == 0 && c.referenced.exchange(0, std::memory_order_relaxed)) continue;
        uint32_t expected = kResident;
        if (!c.state.compare_exchange_strong(expected, kBusyState, std::memory_order_acquire)) {
          continue;
        }
        victims[n] = idx;
        owners[n] = c.owner.load(std::memory_order_acquire);
        ++n;
      }
      if (n == 0) break;
      evict(victims, owners, n, freed);
      cb = kNone;
      for (int k = 0; k < n; ++k) {
        Cb& c = cbs_[victims[k]];
        if (!freed[k]) {
          c.state.store(kResident, std::memory_order_release);
          continue;
        }
        Retire(victims[k], pass == 2);
        if (cb == kNone) {
          cb = victims[k];
        } else {
          c.state.store(kFree, std::memory_order_release);
          free_.Push(victims[k]);
        }
      }
      if (cb != kNone) return cb;
    }
  }
  return kNone;
}

void BlockPool::Publish(uint32_t cb, uint64_t owner) {
  Cb& c = cbs_[cb];
  c.owner.store(owner, std::memory_order_relaxed);
  c.referenced.store(1, std::memory_order_relaxed);
  c.state.store(kResident, std::memory_order_release);
  NoteResident(1);
}

void BlockPool::Release(uint32_t cb) {
  Cb& c = cbs_[cb];
  if (c.owner.load(std::memory_order_relaxed) != kNoOwner) {
    c.owner.store(kNoOwner, std::memory_order_relaxed);
    NoteResident(-1);
  }
  uint64_t rg = c.refgen.load(std::memory_order_relaxed);
  c.refgen.store(((rg >> 32) + 1) << 32, std::memory_order_release);
  c.state.store(kFree, std::memory_order_release);
  free_.Push(cb);
}

bool BlockPool::Claim(uint32_t cb) {
  Cb& c = cbs_[cb];
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

void BlockPool::Unclaim(uint32_t cb) {
  cbs_[cb].state.store(kResident, std::memory_order_release);
}

bool BlockPool::AddRef(uint32_t cb, uint32_t gen) {
  std::atomic<uint64_t>& rg = cbs_[cb].refgen;
  uint64_t v = rg.load(std::memory_order_relaxed);
  while (static_cast<uint32_t>(v >> 32) == gen) {
    if (rg.compare_exchange_weak(v, v + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

void BlockPool::DropRef(uint32_t cb, uint32_t gen) {
  std::atomic<uint64_t>& rg = cbs_[cb].refgen;
  uint64_t v = rg.load(std::memory_order_relaxed);
  while (static_cast<uint32_t>(v >> 32) == gen && static_cast<uint32_t>(v) != 0) {
    if (rg.compare_exchange_weak(v, v - 1, std::memory_order_relaxed)) return;
  }
}

CbState BlockPool::state(uint32_t cb) const {
  const Cb& c = cbs_[cb];
  switch (c.state.load(std::memory_order_acquire)) {
    case kFree: return CbState::kInactive;
    case kBusyState: return CbState::kBusy;
    default:
      return static_cast<uint32_t>(c.refgen.load(std::memory_order_relaxed)) != 0
                 ? CbState::kActive
                 : CbState::kSemiActive;
  }
}

}  // namespace umap::runtime
