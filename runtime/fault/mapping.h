// Mapping: one file mapped by umap(): its address range, cache entry table, backing File and
// write-back sink. Fault handling and eviction for its blocks happen here.
//
// Invariants (every transition of block b happens under b's entry lock):
//   present         the block's pages are installed in the application's address space and
//                   a cache block (cache_block) of the pool accounts for them;
//   dirty           written since the last capture; for a writable mapping, dirty <=>
//                   the pages are not write-protected (clean resident pages are WP'd, so
//                   the first write faults and marks the block dirty);
//   shadow          an evicted version is in shadow buffer s, not yet written back: a miss
//                   is served from s, and the block is not evicted dirty again until s is
//                   written (one write-back of a block in flight at a time);
//   staged          the evicted version lives with the write-back sink (atomic policy);
//   poisoned        pages past end of file (or a failed read) answer SIGBUS;
//   parked          (lazy sizing) resident and clean, its pages dropped and its data in a
//                   park buffer, so that its next access faults (cache_sizer.h).
#ifndef UMAP_RUNTIME_FAULT_MAPPING_H_
#define UMAP_RUNTIME_FAULT_MAPPING_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/direct_writer.h"
#include "runtime/cache/eviction_batch.h"
#include "runtime/cache/index_stack.h"
#include "runtime/fault/cache_entry_table.h"
#include "runtime/io/io_manager.h"
#include "runtime/sizing/reuse_tracker.h"
#include "runtime/writeback/coherence.h"
#include "runtime/writeback/write_back.h"
#include "umap/env.h"

namespace umap::runtime {

class MappingHost;

class Mapping final : public io::IoFileClient {
 public:
  struct Params {
    char* base;
    size_t length;         // as the caller asked
    size_t region_length;  // reserved, a multiple of the block size
    uint64_t file_offset;  // byte offset of base in the file (block-aligned)
    uint64_t file_size;    // at map time; pages past it raise SIGBUS
    bool writable;
    uint32_t slot;
    int region_prot;  // protection of the reserved range while the runtime runs
  };

  Mapping(MappingHost* rt, const Params& p, std::unique_ptr<File> file);
  ~Mapping() override;

  // Registers the mapping's file queue with the I/O manager and, when `direct`, opens an
  // O_DIRECT reader (falls back to buffered reads where the file system refuses it).
  void AttachIo(io::IoManager* io, bool direct);
  // Drops queued fills and waits for reads in flight. REQUIRES: no handler is inside this
  // mapping (slot cleared, handlers quiesced).
  void DetachIo();

  char* base() const { return base_; }
  size_t length() const { return length_; }
  size_t region_length() const { return region_length_; }
  uint32_t slot() const { return slot_; }
  bool writable() const { return writable_; }
  int region_prot() const { return region_prot_; }
  // The file's size as the mapping knows it: at map time, then as FileChanged reports.
  uint64_t file_size() const { return file_size_.load(std::memory_order_acquire); }
  bool Contains(uint64_t addr) const {
    return addr - reinterpret_cast<uint64_t>(base_) < region_length_;
  }
  uint64_t BlockOf(uint64_t addr) const {
    return (addr - reinterpret_cast<uint64_t>(base_)) / block_size_;
  }
  uint64_t Owner(uint64_t block) const { return static_cast<uint64_t>(slot_) << 48 | block; }
  uint64_t blocks() const { return table_.size(); }
  // File block index of mapping block 0 (the sinks and the journal speak file blocks).
  uint64_t first_file_block() const { return file_offset_ / block_size_; }
  CacheEntryTable& table() { return table_; }
  File* file() { return file_.get(); }

  void set_write_back(std::unique_ptr<WriteBack> wb) { write_back_ = std::move(wb); }
  // What the mapping does about other writers (its locks, its read-only parts); null drops
  // it (the locks are released) once nothing will be written back any more.
  void set_coherence(std::unique_ptr<Coherence> c) { coherence_ = std::move(c); }
  Coherence* coherence() { return coherence_.get(); }
  // Mapping blocks where the region's protection changes (a partitioned-write mapping's
  // read-only parts are VMAs of their own). One UFFDIO_COPY must not span two VMAs: the
  // kernel refuses it after installing the first part.
  void set_protection_boundaries(std::vector<uint64_t> blocks) {
    protection_boundaries_ = std::move(blocks);
  }
  WriteBack* write_back() { return write_back_.get(); }
  absl::Status CloseWriteBack() { return write_back_->Close(); }

