// WriteBack: the one seam through which dirty blocks leave the cache.
//
// The runtime captures block images (eviction: into a shadow buffer; umsync: into a sync
// batch) and hands them here. DirectWriteBack writes them straight to the backing File (no
// crash protection beyond mmap's); the journal's sinks (journal/) put the write-ahead
// journal in exactly this path. Images of one block reach a WriteBack in capture order and
// never two at once (the runtime guarantees it with its entry locks).
#ifndef UMAP_RUNTIME_WRITEBACK_WRITE_BACK_H_
#define UMAP_RUNTIME_WRITEBACK_WRITE_BACK_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/direct_writer.h"
#include "umap/env.h"

namespace umap::runtime {

namespace io {
class IoManager;
}

struct BlockImage {
  uint64_t block;
  absl::Span<const char> data;  // block bytes, clipped at end of file
};

// What became of images handed to a sink.
struct WriteBackResult {
  absl::Status status;
  // With an error: the images were committed to the journal and only their apply to the
  // file failed. The sink keeps them — ReadEvicted serves them, and the next Sync applies
  // them first, in LSN order — so the caller must not hand them in again (a retry would
  // journal them a second time). False: nothing of them is kept.
  bool kept = false;
  // With OK: false when the sink committed the images to the journal (durable) but writes
  // them to the file later, in the background (JournalWriteBack with defer_file_sync). Until
  // then ReadEvicted serves them, so the caller marks the blocks as held by the sink.
  bool applied = true;
  bool ok() const { return status.ok(); }
};

class WriteBack {
 public:
  virtual ~WriteBack() = default;

  // Evicted dirty blocks of this mapping (called from a background write-back thread, one
  // image per block, ascending block order). When it returns OK every image is safe in the
  // sense of the policy: written to the file (relaxed; or committed, `applied` false, and
  // served by ReadEvicted until the sink wrote it), or staged in the journal (atomic, then
  // keeps_evicted() is true and ReadEvicted serves it). On error none counts as safe
  // unless `kept` (WriteBackResult).
  virtual WriteBackResult Evicted(absl::Span<const BlockImage> images) = 0;

  // True when evicted images stay with this sink until a sync (atomic policy): a later miss
  // on such a block must read it through ReadEvicted, not from the file.
  virtual bool keeps_evicted() const { return false; }
  // Fills dst with the evicted image of `block`; false when the sink holds none.
  virtual absl::StatusOr<bool> ReadEvicted(uint64_t /*block*/, absl::Span<char> /*dst*/) {
    return false;
  }

  // umsync: makes `images` (captured from the cache, ascending block order) and every
  // evicted image the sink keeps for blocks in [first, end) durable: in the file, written and
  // fdatasync'ed; or, with `applied` false, committed to the journal and written to the file
  // later by the sink. On error nothing is lost:
  // with `kept` the sink holds the images (the caller marks the blocks as held by the sink);
  // otherwise the caller keeps the captured blocks dirty; kept images stay kept.
  virtual WriteBackResult Sync(absl::Span<const BlockImage> images, uint64_t first,
                               uint64_t end) = 0;

  // The mapping goes away after its last successful Sync (journal: forget the mapping).
  virtual absl::Status Close() { return absl::OkStatus(); }
  // A checkpoint, after the final write-back: leaves no transaction of this sink pending in
  // the journal (committed images applied, synced and marked, not only batched). Staged
  // images (atomic policy) stay. On error nothing is lost.
  virtual absl::Status Drain() { return absl::OkStatus(); }
  // Before the program writes the file itself (the LD_PRELOAD shim's write(2), ftruncate):
  // as Drain, and what it marked is durable too, so that no recovery can ever write an
  // older image over the program's bytes. Cheap when nothing was written since the last.
  virtual absl::Status Settle() { return Drain(); }

  // A checkpoint, after Drain, when nothing may run: stops the sink's background writer
  // (nothing is left for it), so that no umap thread is dumped. Its next commit starts it
  // again.
  virtual void StopBackground() {}

  // The I/O manager that carries this sink's writes to the file (merged, and concurrent
  // with io_uring). Set once by the runtime before the first write; without one, writes
  // are issued one merged run at a time.
  virtual void set_io(io::IoManager* io) { io_ = io; }
  // Writes whole-page images through an O_DIRECT description of `file` (DirectWriter),
  // where its file system has one: no copy into the page cache, none of it charged to the
  // process's memory cgroup, and no exclusive inode lock stalling the mapping's own O_DIRECT
  // reads. Only for writes issued through the I/O manager. Set once, before the first write.
  virtual void UseDirectWrites(File* file) { direct_ = std::make_unique<DirectWriter>(file); }
  // The file's client acknowledges writes before they reach storage and holds at most
  // `bytes` of them per file (GlusterFS's write-behind window, kFuseWriteBehindBytes): from
  // then on this sink never has more than that written and not fdatasync'ed (WriteImages
  // fdatasyncs between writes when the next one would pass it), and after a failed write
  // or fdatasync it writes again only once an fdatasync succeeded. Such a client keeps
  // acknowledged writes that failed (a full brick) in its window, retries them only when
  // an fdatasync comes, and holds every later write behind them: a write that finds the
  // window full waits for good, since the fdatasync that would drain it can only follow
  // that write. Set once, before the first write; 0: no bound.
  void BoundUnsyncedWrites(uint64_t bytes) { unsynced_bound_ = bytes; }
  bool bounds_unsynced_writes() const { return unsynced_bound_ != 0; }
  // The smallest write-behind window GlusterFS's client accepts (its default is 1 MiB).
  static constexpr uint64_t kFuseWriteBehindBytes = 512 << 10;

 protected:
  // Writes `images` (ascending blocks, each at most once) to `file`: adjacent blocks merge
  // into one write. `before_each` runs before each write is issued (crash points).
  // `one_at_a_time`: each merged write is a plain File::WriteAt in this thread, even with an
  // I/O manager (no deadline: a hung write holds the caller until it returns).
  absl::Status WriteImages(File* file, uint64_t block_size, absl::Span<const BlockImage> images,
                           absl::FunctionRef<void()> before_each, bool one_at_a_time = false);
  // fdatasync of the file the sink writes: every call of File::Sync goes through it, so
  // that the unsynced bytes BoundUnsyncedWrites bounds start again from zero.
  absl::Status SyncFile(File* file);

 private:
  // Returns s, remembering a failure (file_failed_).
  absl::Status NoteWrite(absl::Status s);
  // WriteImages' writes, without the bound.
  absl::Status WritePieces(File* file, absl::Span<const WritePiece> pieces,
                           absl::FunctionRef<void()> before_each, bool one_at_a_time);
  io::IoManager* io_ = nullptr;
  std::unique_ptr<DirectWriter> direct_;
  uint64_t unsynced_bound_ = 0;
  std::atomic<uint64_t> unsynced_bytes_{0};  // written since the last SyncFile (bounded only)
  std::atomic<bool> file_failed_{false};     // a write or SyncFile failed, no SyncFile since
};

// Writes images straight to the file, merging runs of adjacent blocks into one write.
class DirectWriteBack final : public WriteBack {
 public:
  DirectWriteBack(File* file, uint64_t block_size) : file_(file), block_size_(block_size) {}
  WriteBackResult Evicted(absl::Span<const BlockImage> images) override;
  WriteBackResult Sync(absl::Span<const BlockImage> images, uint64_t first, uint64_t end) override;

 private:
  File* const file_;
  const uint64_t block_size_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_WRITEBACK_WRITE_BACK_H_
