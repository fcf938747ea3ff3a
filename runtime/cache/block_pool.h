// BlockPool: the bounded set of cache blocks (CBs) shared by every mapping of a runtime.
//
// A CB stands for one block resident in some mapping's address space. The pool has a
// structural `capacity` (the hard cap: its metadata is sized for it, and touched only as
// CBs are first used) and a current `limit` at or below it, which lazy sizing moves
// (docs/design.md "Cache sizing"). The pool never holds more than max(limit, what it held
// when the limit was lowered) CBs: Acquire takes a free CB only while fewer than `limit`
// are held, and evicts one otherwise; Shrink evicts down to a lowered limit. So resident
// cached data never exceeds capacity * block_size, whatever the mapped sizes. Each CB is in
// one of the paper's three states:
//   active       resident and referenced by a live thread (see ThreadRefs): never evicted;
//   semi-active  resident, unreferenced: an eviction candidate (clock with a second chance);
//   inactive     not resident: free for reuse.
// Only semi-active -> inactive moves data (the owner's eviction callback writes it back).
//
// Lock-free: the free list is a tagged Treiber stack, the clock hand an atomic counter, and
// every CB transition a CAS, so concurrent handler threads never block each other here.
#ifndef UMAP_RUNTIME_CACHE_BLOCK_POOL_H_
#define UMAP_RUNTIME_CACHE_BLOCK_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/functional/function_ref.h"
#include "runtime/cache/index_stack.h"
#include "runtime/cache/zeroed_array.h"

namespace umap::runtime {

enum class CbState { kInactive, kSemiActive, kActive, kBusy };

class BlockPool {
 public:
  static constexpr uint32_t kNone = 0xffffffffu;
  static constexpr uint64_t kNoOwner = ~0ull;

  // `limit` 0: the whole capacity.
  explicit BlockPool(uint32_t capacity, uint32_t limit = 0);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;
  // False when the metadata could not be allocated.
  bool ok() const { return cache_blocks_.ok(); }

  uint32_t capacity() const { return capacity_; }
  uint32_t resident() const { return resident_.load(std::memory_order_relaxed); }
  uint32_t peak_resident() const { return peak_.load(std::memory_order_relaxed); }
  // CBs held now: resident, or busy (being filled, stashed, or being evicted).
  uint32_t held() const { return held_.load(std::memory_order_relaxed); }
  // The current limit on held CBs (1..capacity).
  uint32_t limit() const { return limit_.load(std::memory_order_relaxed); }
  // Sets the limit (clamped to 1..capacity). Lowering it does not evict: Shrink does.
  void set_limit(uint32_t n);
  // Raises the limit from `from` to `to` if it is still `from` (concurrent growers raise it
  // once). False when it changed meanwhile.
  bool TryRaiseLimit(uint32_t from, uint32_t to);

  // Tries to free the content of CB `cache_block` whose owner token is `owner` (the owner's
  // eviction: lock the block, write back if dirty, unmap). Returns false when it cannot right now
  // (block locked by someone else, owner gone); the pool then tries another CB.
  using EvictFn = absl::FunctionRef<bool(uint32_t cache_block, uint64_t owner)>;
  // Called when no unreferenced CB is found: drop references of dead threads.
  using ReclaimFn = absl::FunctionRef<void()>;

  // Returns a CB the caller now owns in state kBusy, evicting one when none is free.
  // Returns kNone only if every CB is busy (being filled or evicted) for three sweeps.
  uint32_t Acquire(EvictFn evict, ReclaimFn reclaim);

  // Batched eviction: evicts up to `max_batch` victims at once (freed[i] reports which of
  // cache_blocks[0..n) the owner freed), returns one freed CB and puts the others on the free list.
  // The owner can then drop all their pages with one TLB flush (eviction_batch.h).
  // `pass`: 0 for the clock's first sweep (the owner may decline victims it would rather
  // keep, e.g. a mapping below its share of the cache), 1 and 2 for the later ones.
  using BatchEvictFn = absl::FunctionRef<void(const uint32_t* cache_blocks, const uint64_t* owners,
                                              int n, bool* freed, int pass)>;
  // The victims of one batch, in storage the caller provides (VictimsOf): a batch may be
  // too large for the stack of the thread that evicts (eviction_scratch.h).
  struct Victims {
    Victims(uint32_t* c, uint64_t* o, bool* f, int cap)
        : cache_blocks(c), owners(o), freed(f), capacity(cap) {}
    Victims(const Victims&) = delete;
    Victims& operator=(const Victims&) = delete;
    uint32_t* const cache_blocks;
    uint64_t* const owners;
    bool* const freed;
    const int capacity;
    int n = 0;
  };
  template <int N>
  struct VictimsOf : Victims {
    VictimsOf() : Victims(cache_blocks_, owners_, freed_, N) {}

