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
//
// Checkpoints (docs/design.md "Quiesce and resume"): Quiesce writes back everything, then
// closes what a checkpoint cannot carry — the userfaultfd, the io_uring rings, the journal —
// and stops the runtime's threads; the mappings stay as inaccessible address ranges, and a
// thread that touches one waits (parked in Umap's signal handler) until Resume re-creates
// all of it and checks that the journal and the files are still the ones it left.
// The machinery a quiesce stops is started in StartMachinery and stopped in StopThreads and
// ReleaseKernelObjects: a new part with threads or descriptors goes there.
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
#include "runtime/cache/block_pool.h"
#include "runtime/cache/eviction_scratch.h"
#include "runtime/cache/shadow_pool.h"
#include "runtime/cache/zeroed_array.h"
#include "runtime/fault/fault_signal.h"
#include "runtime/fault/mapping_host.h"
#include "runtime/fault/srcu.h"
#include "runtime/fault/thread_refs.h"
#include "runtime/fault/uffd.h"
#include "runtime/io/io_manager.h"
#include "runtime/options.h"
#include "runtime/sizing/cache_sizer.h"
#include "runtime/sizing/sizer_host.h"
#include "runtime/stats/stats_publisher.h"
#include "runtime/stats/stats_source.h"
#include "runtime/writeback/coherence.h"
#include "runtime/writeback/journal_write_back.h"
#include "umap/umap_types.h"

namespace umap::runtime {

class Mapping;

// kRunning: faults are served. kQuiescing: a Quiesce is writing back the last dirty blocks;
// new faults wait. kQuiesced: nothing of the runtime is left in the kernel but its address
// ranges; accesses wait for Resume. kFenced: Resume found that the journal or a file moved on
// since the quiesce (another process wrote it); the runtime never writes again and accesses
// to its mappings get SIGSEGV.
enum class RuntimeState : uint32_t { kRunning = 0, kQuiescing = 1, kQuiesced = 2, kFenced = 3 };
const char* RuntimeStateName(RuntimeState s);

// After every runtime of the process quiesced (umap_quiesce): waits (a few seconds at
// most) until the kernel's io_uring worker threads of the process are gone. They belong to
// the threads that created or used rings, and stay while any ring those threads touched
// is open, so only the whole process's quiesce can wait for them. EBUSY (naming them) when
// some stay: another part of the program holds an io_uring, and CRIU cannot dump them.
absl::Status WaitForIoUringThreadsToExit();

// The owner: the one implementation of MappingHost, the narrow view its mappings get.
class Runtime final : public MappingHost, public FaultSignalTarget {
 public:
  static constexpr uint32_t kMaxMappings = 4096;

  static absl::StatusOr<std::unique_ptr<Runtime>> Create(const RuntimeOptions& options);
  ~Runtime();  // unmaps what is left (errors logged), stops threads

  // mmap()-like; see include/umap/umap.h for the rules, and runtime/writeback/coherence.h for
  // `coherence` (umap_ex2's options). Errors carry the errno (PosixError).
  absl::StatusOr<void*> Map(void* addr, size_t length, int prot, int flags, int fd, off_t offset,
                            const CoherenceRequest& coherence = {});
  // Writes back, then removes the mapping that starts at addr (exactly `length` long).
  absl::Status Unmap(void* addr, size_t length);
  // Writes back and fdatasyncs the dirty blocks of [addr, addr+length).
  absl::Status Sync(void* addr, size_t length);
  // OK while this runtime still owns its journal (none open: OK). After another process or
  // node took the journal over: ESTALE naming it; nothing is written any more. For a process
  // resumed from a checkpoint, before it writes again (journal::Journal::CheckOwner).
  absl::Status CheckJournalOwner();
  // True when [addr, addr+length) lies inside one of this runtime's mappings.
  bool Owns(const void* addr, size_t length);

