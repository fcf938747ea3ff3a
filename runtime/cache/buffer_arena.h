// BufferArena: a fixed set of block-sized buffers in one anonymous mapping, handed out by
// index through a lock-free stack (park buffers of lazy sizing, cache_sizer.h). The
// mapping's pages become memory as buffers are first used. Any thread.
#ifndef UMAP_RUNTIME_CACHE_BUFFER_ARENA_H_
#define UMAP_RUNTIME_CACHE_BUFFER_ARENA_H_

#include <cstddef>
#include <cstdint>

#include "runtime/cache/index_stack.h"
#include "runtime/cache/zeroed_array.h"

namespace umap::runtime {

class BufferArena {
 public:
  BufferArena(uint32_t count, size_t block_size)
      : count_(count), block_size_(block_size), memory_(count * block_size), free_(count) {
    for (uint32_t i = count; i-- > 0;) free_.Push(i);
  }
  bool ok() const { return memory_.ok(); }
  uint32_t count() const { return count_; }
  uint32_t in_use() const { return count_ - free_.size(); }
  // A free buffer's index, or IndexStack::kEmpty.
  uint32_t Acquire() { return free_.Pop(); }
  void Release(uint32_t i) { free_.Push(i); }
  char* at(uint32_t i) { return memory_.data() + size_t{i} * block_size_; }

 private:
  const uint32_t count_;
  const size_t block_size_;
  ZeroedArray<char> memory_;
  IndexStack free_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_CACHE_BUFFER_ARENA_H_