  // io::IoFileClient (called by the I/O manager).
  uint32_t QueuedCb(uint64_t block) const override;
  File* read_file() override;
  uint64_t ByteOffset(uint64_t block) const override { return file_offset_ + block * block_size_; }
  size_t ValidBytes(uint64_t first, uint32_t count) const override;
  void Complete(const io::Run& run, char* buf, const absl::Status& st) override;
  bool FallBackToBuffered() override;

  // Per-mapping I/O figures (umap_get_mapping_stats).
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  uint64_t fills() const { return fills_.load(std::memory_order_relaxed); }
  uint64_t prefetched() const { return prefetched_.load(std::memory_order_relaxed); }
  bool direct_io() const { return use_direct_.load(std::memory_order_relaxed); }
  // For the stats segment (relaxed counters, approximate while faults run): missing faults
  // taken, of those the ones that read the file, first writes (write-protect faults),
  // blocks resident and dirty now, umsyncs finished, and when the running umsync started
  // (Env::NowMicros(), 0 when none runs).
  uint64_t faults() const { return faults_.load(std::memory_order_relaxed); }
  uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }
  uint64_t first_writes() const { return first_writes_.load(std::memory_order_relaxed); }
  uint64_t resident_blocks() const { return Gauge(resident_); }
  uint64_t dirty_blocks() const { return Gauge(dirty_); }
  uint64_t umsyncs() const { return umsyncs_.load(std::memory_order_relaxed); }
  uint64_t umsync_started_us() const { return sync_started_us_.load(std::memory_order_relaxed); }
  uint64_t file_offset() const { return file_offset_; }
  // The I/O queue's identity (io::InFlightRequest::owner of this mapping's reads).
  const void* io_queue() const { return ioq_; }

  // Fault path. Handler mode: handler threads, `staging` is the handler's block-sized
  // buffer. Signal mode: ResolveFault, in the faulting thread (inside its SIGBUS handler):
  // when it returns the thread retries its access. `write`: the access was a write (false
  // when unknown: a write then takes one more, write-protect, fault).
  void HandleMissing(uint64_t block, bool write, pid_t tid, char* staging);
  // False when the writer got SIGBUS (the protection could not be cleared; in signal mode
  // the caller hands the fault to the application's SIGBUS disposition).
  bool HandleWriteProtect(uint64_t block, pid_t tid);
  // Signal mode: false when the fault at `addr` is a SIGBUS for the application (a poisoned
  // block, or a page past end of file).
  bool ResolveFault(uint64_t addr, bool write, pid_t tid);
  // Eviction of `block` held in cache block `cache_block` (pool callback; any fault handler), in
  // two steps around the batch's discard (eviction_batch.h): PrepareEvict locks the entry, captures
  // a dirty image into a shadow and lists the pages (false: not evictable now, nothing listed);
  // FinishEvict unlocks it, evicted, or restored when the pages could not be dropped.
  bool PrepareEvict(uint64_t block, uint32_t cache_block, EvictionBatch* batch);
  void FinishEvict(const EvictionBatch::Victim& victim);
  // --- lazy sizing (cache_sizer.h; mapping_park.cc) ---
  // The mapping's reuse tracker (null when lazy sizing is off); set before it is published.
  void set_tracker(std::unique_ptr<ReuseTracker> t) { tracker_ = std::move(t); }
  ReuseTracker* tracker() { return tracker_.get(); }
  // The sizer parks a sampled block, in two steps around the batch's discard as eviction
  // does: PreparePark locks a resident, clean, unreferenced block, copies it into park
  // buffer `park` and lists its pages (false: not parkable now, nothing listed);
  // FinishPark unlocks it parked, or as it was when its pages could not be dropped.
  bool PreparePark(uint64_t block, uint32_t park, EvictionBatch* batch);
  void FinishPark(const EvictionBatch::Victim& victim);
  // Evicts a block parked in `park` that was not touched for too long (it is clean): its
  // next access is a miss the tracker sees. False when it is no longer parked there, or
  // busy now.
  bool EvictParked(uint64_t block, uint32_t park);
  // Figures the sizer computes (blocks) and the share of the cache it gives this mapping.
  void set_sizing(uint32_t virtual_blocks, uint32_t working_set_blocks) {
    virtual_blocks_.store(virtual_blocks, std::memory_order_relaxed);
    working_set_blocks_.store(working_set_blocks, std::memory_order_relaxed);
  }
  void set_quota(uint32_t blocks) { quota_.store(blocks, std::memory_order_relaxed); }
  uint32_t quota() const { return quota_.load(std::memory_order_relaxed); }
  uint32_t virtual_blocks() const { return virtual_blocks_.load(std::memory_order_relaxed); }
  uint32_t working_set_blocks() const {
    return working_set_blocks_.load(std::memory_order_relaxed);
  }
  uint64_t remisses() const { return remisses_.load(std::memory_order_relaxed); }
  uint64_t sampled_hits() const { return sampled_hits_.load(std::memory_order_relaxed); }