  // --- the program changes a mapped file itself (runtime_file_change.cc) ---
  // The LD_PRELOAD shim keeps one copy of the file for the program (docs/preload.md, "One
  // copy"): before the program writes, resizes or reads the file bytes under [addr,
  // addr+length) through the file API, a writable mapping writes its dirty blocks there
  // back (umsync) and settles its journal (WriteBack::Settle), so that the file holds
  // every store and no recovery can replay an older image over the program's bytes; for a
  // read (`for_read`) the file need only hold them (no journal sync). A read-only mapping
  // has nothing to do. Errors as umsync's.
  absl::Status PrepareFileChange(void* addr, size_t length, bool for_read);
  // After the program changed the file bytes under [addr, addr+length) (length 0: none),
  // the file being `file_size` bytes now: the mapping drops its copies of them (and of the
  // blocks whose valid bytes moved with the size), so its next accesses read the file.
  // Returns how many blocks kept their bytes (stored to meanwhile).
  absl::StatusOr<uint64_t> FileChanged(void* addr, size_t length, uint64_t file_size);
  // Another process changed the file of the mapping containing addr, now `file_size`
  // bytes (Mapping::ForeignChange): 0 taken as the mapping's own change, 1 copies dropped,
  // 2 write-backs refused from now on (EBUSY).
  absl::StatusOr<int> ForeignChange(void* addr, uint64_t file_size);
  // Hands the mapping that starts at addr (exactly `length` long) to the kernel: its dirty
  // blocks are written back and its journal settled, then the kernel's own MAP_SHARED
  // mapping of the file replaces it at the same address, with the same bytes, and Umap
  // forgets it. For what Umap's per-mapping cache cannot give: a second, overlapping
  // mapping of the file in the process, another process writing the file. Threads touching
  // it meanwhile wait, then find the kernel's mapping; none can store into it between its
  // write-back and the replacement. On failure (the write-back's error) the mapping stays
  // Umap's and nothing is lost.
  absl::Status HandOff(void* addr, size_t length);

  umap_stats Stats() const;

  // --- checkpoints ---
  // Writes back every dirty block — relaxed policy (and journal off): committed and applied
  // as by umsync; atomic policy: staged in the journal, uncommitted, because what was never
  // synced must never reach the file (Resume reads them back; recovery without a resume
  // discards them) —, applies and marks every committed transaction, then stops the
  // runtime's threads, closes its userfaultfd, io_uring rings and journal, and leaves every
  // mapping an inaccessible (PROT_NONE), empty address range. Waits for Map/Unmap/Sync calls in
  // progress; later ones wait for Resume. OK when already quiesced. On failure (a write-back error:
  // its errno, ENOSPC or EIO; EBUSY when something stays pending) the runtime runs on as before and
  // nothing is lost. ESTALE when fenced. The kernel's io_uring worker threads may outlive the rings
  // for a moment, and as long as another runtime's rings are open: the caller waits for
  // them once every runtime quiesced (WaitForIoUringThreadsToExit).
  absl::Status Quiesce();
  // Opens the journal again and checks it is the one this runtime left (same highest LSN
  // and mapping id, this runtime's mappings registered, nothing pending, the same staged
  // blocks) and that every
  // mapped file is the same file with the same size; then re-creates the userfaultfd, the
  // rings and the threads, registers the mappings again and wakes the threads waiting on
  // them. Errors: a journal that is locked by another process (EBUSY) or whose directory is
  // missing, and any failure to re-create: the runtime stays quiesced and Resume may be
  // tried again. ESTALE: the journal or a file changed since the quiesce; the runtime is
  // fenced for good (RuntimeState). OK when running.
  absl::Status Resume();
  RuntimeState state() const {
    return static_cast<RuntimeState>(state_.load(std::memory_order_acquire));
  }
  // Signal dispatch of a SIGSEGV (SEGV_ACCERR) at addr, `write` when the access was a
  // write: kNotOurs (not in a mapping of this runtime, or a running mapping's protection
  // forbids it: the application's own error), kRetry (running again since a quiesce made
  // the page inaccessible: retry), kPark (quiescing or quiesced: wait, then retry), kFenced
  // (the application gets the SIGSEGV). Async-signal-safe.
  using QuiescedAccess = FaultSignalTarget::QuiescedAccess;
  QuiescedAccess ClassifyQuiescedAccess(uint64_t addr, bool write) override;

