// EvictionScratch: buffers for large eviction batches, shared by the threads that evict.
//
// A batch's TLB flush is one inter-processor interrupt whatever its size, and on a VM that
// interrupt can cost far more than the rest of an eviction (eviction_batch.h), so batches
// are large: up to kLargeBatch victims. Their buffers (~20 KiB) are too large for the stack
// of a faulting application thread, which evicts inside its SIGBUS handler on whatever stack
// the application gave it. They come from here instead: a fixed set allocated with the
// runtime and taken lock-free, so a miss allocates nothing. A thread that finds every set
// taken evicts a small batch (kSmallBatch) from its own stack, as all of them once did.
#ifndef UMAP_RUNTIME_CACHE_EVICTION_SCRATCH_H_
#define UMAP_RUNTIME_CACHE_EVICTION_SCRATCH_H_

#include <cstdint>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "runtime/cache/block_pool.h"
#include "runtime/cache/eviction_batch.h"
#include "runtime/cache/index_stack.h"

namespace umap::runtime {

class EvictionScratch {
 public:
  static constexpr int kLargeBatch = 256;  // at most UIO_MAXIOV (1024) for process_madvise
  static constexpr int kSmallBatch = 32;

  explicit EvictionScratch(uint32_t sets) : sets_(new Set[sets]), free_(sets) {
    for (uint32_t i = 0; i < sets; ++i) free_.Push(i);
  }
  EvictionScratch(const EvictionScratch&) = delete;
  EvictionScratch& operator=(const EvictionScratch&) = delete;

  // Calls fn(BlockPool::Victims*, EvictionBatch*) with empty buffers of one capacity, a
  // large set if one is free, else small ones on this thread's stack, and returns its
  // result.
  template <typename Fn>
  auto With(Fn&& fn) {
    const uint32_t i = free_.Pop();
    if (i == IndexStack::kEmpty) {
      BlockPool::VictimsOf<kSmallBatch> victims;
      EvictionBatchOf<kSmallBatch> batch;
      return fn(static_cast<BlockPool::Victims*>(&victims), static_cast<EvictionBatch*>(&batch));
    }
    absl::Cleanup give_back = [this, i] { free_.Push(i); };
    Set& s = sets_[i];
    s.victims.n = 0;
    s.batch.count = 0;
    return fn(static_cast<BlockPool::Victims*>(&s.victims), static_cast<EvictionBatch*>(&s.batch));
  }

 private:
  struct Set {
    BlockPool::VictimsOf<kLargeBatch> victims;
    EvictionBatchOf<kLargeBatch> batch;
  };
  std::unique_ptr<Set[]> sets_;
  IndexStack free_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_CACHE_EVICTION_SCRATCH_H_
