// MappingHost: what a Mapping needs from the runtime that owns it, and no more. Runtime is
// the one implementation; a Mapping never sees the rest of it (map, unmap, checkpoints,
// stats), so the fault path's dependencies are the ones listed here.
//
// The parts the fault path reads on every fault (the pool, shadows, thread references,
// counters) are plain references, set once: no virtual call there. What a checkpoint
// re-creates (the userfaultfd), what lazy sizing adds, and the pool-wide decisions (a
// block to fill, room to make, memory reserved outside the cache) are virtual.
#ifndef UMAP_RUNTIME_FAULT_MAPPING_HOST_H_
#define UMAP_RUNTIME_FAULT_MAPPING_HOST_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "runtime/cache/block_pool.h"
#include "runtime/cache/shadow_pool.h"
#include "runtime/fault/thread_refs.h"
#include "runtime/fault/uffd.h"
#include "runtime/options.h"
#include "runtime/sizing/cache_sizer.h"
#include "umap/env.h"

namespace umap::runtime {

// Counters (relaxed atomics; a snapshot is approximate while faults run).
struct Counters {
  std::atomic<uint64_t> faults_missing{0}, faults_wp{0}, blocks_read{0}, blocks_written{0},
      evictions{0}, dirty_evictions{0}, io_errors{0}, sigbus{0}, stale_faults{0}, pool_waits{0},
      shared_syncs{0};
};

class MappingHost {
 public:
  MappingHost(const MappingHost&) = delete;
  MappingHost& operator=(const MappingHost&) = delete;

  // --- the shared parts, fixed for the runtime's life ---
  BlockPool& pool() { return pool_; }
  ShadowPool& shadows() { return shadows_; }
  ThreadRefs& refs() { return refs_; }
  Counters& counters() { return counters_; }
  Env* env() const { return env_; }
  const RuntimeOptions& options() const { return options_; }
  size_t page_size() const { return page_size_; }
  const Geometry& geometry() const { return geo_; }
  // Faults resolved in the faulting thread (fault_signal.h), not by handler threads.
  bool signal_mode() const { return signal_mode_; }

  // --- parts that come and go ---
  // The userfaultfd (a checkpoint closes it and Resume opens a new one).
  virtual Uffd& uffd() = 0;
  // Lazy sizing's controller; null when lazy sizing is off.
  virtual CacheSizer* sizer() = 0;

  // --- pool-wide decisions ---
  // A cache block for a fill, evicting another if needed; BlockPool::kNone only when none
  // could be freed. TryAcquireBlock: one attempt, no waiting (read-ahead; `bulk` may evict
  // in larger batches).
  virtual uint32_t AcquireBlock() = 0;
  virtual uint32_t TryAcquireBlock(bool bulk) = 0;
  // A fixed cache above its (lowered) limit: evicts at most `max_blocks` towards it.
  virtual void MakeRoom(uint32_t max_blocks) = 0;
  // Memory a large umsync's journal traffic holds outside the cache meanwhile.
  virtual void ReserveOutsideCache(uint64_t bytes) = 0;
  virtual void ReleaseOutsideCache(uint64_t bytes) = 0;
  // Largest read-ahead window in blocks now (0: off).
  virtual uint32_t prefetch_blocks() const = 0;
  // The errno of the most recent failed write-back of evicted blocks (0: none yet).
  virtual void NoteWriteBackError(int err) = 0;
  virtual int last_writeback_errno() const = 0;

  // --- buffers and bookkeeping of the fault path ---
  // Signal mode's block-sized staging buffers (waits only when every one is in use), and
  // run buffers of run_blocks() blocks (null when none is free).
  virtual char* AcquireStaging() = 0;
  virtual void ReleaseStaging(char* buf) = 0;
  virtual char* TryAcquireRunBuffer() = 0;
  virtual void ReleaseRunBuffer(char* buf) = 0;
  virtual uint32_t run_blocks() const = 0;
  // The thread whose fault queued the fill into `cache_block` (0: read-ahead).
  virtual void set_fill_tid(uint32_t cache_block, pid_t tid) = 0;
  virtual pid_t fill_tid(uint32_t cache_block) const = 0;

 protected:
  // The references must outlive every Mapping (the owner's members: their addresses may be
  // taken before they are constructed, never used before).
  MappingHost(BlockPool& pool, ShadowPool& shadows, ThreadRefs& refs, Counters& counters,
              Env* env, const RuntimeOptions& options, const Geometry& geo, size_t page_size,
              bool signal_mode)
      : pool_(pool),
        shadows_(shadows),
        refs_(refs),
        counters_(counters),
        env_(env),
        options_(options),
        geo_(geo),
        page_size_(page_size),
        signal_mode_(signal_mode) {}
  ~MappingHost() = default;

 private:
  BlockPool& pool_;
  ShadowPool& shadows_;
  ThreadRefs& refs_;
  Counters& counters_;
  Env* const env_;
  const RuntimeOptions& options_;
  const Geometry& geo_;
  const size_t page_size_;
  const bool signal_mode_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_FAULT_MAPPING_HOST_H_