  // Signal fault mode (fault_signal.h): resolves a fault at `addr` in the calling thread if
  // it lies in one of this runtime's mappings. False when it does not.
  bool HandleFaultSignal(uint64_t addr, bool write) override;
  bool signal_mode() const override { return MappingHost::signal_mode(); }
  // Block-sized, page-aligned buffers for faults resolved outside the handler threads
  // (signal mode): lock-free; waits (sleeping) only when every buffer is in use.
  char* AcquireStaging() override;
  void ReleaseStaging(char* buf) override;
  // Run buffers (signal mode): room for run_blocks() consecutive blocks, for a faulting
  // thread that reads its block together with the blocks after it. Lock-free; null when
  // every one is in use or there are none (blocks too large for a run).
  char* TryAcquireRunBuffer() override;
  void ReleaseRunBuffer(char* buf) override;
  uint32_t run_blocks() const override { return run_blocks_; }

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
  // The stats segment's publisher; null when stats are off or the segment could not be made.
  StatsPublisher* stats_publisher() { return stats_.get(); }
  // Figures of the mapping containing addr; false when there is none.
  bool MappingStats(const void* addr, umap_mapping_stats* out);

  // --- internal, used by the rooms and tests (a Mapping uses MappingHost) ---
  Uffd& uffd() override { return *uffd_; }
  CacheSizer* sizer() override { return sizer_.get(); }
  // The mapping in runtime slot `slot`, or null. REQUIRES: inside WhileMappingsPinned.
  Mapping* MappingAt(uint32_t slot) const {
    return slot < kMaxMappings ? slots_[slot].load(std::memory_order_acquire) : nullptr;
  }
  // Evicts down to the pool's limit, at most `max_blocks` (the sizer, when the limit fell).
  // REQUIRES: inside WhileMappingsPinned.
  uint32_t ShrinkPool(uint32_t max_blocks);
  // Memory a large umsync's journal traffic is about to hold outside the cache, until
  // ReleaseOutsideCache (Mapping::SyncStaging). With lazy sizing the memory budget reserves
  // it (CacheSizer::Reserve: the sizer shrinks the cache); a fixed cache's limit is lowered
  // by as much meanwhile (never below SizingPolicy::kMinBlocks), and MakeRoom evicts down
  // to it: the umsync takes its memory from the cache instead of from beyond the budget.
  void ReserveOutsideCache(uint64_t bytes) override;
  void ReleaseOutsideCache(uint64_t bytes) override;
  void MakeRoom(uint32_t max_blocks) override;
  // This process's pidfd (batched discards), or -1.
  int pidfd() const { return pidfd_; }
  // The journal directory in use ("" until the first writable mapping, or journal off).
  std::string journal_dir();
  // A program's clean exit (an atexit handler of the C API): closes the journal if no
  // mapping is registered in it and nothing is pending, and removes it when this runtime
  // chose the directory (the automatic one). A runtime still in use keeps its journal.
  void CloseIdleJournal();

  // Acquires a cache block for a fill, evicting another block if needed. kNone only when
  // none could be freed (all busy, or every candidate dirty with no shadow free).
  uint32_t AcquireBlock() override;
  // Victims per eviction batch: up to EvictionScratch::kLargeBatch, fewer in a small cache
  // (1/64 of it, 1/8 for read-ahead) so that a batch never empties a large part of it.
  int EvictBatchSize(bool bulk) const;
  // One attempt, no waiting (read-ahead): kNone when no block is free or clean right now.
  // `bulk`: for read-ahead, which may evict in larger batches (EvictBatchSize).
  uint32_t TryAcquireBlock(bool bulk = false) override;
  io::IoManager& io() { return *io_; }
  // The thread whose fault queued the fill into `cache_block` (0: read-ahead). Written before the
  // fill is queued, read when it completes (the scheduler's lock orders the two).
  void set_fill_tid(uint32_t cache_block, pid_t tid) override {
    fill_tids_[cache_block] = tid;  // (ZeroedArray)
  }
  pid_t fill_tid(uint32_t cache_block) const override { return fill_tids_[cache_block]; }
  // Largest read-ahead window in blocks (0: off): prefetch_bytes, at most a quarter of the
  // cache's capacity now.
  uint32_t prefetch_blocks() const override {
    return std::min<uint32_t>(prefetch_blocks_, pool_.limit() / 4);
  }
  // Bounds the reads in flight to half the cache's limit (at least one largest read), so a
  // small cache's read buffers stay small (io::IoManager::SetReadCap). At every start of
  // the machinery (a resume makes a new I/O manager), and from the sizer as the limit moves.
  void UpdateReadCap();
  // The errno of the most recent failed write-back of evicted blocks (0: none yet).
  void NoteWriteBackError(int err) override {
    last_writeback_errno_.store(err, std::memory_order_relaxed);
  }
  int last_writeback_errno() const override {
    return last_writeback_errno_.load(std::memory_order_relaxed);
  }

