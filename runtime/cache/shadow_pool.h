// ShadowPool: the shadow buffers that carry evicted dirty blocks to the file.
//
// Eviction copies a dirty block into a free shadow, detaches the block from the table and
// reuses its cache block at once; a write-back thread writes the shadow in the background.
// Until then a miss on that block is served from the shadow. Shadows are a fixed set carved
// out of the cache budget; when none is free, eviction picks a clean victim instead.
#ifndef UMAP_RUNTIME_CACHE_SHADOW_POOL_H_
#define UMAP_RUNTIME_CACHE_SHADOW_POOL_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "runtime/cache/index_stack.h"

namespace umap::runtime {

class Mapping;

class ShadowPool {
 public:
  struct Shadow {
    Mapping* mapping = nullptr;
    uint64_t block = 0;
    uint32_t len = 0;
    std::atomic<int> error{0};  // errno of the last failed write-back attempt, 0 if none
    std::atomic<uint32_t> attempts{0};  // failed write-back attempts so far
    char* data = nullptr;
  };

  ShadowPool(uint32_t count, size_t block_size);
  ~ShadowPool();

  uint32_t count() const { return count_; }
  Shadow& at(uint32_t i) { return shadows_[i]; }

  // A free shadow index, or IndexStack::kEmpty.
  uint32_t TryAcquire() { return free_.Pop(); }
  void Release(uint32_t i);

  // Queue of filled shadows for the write-back threads.
  void Enqueue(uint32_t i);
  // Blocks until a shadow is queued or `stop` is set; returns kEmpty on stop.
  uint32_t Dequeue(const std::atomic<bool>& stop);
  // A queued shadow if there is one, else kEmpty (never blocks).
  uint32_t TryDequeue() { return queued_.Pop(); }
  void WakeAll();

  uint32_t in_use() const { return count_ - free_.size(); }

 private:
  const uint32_t count_;
  std::unique_ptr<Shadow[]> shadows_;
  char* memory_ = nullptr;
  size_t memory_bytes_ = 0;
  IndexStack free_;
  IndexStack queued_;
  std::atomic<uint32_t> queue_seq_{0};  // futex word writers sleep on
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_CACHE_SHADOW_POOL_H_