  // Write-back thread: writes shadows of this mapping (distinct blocks) as one batch.
  // Returns false when the write failed (the shadows stay pending; retry later).
  bool WriteShadows(absl::Span<const uint32_t> shadows);

  // --- the file changed outside the cache (mapping_file_change.cc) ---
  // File bytes under blocks [first, end) were written outside the cache, and the file is
  // now `file_size` bytes: the blocks' copies are dropped (their next access reads the
  // file), and, when the size moved, so are the blocks whose valid bytes changed; past a
  // smaller end even dirty ones (the kernel drops a truncated page cache). A block stored
  // to meanwhile keeps its bytes. Returns how many blocks kept theirs.
  // REQUIRES: the caller wrote back the range's dirty blocks first (Runtime::PrepareFileChange).
  uint64_t FileChanged(uint64_t first, uint64_t end, uint64_t file_size);
  // Another process changed the file, now `file_size` bytes (noticed through its times and
  // size, which this mapping's own write-backs move too). A smaller size is a truncation:
  // taken in (SIGBUS past it, nothing written back past it), the rest stays. Within
  // kOwnWriteWindow of an own write-back any other change counts as the mapping's own.
  // Otherwise, with nothing of the mapping unwritten, its copies are dropped (it reads the
  // other's bytes); with unwritten blocks it refuses every write-back from now on (EBUSY,
  // logged): writing its whole blocks back would overwrite the other's bytes in them.
  enum class Foreign { kOwn, kDropped, kRefused };
  Foreign ForeignChange(uint64_t file_size);
  // The refusal a foreign change set (OK: none).
  absl::Status ForeignRefusal() {
    if (!foreign_refused_.load(std::memory_order_acquire)) return absl::OkStatus();
    absl::MutexLock l(&foreign_mu_);
    return foreign_status_;
  }
  static constexpr int64_t kOwnWriteWindowUs = 1'000'000;

  // Runtime::HandOff: while set, faults on this mapping wait (signal mode: parked outside
  // the handlers' read section; handler mode: left blocked in the kernel).
  bool handing_off() const { return handing_off_.load(std::memory_order_acquire); }
  void set_handing_off(bool on) { handing_off_.store(on, std::memory_order_release); }

  // umsync of blocks [first, end): capture, write back, fdatasync. Serialised per mapping;
  // a caller that waited may return the result of a later umsync covering it (group commit).
  absl::Status Sync(uint64_t first, uint64_t end);
  // After the last Sync: returns every cache block to the pool (no handler may be inside
  // this mapping any more).
  void ReleaseAll();
  // Checkpoint, atomic policy (Runtime::Quiesce): hands every dirty block to the sink as an
  // evicted one, i.e. stages it in the journal uncommitted (atomic: nothing that was never
  // synced reaches the file), and marks it staged. On failure the blocks stay dirty.
  // REQUIRES: write_back()->keeps_evicted(); no fault being resolved (so no eviction).
  absl::Status StageDirty();
  // Checkpoint, after the final write-back: returns every cache block to the pool (parked
  // blocks' too, with their park buffers), forgets every block's state except "staged" (the
  // next fault reads the file, or the journal's staged image) and drops every page of the
  // range. REQUIRES: nothing dirty or in a shadow, no fill queued (DetachIo), no fault
  // being resolved, the cache sizer's thread stopped. Returns 0, EBUSY when a
  // block still holds unwritten data (nothing dropped then), or the errno of the discard.
  int Evacuate();

