// IndexStack: a lock-free LIFO of small integer indices (a tagged Treiber stack whose links
// live in a side array). Used for free cache blocks and for shadow buffers. The side array
// is a ZeroedArray: a link is written only when its index is pushed, so a stack sized for
// the hard cap of the cache costs memory only for the indices that were ever pushed.
#ifndef UMAP_RUNTIME_CACHE_INDEX_STACK_H_
#define UMAP_RUNTIME_CACHE_INDEX_STACK_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "runtime/cache/zeroed_array.h"

namespace umap::runtime {

class IndexStack {
 public:
  static constexpr uint32_t kEmpty = 0xffffffffu;

  explicit IndexStack(uint32_t capacity) : next_(capacity) {}

  void Push(uint32_t i) {
    uint64_t head = head_.load(std::memory_order_relaxed);
    for (;;) {
      next_[i].store(static_cast<uint32_t>(head), std::memory_order_relaxed);
      // The tag (high half) changes on every push, which defeats ABA in Pop.
      uint64_t desired = (((head >> 32) + 1) << 32) | i;
      if (head_.compare_exchange_weak(head, desired, std::memory_order_release,
                                      std::memory_order_relaxed)) {
        size_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
  }

  // Returns kEmpty when the stack is empty.
  uint32_t Pop() {
    uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      uint32_t i = static_cast<uint32_t>(head);
      if (i == kEmpty) return kEmpty;
      uint32_t next = next_[i].load(std::memory_order_relaxed);
      uint64_t desired = (head & 0xffffffff00000000ull) | next;
      if (head_.compare_exchange_weak(head, desired, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        size_.fetch_sub(1, std::memory_order_relaxed);
        return i;
      }
    }
  }

  // Approximate under concurrency; exact when quiescent.
  uint32_t size() const { return size_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> head_{kEmpty};
  std::atomic<uint32_t> size_{0};
  ZeroedArray<std::atomic<uint32_t>> next_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_CACHE_INDEX_STACK_H_
