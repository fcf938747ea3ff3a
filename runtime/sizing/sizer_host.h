// SizerHost: what the cache sizer needs from the runtime that owns it: the pool whose limit
// it moves, the mappings whose blocks it samples, parks and evicts, and the few pool-wide
// actions it triggers. Runtime gives it a view of itself (Runtime::RoomView).
#ifndef UMAP_RUNTIME_SIZING_SIZER_HOST_H_
#define UMAP_RUNTIME_SIZING_SIZER_HOST_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "runtime/cache/block_pool.h"

namespace umap::runtime {

class Mapping;

class SizerHost {
 public:
  virtual BlockPool& pool() = 0;
  virtual uint32_t block_size() const = 0;
  // Runs fn while no mapping can be freed; ForEachMapping and MappingAt only inside it.
  virtual void WhileMappingsPinned(absl::FunctionRef<void()> fn) = 0;
  virtual void ForEachMapping(absl::FunctionRef<void(Mapping&)> fn) = 0;
  // The mapping in runtime slot `slot`, or null.
  virtual Mapping* MappingAt(uint32_t slot) const = 0;
  // Evicts down to the pool's limit, at most `max_blocks`. REQUIRES: mappings pinned.
  virtual uint32_t ShrinkPool(uint32_t max_blocks) = 0;
  // Victims per eviction batch (Runtime::EvictBatchSize).
  virtual int EvictBatchSize(bool bulk) const = 0;
  // The limit moved: bound the reads in flight to it again.
  virtual void UpdateReadCap() = 0;
  // This process's pidfd (batched discards), or -1.
  virtual int pidfd() const = 0;
  // Read buffers the I/O channels hold but have not touched yet (not yet counted by the
  // kernel as the process's memory).
  virtual uint64_t UnrealizedBufferBytes() = 0;

 protected:
  ~SizerHost() = default;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_SIZING_SIZER_HOST_H_
