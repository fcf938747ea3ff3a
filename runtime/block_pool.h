// BlockPool: the bounded set of cache blocks (CBs) shared by every mapping of a runtime.
//
// A CB stands for one block resident in some mapping's address space. The pool never hands
// out more CBs than `capacity`, so resident cached data never exceeds capacity * block_size,
// whatever the mapped sizes. Each CB is in one of the paper's three states:
//   active       resident and referenced by a live thread (see ThreadRefs): never evicted;
//   semi-active  resident, unreferenced: an eviction candidate (clock with a second chance);
//   inactive     not resident: free for reuse.
// Only semi-active -> inactive moves data (the owner's eviction callback writes it back).
//
// Lock-free: the free list is a tagged Treiber stack, the clock hand an atomic counter, and
// every CB transition a CAS, so concurrent handler threads never block each other here.
#ifndef UMAP_RUNTIME_BLOCK_POOL_H_
#define UMAP_RUNTIME_BLOCK_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/functional/function_ref.h"
#include "runtime/index_stack.h"

namespace umap::runtime {

enum class CbState { kInactive, kSemiActive, kActive, kBusy };

class BlockPool {
 public:
  static constexpr uint32_t kNone = 0xffffffffu;
  static constexpr uint64_t kNoOwner = ~0ull;

  explicit BlockPool(uint32_t capacity);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  uint32_t capacity() const { return capacity_; }
  uint32_t resident() const { return resident_.load(std::memory_order_relaxed); }
  uint32_t peak_resident() const { return peak_.load(std::memory_order_relaxed); }

  // Tries to free the content of CB `cb` whose owner token is `owner` (the owner's eviction:
  // lock the block, write back if dirty, unmap). Returns false when it cannot right now
  // (block locked by someone else, owner gone); the pool then tries another CB.
  using EvictFn = absl::FunctionRef<bool(uint32_t cb, uint64_t owner)>;
  // Called when no unreferenced CB is found: drop references of dead threads.
  using ReclaimFn = absl::FunctionRef<void()>;

  // Returns a CB the caller now owns in state kBusy, evicting one when none is free.
  // Returns kNone only if every CB is busy (being filled or evicted) for three sweeps.
  uint32_t Acquire(EvictFn evict, ReclaimFn reclaim);

  // Batched eviction: evicts up to `max_batch` victims at once (freed[i] reports which of
  // cbs[0..n) the owner freed), returns one freed CB and puts the others on the free list.
  // The owner can then drop all their pages with one TLB flush (eviction_batch.h).
  using BatchEvictFn =
      absl::FunctionRef<void(const uint32_t* cbs, const uint64_t* owners, int n, bool* freed)>;
  static constexpr int kMaxBatch = 32;
  uint32_t AcquireBatched(BatchEvictFn evict, ReclaimFn reclaim, int max_batch);

  // The caller installed data for `owner` in `cb` (which it got from Acquire): make it
  // resident (semi-active, clock bit set).
  void Publish(uint32_t cb, uint64_t owner);
  // Returns a CB the caller owns (kBusy) to the free list.
  void Release(uint32_t cb);
  // Marks a resident CB busy so that the caller may release it (used by uunmap). Waits while
  // another thread holds it busy. Returns false if the CB is not resident.
  bool Claim(uint32_t cb);
  // Gives back a CB claimed by Acquire's sweep or Claim without changing its content.
  void Unclaim(uint32_t cb);

  // Reference counting for the per-thread reference map. A reference names a CB and its
  // generation; references to an older generation (the CB was reused) are ignored.
  uint32_t generation(uint32_t cb) const {
    return static_cast<uint32_t>(cbs_[cb].refgen.load(std::memory_order_acquire) >> 32);
  }
  bool AddRef(uint32_t cb, uint32_t gen);
  void DropRef(uint32_t cb, uint32_t gen);
  // Marks the CB recently used (clock bit).
  void Touch(uint32_t cb) { cbs_[cb].referenced.store(1, std::memory_order_relaxed); }

  CbState state(uint32_t cb) const;
  uint64_t owner(uint32_t cb) const { return cbs_[cb].owner.load(std::memory_order_acquire); }
  uint64_t forced_evictions() const { return forced_.load(std::memory_order_relaxed); }

 private:
  enum : uint32_t { kFree = 0, kBusyState = 1, kResident = 2 };
  struct alignas(64) Cb {
    std::atomic<uint64_t> owner{kNoOwner};
    std::atomic<uint64_t> refgen{0};  // generation << 32 | live references
    std::atomic<uint32_t> state{kFree};
    std::atomic<uint8_t> referenced{0};
  };

  void NoteResident(int delta);
  // Takes a free CB (state kBusy), or kNone.
  uint32_t PopFree();
  // A CB its owner just freed: fresh generation, no owner.
  void Retire(uint32_t cb, bool forced);

  const uint32_t capacity_;
  std::unique_ptr<Cb[]> cbs_;
  IndexStack free_;
  std::atomic<uint64_t> hand_{0};
  std::atomic<uint32_t> resident_{0};
  std::atomic<uint32_t> peak_{0};
  std::atomic<uint64_t> forced_{0};
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_BLOCK_POOL_H_