 private:
  // The narrow view of this runtime that the cache sizer (SizerHost) and the stats
  // publisher (StatsSource) get (runtime_views.cc): one object, so what both need is
  // forwarded once. A Mapping gets MappingHost, which Runtime implements itself.
  class RoomView final : public SizerHost, public StatsSource {
   public:
    explicit RoomView(Runtime* rt) : rt_(rt) {}
    // Both.
    uint32_t block_size() const override;
    void WhileMappingsPinned(absl::FunctionRef<void()> fn) override;
    void ForEachMapping(absl::FunctionRef<void(Mapping&)> fn) override;
    // SizerHost.
    BlockPool& pool() override;
    Mapping* MappingAt(uint32_t slot) const override;
    uint32_t ShrinkPool(uint32_t max_blocks) override;
    int EvictBatchSize(bool bulk) const override;
    void UpdateReadCap() override;
    int pidfd() const override;
    uint64_t UnrealizedBufferBytes() override;
    // StatsSource.
    const RuntimeOptions& options() const override;
    UffdAccess uffd_access() override;
    uint64_t NowMicros() override;
    umap_stats Stats() override;
    uint32_t pool_limit() override;
    CacheSizer* sizer() override;
    io::InFlight InFlightNow() override;
    bool TryJournalStats(journal::Journal::Stats* out, bool* open, std::string* dir) override;

   private:
    Runtime* const rt_;
  };
  RoomView view_{this};

  struct HandlerCtx;
  // What Resume must find again: the journal exactly as the quiesce left it, and the files.
  struct QuiesceSnapshot {
    bool journal = false;  // a journal was open (and is now suspended)
    uint64_t last_lsn = 0;
    uint64_t last_mapping_id = 0;
    uint64_t staged_blocks = 0;         // atomic policy: the unsynced blocks, staged by the quiesce
    std::vector<uint64_t> mapping_ids;  // this runtime's writable mappings in the journal
    std::vector<std::pair<Mapping*, FileIdentity>> files;
  };
  Runtime(const RuntimeOptions& options, const Geometry& geo, std::unique_ptr<Uffd> uffd,
          bool signal_mode);
  absl::Status Start();
  // The machinery a quiesce stops: userfaultfd (unless already open), I/O manager and its
  // rings, handler and write-back threads, the cache sizer's thread, stats publisher. The
  // first call also sets the cache's first limit (StartSizing). On failure what was started
  // is stopped again.
  absl::Status StartMachinery();
  // Stops the stats publisher, the cache sizer's thread, the handler threads (giving the I/O
  // channels back to the manager's own threads) and the write-back threads. Idempotent.
  void StopThreads();
  // Closes the I/O manager (REQUIRES: every mapping's queue removed), the userfaultfd and
  // the runtime's other descriptors. Idempotent.
  void ReleaseKernelObjects();
  // Map, Unmap and Sync run inside an operation; Quiesce closes the gate, waiting for the
  // operations in progress, and new ones wait until Resume opens it. Fenced: ESTALE.
  absl::Status EnterOperation(bool fenced_ok = false);
  void LeaveOperation();
  // One Map, Unmap or Sync (or file change) inside the gate, for the length of a scope.
  class Operation {
   public:
    explicit Operation(Runtime* rt, bool fenced_ok = false)
        : rt_(rt), status_(rt->EnterOperation(fenced_ok)) {}
    ~Operation() {
      if (status_.ok()) rt_->LeaveOperation();
    }
    Operation(const Operation&) = delete;
    Operation& operator=(const Operation&) = delete;
    const absl::Status& status() const { return status_; }

