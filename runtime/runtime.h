// Runtime: one bounded cache, one userfaultfd, its handler and write-back threads, and the
// mappings they serve. umap_runtime in the C API is a Runtime.
//
// Threads: Map/Unmap/Sync may be called from any application thread. Faults are resolved by
// `handler_threads` threads reading the userfaultfd; evicted dirty blocks are written by
// `writeback_threads` threads. The fault path takes no global lock and does not allocate:
// mapping lookup is a scan of an atomic slot array, block state lives in per-block atomic
// entries, and the pool, thread references and shadows are lock-free.
//
// Fault modes: "handler" (UFFD messages read by `handler_threads` threads, which resolve the
// faults and drive the io_uring channels) and "signal" (UFFD_FEATURE_SIGBUS: each faulting
// thread resolves its own fault inside a SIGBUS handler; fault_signal.h), chosen by
// RuntimeOptions::fault_mode.
//
// Mapping lifetime: fault handlers read mapping pointers only inside an Srcu read section.
// Unmap clears the mapping's slot, then waits until every reader that might hold it has left
// (Srcu::Synchronize), so no handler can hold a pointer to a mapping that is being freed.
#ifndef UMAP_RUNTIME_RUNTIME_H_
#define UMAP_RUNTIME_RUNTIME_H_

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/block_pool.h"
#include "runtime/cache_sizer.h"
#include "runtime/io/io_manager.h"
#include "runtime/journal_write_back.h"
#include "runtime/options.h"
#include "runtime/shadow_pool.h"
#include "runtime/stats_publisher.h"
#include "runtime/srcu.h"
#include "runtime/thread_refs.h"
#include "runtime/uffd.h"
#include "runtime/zeroed_array.h"
#include "umap/umap_types.h"

namespace umap::runtime {

class Mapping;

// Counters (relaxed atomics; a snapshot is approximate while faults run).
struct Counters {
  std::atomic<uint64_t> faults_missing{0}, faults_wp{0}, blocks_read{0}, blocks_written{0},
      evictions{0}, dirty_evictions{0}, io_errors{0}, sigbus{0}, stale_faults{0},
      pool_waits{0}, shared_syncs{0};
};

class Runtime {
 public:
  static constexpr uint32_t kMaxMappings = 4096;

  static absl::StatusOr<std::unique_ptr<Runtime>> Create(const RuntimeOptions& options);
  ~Runtime();  // unmaps what is left (errors logged), stops threads

  // mmap()-like; see include/umap/umap.h for the rules. Errors carry the errno (PosixError).
  absl::StatusOr<void*> Map(void* addr, size_t length, int prot, int flags, int fd,
                            off_t offset);
  // Writes back, then removes the mapping that starts at addr (exactly `length` long).
  absl::Status Unmap(void* addr, size_t length);
  // Writes back and fdatasyncs the dirty blocks of [addr, addr+length).
  absl::Status Sync(void* addr, size_t length);
  // True when [addr, addr+length) lies inside one of this runtime's mappings.
  bool Owns(const void* addr, size_t length);

  umap_stats Stats() const;

  // Signal fault mode (fault_signal.h): resolves a fault at `addr` in the calling thread if
  // it lies in one of this runtime's mappings. False when it does not.
  bool HandleFaultSignal(uint64_t addr, bool write);
  bool signal_mode() const { return signal_mode_; }
  // Block-sized, page-aligned buffers for faults resolved outside the handler threads
  // (signal mode): lock-free; waits (sleeping) only when every buffer is in use.
  char* AcquireStaging();
  void ReleaseStaging(char* buf);

  // --- observers (the stats publisher) ---
  // Runs fn inside a read section of the mappings' SRCU, so no mapping can be freed until
  // it returns (Destroy waits), and Stats() and ForEachMapping() may read mappings from any
  // thread without mu_, which a umsync stuck on a hung file system can hold. fn must not
  // block.
  void WhileMappingsPinned(absl::FunctionRef<void()> fn);
  // Calls fn for each live mapping. REQUIRES: inside WhileMappingsPinned.
  void ForEachMapping(absl::FunctionRef<void(Mapping&)> fn);
  // The journal's figures and directory if they can be had without waiting; *open = a
  // journal is open (else *out and *dir are left alone).
  bool TryJournalStats(journal::Journal::Stats* out, bool* open, std::string* dir);
  const RuntimeOptions& options() const { return options_; }
  // The stats segment's publisher; null when stats are off or the segment could not be made.
  StatsPublisher* stats_publisher() { return stats_.get(); }
  // Figures of the mapping containing addr; false when there is none.
  bool MappingStats(const void* addr, umap_mapping_stats* out);

  // --- internal, used by Mapping and tests ---
  const Geometry& geometry() const { return geo_; }
  Uffd& uffd() { return *uffd_; }
  BlockPool& pool() { return pool_; }
  ThreadRefs& refs() { return refs_; }
  ShadowPool& shadows() { return shadows_; }
  Counters& counters() { return counters_; }
  // Lazy sizing's controller; null when lazy sizing is off.
  CacheSizer* sizer() { return sizer_.get(); }
  // The mapping in runtime slot `slot`, or null. REQUIRES: inside WhileMappingsPinned.
  Mapping* MappingAt(uint32_t slot) const {
    return slot < kMaxMappings ? slots_[slot].load(std::memory_order_acquire) : nullptr;
  }
  // Evicts down to the pool's limit, at most `max_blocks` (the sizer, when the limit fell).
  // REQUIRES: inside WhileMappingsPinned.
  uint32_t ShrinkPool(uint32_t max_blocks);
  // This process's pidfd (batched discards), or -1.
  int pidfd() const { return pidfd_; }
  Env* env() const { return env_; }
  // The journal directory in use ("" until the first writable mapping, or journal off).
  std::string journal_dir();
  size_t page_size() const { return page_size_; }