 private:
  char* BlockAddr(uint64_t block) const { return base_ + block * block_size_; }
  static uint64_t Gauge(const std::atomic<int64_t>& g) {
    const int64_t v = g.load(std::memory_order_relaxed);
    return v > 0 ? static_cast<uint64_t>(v) : 0;
  }
  // Drops the cached copies of blocks [first, end) (dirty ones only with drop_dirty);
  // returns how many kept theirs. DropCopy: one block; false when it kept its bytes.
  uint64_t DropCopies(uint64_t first, uint64_t end, bool drop_dirty);
  bool DropCopy(uint64_t block, bool drop_dirty);
  // A write-back of the mapping runs for the length of the scope (the file's times move
  // meanwhile, and for kOwnWriteWindowUs after).
  class OwnWrite {
   public:
    explicit OwnWrite(Mapping* m) : m_(m) {
      m_->own_writes_.fetch_add(1, std::memory_order_acq_rel);
    }
    ~OwnWrite() {
      m_->NoteOwnWrite();
      m_->own_writes_.fetch_sub(1, std::memory_order_acq_rel);
    }
    OwnWrite(const OwnWrite&) = delete;
    OwnWrite& operator=(const OwnWrite&) = delete;

   private:
    Mapping* const m_;
  };
  void NoteOwnWrite();
  // Bytes of `block` inside the file (0 when the block is wholly past end of file).
  size_t ValidBytes(uint64_t block) const;
  bool InSync(uint64_t block) const {
    return block >= sync_first_.load(std::memory_order_acquire) &&
           block < sync_end_.load(std::memory_order_acquire);
  }
  void RaiseSigbus(uint64_t block, uint64_t entry, pid_t tid, const absl::Status& why);
  // Handler mode: wakes the threads blocked on the block at addr, logging a failure.
  void WakeOrLog(char* addr);
  // Locking a missing block's entry for a fill: kLocked (entry locked; *cache_block holds a cache
  // block, or kNone if none could be freed or the block is past end of file), kResolved
  // (another thread filled or poisoned it), kFilling (a fill is queued or in flight),
  // kStashed (entry locked: a read-ahead trigger waiting in a stash buffer).
  enum class MissLock { kLocked, kResolved, kFilling, kStashed, kParked };
  MissLock LockMissing(uint64_t block, size_t valid, uint32_t* cache_block,
                       CacheEntryTable::Entry* e);
  // Signal mode: sleeps until the queued fill of `block` has completed or failed.
  void WaitWhileFilling(uint64_t block);
  // Reads `count` blocks from `block` on from the file into buf (aligned, count blocks),
  // `valid` bytes of them inside the file: O_DIRECT where possible, zeros past what the
  // file holds.
  absl::Status ReadBlock(uint64_t block, char* buf, size_t valid, uint32_t count = 1);
  // Installs one block from buf (padded with zeros to the page); poisons pages past end of
  // file. Returns 0 or the errno.
  int InstallBlock(uint64_t block, char* buf, size_t valid, bool writable_now);
  // Makes the block resident in cache block cache_block and unlocks its entry.
  // Counts a fill's read from the file (blocks, valid bytes); called before the install.
  void NoteRead(uint32_t blocks, size_t bytes);
  void PublishFilled(uint64_t block, uint64_t entry, uint32_t cache_block, bool dirty, pid_t tid);
  // Signal mode, the common miss: read and install in the faulting thread.
  void FillInline(uint64_t block, uint64_t entry, uint32_t cache_block, bool write, pid_t tid);
  struct Stream;  // a sequential stream (below)
  // Signal mode, the second miss of stream `s` (its start): reads the block and the stream's
  // first read-ahead window in one read and installs them, in the faulting thread, instead
  // of a round trip through the I/O channels. False (nothing done, entry still locked) when
  // no run buffer is free.
  bool FillInlineRun(uint64_t block, uint64_t entry, uint32_t cache_block, bool write, pid_t tid,
                     Stream* s);
  // Locks up to `max` - 1 missing blocks after `block` that can be read with it, each with
  // a cache block (no waiting): their entries into entries[1..], cache blocks into
  // cache_blocks[1..]. Returns how many blocks the run has, `block` included.
  uint32_t LockRunAfter(uint64_t block, uint32_t max, uint64_t* entries, uint32_t* cache_blocks);
  // A miss that found no cache block: every one is dirty and cannot leave. SIGBUS, with why
  // (the last write-back error) and what to do.
  void RaiseNoCacheBlock(uint64_t block, const CacheEntryTable::Entry& e, pid_t tid);
  // A miss on a block that is neither shadowed nor staged: read from the file, here (signal
  // mode, a file with a descriptor) or through the I/O manager's queues.
  void FillFromFile(uint64_t block, const CacheEntryTable::Entry& e, uint32_t cache_block,
                    bool write, pid_t tid);
  // A miss on a block whose evicted version is in a shadow buffer or staged in the journal.
  void ServeEvicted(uint64_t block, CacheEntryTable::Entry e, uint32_t cache_block, bool write,
                    pid_t tid, char* staging);
  // Sequential-stream detection on a miss of `block`; queues read-ahead when it continues
  // a stream (fault path: no allocation, no waiting for cache blocks).
  // Returns true when the miss continues a stream.
  bool MaybePrefetch(uint64_t block);
  // Queues a fill of `block` into cache block `cache_block` (entry locked by the caller, who passes
  // its value; the entry is unlocked here).
  void QueueFill(uint64_t block, uint64_t entry, uint32_t cache_block, bool write, pid_t tid,
                 bool kick = true, bool stash = false);
  // A thread waits for the queued fill of `block`: clears its trigger mark so that it is
  // installed. False when the fill completed meanwhile (the caller starts over).
  bool ClaimQueuedFill(uint64_t block);
  // Installs a stashed block (entry locked) from its stash buffer.
  void ServeStash(uint64_t block, CacheEntryTable::Entry e, bool write, pid_t tid);
  // Lazy sizing, on a miss of `block` whose entry read `pk` before locking: counts a
  // re-miss (and lets the cache grow) and hands a sampled access to the reuse tracker.
  void NoteMiss(uint64_t block, CacheEntryTable::Entry pk);
  // Installs a parked block (entry locked) from its park buffer: a sampled hit.
  void ServeParked(uint64_t block, CacheEntryTable::Entry e, bool write, pid_t tid);
  // Installs the park buffer's content for `block` (entry locked, parked) and returns the
  // entry's new value; 0 and the errno in *err when UFFDIO_COPY failed.
  uint64_t InstallParked(uint64_t block, CacheEntryTable::Entry e, bool write, int* err);
  // Gives back the stash of `block` if it is stashed (an abandoned trigger); ~0: nothing.
  void DropStash(uint64_t block);
  char* StashBuffer(uint32_t i) const;
  // Installs blocks [first, first+count) from buf: one UFFDIO_COPY per stretch of equal
  // protection. Entries are locked by the caller; returns 0 or the errno.
  int Install(uint64_t first, uint32_t count, const char* buf, const uint64_t* entries);
  absl::Status WaitForShadows(uint64_t first, uint64_t end);
  // One capture + write-back pass over [first, end) (all of umsync's range for the atomic
  // policy). `last`: the final pass of this umsync, which always fdatasyncs.
  absl::Status SyncChunk(uint64_t first, uint64_t end, bool last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  // The dirty blocks a umsync pass took out of the cache: their images, back to back.
  struct Captured {
    uint64_t block;
    size_t offset;  // into buf
    size_t len;
  };
  // The images a umsync captured. One per mapping, reused by its umsyncs (sync_mu_): a
  // buffer allocated and freed per umsync by whichever thread syncs ends up kept in that
  // thread's malloc arena, and a mapping synced by many threads then holds one such buffer
  // per thread (16 writers: ~150 MiB of freed buffers beside a 64 MiB cache).
  struct Capture {
    // Buffers up to this size are kept for the next umsync; larger ones (an atomic umsync
    // of a large dirty set) are given back when the umsync ends.
    static constexpr size_t kKeptBytes = size_t{16} << 20;
    // buf.size() is its capacity; `used` bytes hold images. Page-aligned, like the images
    // in it (whole pages but at the end of the file): written with O_DIRECT as they are.
    std::vector<char, PageAlignedAllocator<char>> buf;
    size_t used = 0;
    std::vector<Captured> blocks;
    // Room for `bytes` more image bytes, keeping what is there.
    void Reserve(size_t bytes) {
      if (used + bytes > buf.size()) buf.resize(std::max(used + bytes, 2 * buf.size()));
    }
    // Ready for the next umsync: empty, buffers kept unless they exceed kKeptBytes.
    void Reset() {
      used = 0;
      blocks.clear();
      if (buf.size() > kKeptBytes) decltype(buf)().swap(buf);
      if (blocks.capacity() * sizeof(Captured) > kKeptBytes / 64) {
        std::vector<Captured>().swap(blocks);
      }
    }
  };
  // Write-protects and copies every dirty block of [first, end), clearing their dirty bits.
  // With `next`: stops before the block that would take the capture past max_bytes (at
  // least one block is taken) and sets *next to it, or to `end` when all were taken.
  absl::Status CaptureDirty(uint64_t first, uint64_t end, Capture* cap, size_t max_bytes = SIZE_MAX,
                            uint64_t* next = nullptr);
  // The captured images, as the sink takes them (file block numbers).
  std::vector<BlockImage> ImagesOf(const Capture& cap) const;
  // The most image bytes a umsync (or StageDirty) captures at a time: umsync_chunk_bytes,
  // at least one block.
  size_t ChunkBytes() const;
  // Stages the captured images in the sink (WriteBack::Evicted): the blocks become clean and
  // held by the sink, and `cap` is emptied; on failure they are dirty again.
  absl::Status StageCaptured(Capture& cap);
  // An atomic umsync of [first, end): one transaction, captured chunk_bytes at a time; every
  // full chunk is staged in the journal (WriteBack::Evicted), and the last is committed
  // with every staged block of the range (WriteBack::Sync).
  absl::Status SyncStaging(uint64_t first, uint64_t end, size_t chunk_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  // Clears the captured blocks' kSyncing mark, adding `add` (kStaged or 0).
  void ReleaseCaptured(const Capture& cap, uint64_t add);
  // After the sink's answer: counts and clears "held by the sink" (OK), marks the blocks
  // held by the sink (kept), or makes them dirty again (nothing kept).
  void SettleCapture(const Capture& cap, uint64_t first, uint64_t end, const WriteBackResult& r);

  MappingHost* const rt_;  // the owner, through the view a mapping needs
  char* const base_;
  const size_t length_;
  const size_t region_length_;
  const size_t block_size_;
  const uint64_t file_offset_;
  // Pages past it raise SIGBUS; moves when the process resizes the file (FileChanged).
  std::atomic<uint64_t> file_size_;
  const bool writable_;
  const int region_prot_;
  const bool signal_mode_;  // faults resolved in the faulting thread (fault_signal.h)
  const uint32_t slot_;
  const std::unique_ptr<File> file_;
  CacheEntryTable table_;
  std::unique_ptr<WriteBack> write_back_;
  std::unique_ptr<Coherence> coherence_;
  std::vector<uint64_t> protection_boundaries_;  // sorted; set before the first fault
  bool StartsSegment(uint64_t block) const {
    return !protection_boundaries_.empty() &&
           std::binary_search(protection_boundaries_.begin(), protection_boundaries_.end(), block);
  }

  std::atomic<bool> handing_off_{false};
  std::atomic<uint64_t> last_own_write_us_{0};
  std::atomic<int> own_writes_{0};  // write-backs running now (OwnWrite)
  std::atomic<bool> foreign_refused_{false};
  absl::Mutex foreign_mu_;
  absl::Status foreign_status_ ABSL_GUARDED_BY(foreign_mu_);
  absl::Mutex sync_mu_;  // one umsync per mapping at a time
  // Group commit (Sync): tickets taken on entry; the last successful umsync's range and the
  // ticket count when it started.
  std::atomic<uint64_t> sync_tickets_{0};
  uint64_t covered_ticket_ ABSL_GUARDED_BY(sync_mu_) = 0;
  uint64_t covered_first_ ABSL_GUARDED_BY(sync_mu_) = 0;
  uint64_t covered_end_ ABSL_GUARDED_BY(sync_mu_) = 0;
  Capture capture_ ABSL_GUARDED_BY(sync_mu_);
  // Blocks of the umsync in progress: not evicted until it is done, so that a block whose
  // captured image is on its way to the file is never re-read from the file meanwhile.
  std::atomic<uint64_t> sync_first_{0};
  std::atomic<uint64_t> sync_end_{0};
  std::atomic<uint64_t> shadows_pending_{0};

  // I/O: the file queue, the O_DIRECT reader (null when buffered), per-mapping figures.
  io::IoManager* io_ = nullptr;
  io::IoQueue* ioq_ = nullptr;
  std::unique_ptr<File> direct_;
  std::atomic<bool> use_direct_{false};
  std::atomic<uint64_t> bytes_read_{0}, fills_{0}, prefetched_{0};
  // Stats (each changed where the block's entry changes, under its lock).
  std::atomic<uint64_t> faults_{0}, misses_{0}, first_writes_{0}, umsyncs_{0};
  std::atomic<uint64_t> sync_started_us_{0};
  std::atomic<int64_t> resident_{0}, dirty_{0};
  // Stream detector: up to kStreams streams, each the block its next miss is expected at and
  // how long it has run. Relaxed and racy on purpose: a lost update only costs a read-ahead.
  // A new stream replaces the slots round robin, so more concurrent scans than slots lose
  // every stream (8 slots: 16 threads scanning one file read 29 KiB a read instead of
  // 410 KiB). FindStream looks at every slot on a miss: 32 slots cost no measurable time
  // beside the miss's read.
  static constexpr int kStreams = 32;
  struct Stream {
    std::atomic<uint64_t> next{~0ull};
    std::atomic<uint32_t> length{0};
    std::atomic<uint64_t> ahead{0};        // read-ahead queued up to here (exclusive)
    std::atomic<uint64_t> trigger{~0ull};  // its read-ahead trigger block (~0: none)
    std::atomic<bool> probe{false};        // started by a probe miss (below), not yet judged
  };
  Stream streams_[kStreams];
  Stream* FindStream(uint64_t block) const;
  // Starts a stream at `block` (its next miss expected at block + 1) in the next slot, round
  // robin; judges the probe it replaces, if any.
  Stream* StartStream(uint64_t block);
  // Read-around. Where random misses mostly start runs (the next miss at the following
  // block: reads with locality), a random miss reads the run it likely starts with it, as
  // a stream's second miss does (FillInlineRun), saving that miss: on a network file system
  // a read of 36 KiB costs about what one of 4 KiB does. Whether they do is measured on
  // probes: one random miss in kProbeEvery reads only its block and starts a stream marked
  // `probe`; the stream's second miss scores 1, its slot's reuse without one scores 0, into
  // an average (run_score_, of kScoreOne) that turns read-around on at kReadAroundScore.
  // Probes never read around, so the score measures the access pattern, not read-around.
  static constexpr uint32_t kProbeEvery = 8;
  static constexpr uint32_t kScoreOne = 1024;
  static constexpr uint32_t kReadAroundScore = kScoreOne / 2;
  std::atomic<uint32_t> random_misses_{0};
  std::atomic<uint32_t> run_score_{0};
  void ScoreProbe(bool started_a_run);
  // A stream's second miss (its length went from 0 to 1).
  void NoteStreamStarted(Stream* s) {
    if (s->probe.exchange(false, std::memory_order_relaxed)) ScoreProbe(true);
  }
  // Read-ahead trigger buffers: at most kStashes triggers of this mapping wait at a time,
  // one for each stream slot. Mapped at map time, realized only when used.
  static constexpr uint32_t kStashes = kStreams;
  char* stash_arena_ = nullptr;
  IndexStack stash_free_;
  std::atomic<uint32_t> stream_victim_{0};
  // Lazy sizing.
  std::unique_ptr<ReuseTracker> tracker_;
  std::atomic<uint64_t> remisses_{0}, sampled_hits_{0};
  std::atomic<uint32_t> quota_{0xffffffffu};
  std::atomic<uint32_t> virtual_blocks_{0}, working_set_blocks_{0};
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_FAULT_MAPPING_H_
