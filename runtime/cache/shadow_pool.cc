#include "runtime/cache/shadow_pool.h"

#include <sys/mman.h>

#include <cstdlib>

namespace umap::runtime {

ShadowPool::ShadowPool(uint32_t count, size_t block_size)
    : count_(count), shadows_(new Shadow[count]), free_(count), queued_(count) {
  memory_bytes_ = static_cast<size_t>(count) * block_size;
  void* p = ::mmap(nullptr, memory_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  // Allocation failure at construction is fatal for the runtime; Runtime::Create checks
  // ok() before use.
  memory_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  for (uint32_t i = count; i-- > 0;) {
    shadows_[i].data = memory_ ? memory_ + static_cast<size_t>(i) * block_size : nullptr;
    free_.Push(i);
  }
}

ShadowPool::~ShadowPool() {
  if (memory_) ::munmap(memory_, memory_bytes_);
}

void ShadowPool::Release(uint32_t i) {
  Shadow& s = shadows_[i];
  s.mapping = nullptr;
  s.error.store(0, std::memory_order_relaxed);
  s.attempts.store(0, std::memory_order_relaxed);
  free_.Push(i);
}

void ShadowPool::Enqueue(uint32_t i) {
  queued_.Push(i);
  queue_seq_.fetch_add(1, std::memory_order_release);
  queue_seq_.notify_one();
}

uint32_t ShadowPool::Dequeue(const std::atomic<bool>& stop) {
  for (;;) {
    uint32_t seq = queue_seq_.load(std::memory_order_acquire);
    uint32_t i = queued_.Pop();
    if (i != IndexStack::kEmpty) return i;
    if (stop.load(std::memory_order_acquire)) return IndexStack::kEmpty;
    queue_seq_.wait(seq, std::memory_order_acquire);
  }
}

void ShadowPool::WakeAll() {
  queue_seq_.fetch_add(1, std::memory_order_release);
  queue_seq_.notify_all();
}

}  // namespace umap::runtime