  // Acquires a cache block for a fill, evicting another block if needed. kNone only when
  // none could be freed (all busy, or every candidate dirty with no shadow free).
  uint32_t AcquireBlock();
  // One attempt, no waiting (read-ahead): kNone when no block is free or clean right now.
  uint32_t TryAcquireBlock();
  io::IoManager& io() { return *io_; }
  // The thread whose fault queued the fill into `cb` (0: read-ahead). Written before the
  // fill is queued, read when it completes (the scheduler's lock orders the two).
  void set_fill_tid(uint32_t cb, pid_t tid) { fill_tids_[cb] = tid; }  // (ZeroedArray)
  pid_t fill_tid(uint32_t cb) const { return fill_tids_[cb]; }
  // Largest read-ahead window in blocks (0: off): prefetch_bytes, at most a quarter of the
  // cache's capacity now.
  uint32_t prefetch_blocks() const {
    return std::min<uint32_t>(prefetch_blocks_, pool_.limit() / 4);
  }
  // The errno of the most recent failed write-back of evicted blocks (0: none yet).
  void NoteWriteBackError(int err) { last_writeback_errno_.store(err, std::memory_order_relaxed); }
  int last_writeback_errno() const { return last_writeback_errno_.load(std::memory_order_relaxed); }

 private:
  struct HandlerCtx;
  Runtime(const RuntimeOptions& options, const Geometry& geo, std::unique_ptr<Uffd> uffd,
          bool signal_mode);
  absl::Status Start();
  void HandlerLoop(int id);
  void WriteBackLoop();
  void HandleFault(HandlerCtx& ctx, const uffd_msg& msg);
  Mapping* FindMapping(uint64_t addr) const;
  // The pool's batched eviction callback (BlockPool::AcquireBatched).
  void EvictBatch(const uint32_t* cbs, const uint64_t* owners, int n, bool* freed, int pass);
  // Victims per eviction batch: up to 32, fewer in a small cache so that a batch never
  // empties a large part of it.
  int EvictBatchSize() const;
  // Sets the pool's first limit and starts lazy sizing (when on).
  absl::Status StartSizing();
  // Waits until no fault handler (a handler thread, or a thread in its SIGBUS handler) can
  // still hold a pointer to a mapping whose slot was cleared before the call.
  void WaitForHandlers() { mapping_srcu_.Synchronize(); }
  absl::StatusOr<Mapping*> Lookup(void* addr, size_t length, bool exact)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Destroy(Mapping* m);
  // The sink for a new writable mapping of `file`: journaled unless journal_mode is off.
  absl::StatusOr<std::unique_ptr<WriteBack>> MakeWriteBack(File* file);
  // Replays committed journal records of `file` left by an earlier run (not this runtime's).
  absl::Status RecoverPendingFor(JournalHandle* handle, File* file);

  // Const after construction.
  const RuntimeOptions options_;
  const Geometry geo_;
  const size_t page_size_;
  const bool signal_mode_;
  Env* const env_;
  std::unique_ptr<Uffd> uffd_;
  int stop_fd_ = -1;  // eventfd that wakes the handlers for shutdown
  int pidfd_ = -1;    // this process, for batched discards (process_madvise)

  BlockPool pool_;
  ThreadRefs refs_;
  ShadowPool shadows_;
  Counters counters_;
  ZeroedArray<pid_t> fill_tids_;
  uint32_t prefetch_blocks_ = 0;
  // Destroyed explicitly after every mapping (its channels call into mappings).
  std::unique_ptr<io::IoManager> io_;

  // Mapping slots read lock-free by handlers; written under mu_.
  std::atomic<Mapping*> slots_[kMaxMappings] = {};
  std::atomic<uint32_t> slot_high_{0};
  // Read sections around every use of a mapping pointer on the fault path.
  Srcu mapping_srcu_;
  // Signal mode's staging buffers (IndexStack of indexes into one arena).
  static constexpr uint32_t kStagingBuffers = 64;
  char* staging_arena_ = nullptr;
  std::unique_ptr<IndexStack> staging_free_;

  std::unique_ptr<StatsPublisher> stats_;  // stopped first at destruction
  // Stopped early at destruction, destroyed last (mappings give back its park buffers).
  std::unique_ptr<CacheSizer> sizer_;

  std::atomic<bool> stop_{false};
  std::atomic<int> last_writeback_errno_{0};
  std::vector<std::thread> handlers_;
  std::vector<std::thread> writers_;

  absl::Mutex mu_;  // map/unmap and the slot table; never taken on the fault path
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  // Opened with the first writable mapping. `journal_auto_` when we chose the directory (then
  // it is removed at destruction if nothing in it is pending).
  std::unique_ptr<JournalHandle> journal_ ABSL_GUARDED_BY(mu_);
  bool journal_auto_ ABSL_GUARDED_BY(mu_) = false;
  // Journal mapping ids of this runtime's open writable mappings.
  std::set<uint64_t> live_mapping_ids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_RUNTIME_H_