   private:
    Runtime* const rt_;
    const absl::Status status_;
  };
  // Live mappings. REQUIRES: the gate is closed (the set cannot change).
  std::vector<Mapping*> LiveMappings();
  // Quiesce steps (runtime_quiesce.cc).
  // Relaxed policy (and no journal): umsync of each mapping. Atomic policy, `final` only:
  // stages the dirty blocks in the journal (Mapping::StageDirty).
  absl::Status WriteBackForQuiesce(const std::vector<Mapping*>& maps, bool final);
  absl::Status CheckNothingPending(const std::vector<Mapping*>& maps)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  void AbortQuiesce(const std::vector<Mapping*>& maps, bool detached);
  void Evacuate(const std::vector<Mapping*>& maps);
  absl::Status RegisterAgain(const std::vector<Mapping*>& maps);
  // Takes each mapping's partitioned-write locks again (ESTALE: another writer took one);
  // on an error the caller releases those it took.
  absl::Status RelockAfterRestore(const std::vector<Mapping*>& maps)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  absl::Status ValidateAfterRestore() ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  void Fence(const std::vector<Mapping*>& maps, const absl::Status& why);
  void ReopenGate();
  void HandlerLoop(int id);
  void WriteBackLoop();
  void HandleFault(HandlerCtx& ctx, const uffd_msg& msg);
  Mapping* FindMapping(uint64_t addr) const;
  // The pool's batched eviction callback (BlockPool::AcquireBatched), with `batch` to fill
  // (capacity >= n).
  void EvictBatch(const uint32_t* cache_blocks, const uint64_t* owners, int n, bool* freed,
                  int pass, EvictionBatch& batch);
  // Sets the pool's first limit and starts lazy sizing (when on).
  absl::Status StartSizing();
  // Waits until no fault handler (a handler thread, or a thread in its SIGBUS handler) can
  // still hold a pointer to a mapping whose slot was cleared before the call.
  void WaitForHandlers() { mapping_srcu_.Synchronize(); }
  absl::StatusOr<Mapping*> Lookup(void* addr, size_t length, bool exact)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Forgets a mapping whose slot is cleared; `keep_range`: the address range is the
  // kernel's now (HandOff), so it is neither unregistered nor released.
  void Destroy(Mapping* m, bool keep_range = false);
  // The sink for a new writable mapping of `file`: journaled unless journal_mode is off.
  absl::StatusOr<std::unique_ptr<WriteBack>> MakeWriteBack(File* file);
  // Closes the journal (and removes it when this runtime chose the directory and nothing in
  // it is pending); with only_if_idle, only when no mapping is registered in it, nothing is
  // pending and no map is using it.
  void CloseJournalLocked(bool only_if_idle) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replays committed journal records of `file` left by an earlier run (not this runtime's).
  absl::Status RecoverPendingFor(JournalHandle* handle, File* file);

  // Const after construction.
  const RuntimeOptions options_;
  const Geometry geo_;
  std::unique_ptr<Uffd> uffd_;
  int stop_fd_ = -1;  // eventfd that wakes the handlers for shutdown
  int pidfd_ = -1;    // this process, for batched discards (process_madvise)

  BlockPool pool_;
  // Buffers of the large eviction batches: one set per thread evicting at once (a miss's
  // thread, the I/O threads, the sizer), 16 x ~20 KiB; a seventeenth thread evicts a small
  // batch.
  EvictionScratch eviction_scratch_{16};
  // Both halves of Reserve/ReleaseOutsideCache: the sizer's budget, or a fixed cache's limit
  // less what is reserved now.
  void AdjustOutsideCache(uint64_t add, uint64_t remove);
  // ReserveOutsideCache of a fixed cache: its configured limit and the bytes reserved.
  absl::Mutex outside_mu_;
  uint32_t fixed_limit_ ABSL_GUARDED_BY(outside_mu_) = 0;
  uint64_t outside_reserved_ ABSL_GUARDED_BY(outside_mu_) = 0;
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
  // Ranges handed to the kernel (HandOff), most recent kHandedOff of them, read lock-free
  // by the signal handler: a fault raised before the hand-off is retried, not the
  // application's.
  static constexpr int kHandedOff = 64;
  std::atomic<uint64_t> handed_off_base_[kHandedOff] = {};
  std::atomic<uint64_t> handed_off_end_[kHandedOff] = {};
  std::atomic<uint32_t> handed_off_next_{0};
  bool WasHandedOff(uint64_t addr) const {
    for (int i = 0; i < kHandedOff; ++i) {
      if (addr >= handed_off_base_[i].load(std::memory_order_acquire) &&
          addr < handed_off_end_[i].load(std::memory_order_acquire)) {
        return true;
      }
    }
    return false;
  }
  // Read sections around every use of a mapping pointer on the fault path.
  Srcu mapping_srcu_;
  // Signal mode's staging buffers (IndexStack of indexes into one arena).
  static constexpr uint32_t kStagingBuffers = 64;
  char* staging_arena_ = nullptr;
  std::unique_ptr<IndexStack> staging_free_;
  // Run buffers: kRunBuffers of kRunBytes (run_blocks_ blocks; 0 when a block is too large
  // for a run of two).
  static constexpr uint32_t kRunBuffers = 16;
  static constexpr size_t kRunBytes = size_t{64} << 10;
  uint32_t run_blocks_ = 0;
  char* run_arena_ = nullptr;
  std::unique_ptr<IndexStack> run_free_;

  std::unique_ptr<StatsPublisher> stats_;  // stopped first at destruction
  // Stopped early at destruction, destroyed last (mappings give back its park buffers).
  std::unique_ptr<CacheSizer> sizer_;
  bool sizing_started_ = false;  // StartSizing ran (with the first StartMachinery)

  std::atomic<bool> stop_{false};
  std::atomic<int> last_writeback_errno_{0};
  std::atomic<uint32_t> state_{static_cast<uint32_t>(RuntimeState::kRunning)};
  std::atomic<int> uffd_access_{0};  // of the userfaultfd open now or last (Stats)
  // Guards io_ and io_carried_ against Stats() while a Quiesce or Resume replaces them
  // (nothing on the fault path uses io_ then).
  mutable absl::Mutex io_swap_mu_;
  // I/O figures of the I/O managers a quiesce closed, added to the live one's in Stats().
  umap_stats io_carried_ ABSL_GUARDED_BY(io_swap_mu_) = {};
  std::vector<std::thread> handlers_;
  std::vector<std::thread> writers_;

  absl::Mutex checkpoint_mu_;  // one Quiesce or Resume at a time
  std::unique_ptr<QuiesceSnapshot> snapshot_ ABSL_GUARDED_BY(checkpoint_mu_);
  absl::Mutex gate_mu_;
  bool gate_open_ ABSL_GUARDED_BY(gate_mu_) = true;
  int operations_ ABSL_GUARDED_BY(gate_mu_) = 0;

  absl::Mutex mu_;  // map/unmap and the slot table; never taken on the fault path
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  // Opened with the first writable mapping. `journal_auto_` when we chose the directory (then
  // it is removed at destruction if nothing in it is pending).
  std::unique_ptr<JournalHandle> journal_ ABSL_GUARDED_BY(mu_);
  bool journal_auto_ ABSL_GUARDED_BY(mu_) = false;
  // Maps between taking journal_ and registering their mapping in it (MakeWriteBack).
  int journal_users_ ABSL_GUARDED_BY(mu_) = 0;
  // Journal mapping ids of this runtime's open writable mappings.
  std::set<uint64_t> live_mapping_ids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_RUNTIME_H_