   private:
    uint32_t cache_blocks_[N];
    uint64_t owners_[N];
    bool freed_[N];
  };
  // `v` holds the victims of each batch, at most min(max_batch, v->capacity) of them.
  uint32_t AcquireBatched(BatchEvictFn evict, ReclaimFn reclaim, Victims* v, int max_batch);
  // A free CB (state kBusy) if one is free and fewer than limit() are held, else kNone:
  // AcquireBatched's first step, for a caller that prepares for eviction only if it must.
  uint32_t TryTakeFree() { return TakeFree(); }

  // Evicts (clock, live references respected, never forced) until at most limit() CBs are
  // held, or nothing more can be evicted now, or `max_blocks` were freed; the freed CBs go
  // to the free list. Returns how many were freed.
  uint32_t Shrink(BatchEvictFn evict, Victims* v, int max_batch, uint32_t max_blocks);

  // The caller installed data for `owner` in `cache_block` (which it got from Acquire): make it
  // resident (semi-active, clock bit set).
  void Publish(uint32_t cache_block, uint64_t owner);
  // Returns a CB the caller owns (kBusy) to the free list.
  void Release(uint32_t cache_block);
  // Marks a resident CB busy so that the caller may release it (used by uunmap). Waits while
  // another thread holds it busy. Returns false if the CB is not resident.
  bool Claim(uint32_t cache_block);
  // Gives back a CB claimed by Acquire's sweep or Claim without changing its content.
  void Unclaim(uint32_t cache_block);

  // Reference counting for the per-thread reference map. A reference names a CB and its
  // generation; references to an older generation (the CB was reused) are ignored.
  uint32_t generation(uint32_t cache_block) const {
    return static_cast<uint32_t>(
        cache_blocks_[cache_block].refgen.load(std::memory_order_acquire) >> 32);
  }
  bool AddRef(uint32_t cache_block, uint32_t gen);
  void DropRef(uint32_t cache_block, uint32_t gen);
  // Marks the CB recently used (clock bit).
  void Touch(uint32_t cache_block) {
    cache_blocks_[cache_block].referenced.store(1, std::memory_order_relaxed);
  }

  CbState state(uint32_t cache_block) const;
  uint64_t owner(uint32_t cache_block) const {
    return cache_blocks_[cache_block].owner.load(std::memory_order_acquire) -
           1;  // stored + 1: 0 is no owner
  }
  uint64_t forced_evictions() const { return forced_.load(std::memory_order_relaxed); }

 private:
  // All-zero is the initial state (ZeroedArray): free, no owner, generation 0.
  enum : uint32_t { kFree = 0, kBusyState = 1, kResident = 2 };
  struct alignas(64) Cb {
    std::atomic<uint64_t> owner;   // owner + 1; 0: none
    std::atomic<uint64_t> refgen;  // generation << 32 | live references
    std::atomic<uint32_t> state;
    std::atomic<uint8_t> referenced;
  };
  void NoteResident(int delta);
  // Takes a free CB (state kBusy) if fewer than limit() are held, else kNone.
  uint32_t TakeFree();
  // Puts a CB the caller holds busy on the free list.
  void PushFree(uint32_t cache_block);
  // A CB its owner just freed: fresh generation, no owner.
  void Retire(uint32_t cache_block, bool forced);
  // Moves the clock hand over up to *budget CBs and claims (busy) up to `max` victims that
  // sweep `pass` may take.
  void Collect(int pass, int max, uint64_t* budget, Victims* v);
  // Hands the victims to the owner; those it freed are retired, the others resident again.
  // Returns one freed CB (busy) when `keep_one`, putting the rest on the free list; the
  // number freed in *freed_count.
  uint32_t Evict(BatchEvictFn evict, int pass, Victims* v, bool keep_one, uint32_t* freed_count);

  const uint32_t capacity_;
  ZeroedArray<Cb> cache_blocks_;
  IndexStack free_;
  std::atomic<uint32_t> fresh_{0};  // CBs [0, fresh_) were handed out at least once
  std::atomic<uint32_t> held_{0};
  std::atomic<uint32_t> limit_;
  std::atomic<uint64_t> hand_{0};
  std::atomic<uint32_t> resident_{0};
  std::atomic<uint32_t> peak_{0};
  std::atomic<uint64_t> forced_{0};
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_CACHE_BLOCK_POOL_H_
