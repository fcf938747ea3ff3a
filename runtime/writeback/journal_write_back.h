// Write-back through the write-ahead journal (the protocol: docs/durability.md).
//
// JournalHandle (journal_handle.h) owns the Journal and reopens it after a write error.
// A commit that failed is indeterminate: the reopen may find it committed after all (its
// WriteBatch reached the WAL, only the fsync failed). Each sink then adopts its own such
// survivors before its next commit or read of an evicted block, and applies them in LSN
// order like any other transaction: in the atomic policy the survivor also deleted the
// staged records it took, so without it those blocks would exist only in the journal.
//
// JournalWriteBack is a mapping's sink:
//   atomic policy   Evicted() stages the image in the journal (uncommitted); Sync() commits
//                   the captured images plus the mapping's staged images of the range in one
//                   transaction, applies it to the file, fdatasyncs, marks it applied. The
//                   file only ever receives committed transactions.
//   relaxed policy  Evicted() commits the images (a batch of evictions) as one transaction
//                   and applies it (no fdatasync: the journal makes it durable; it is marked
//                   applied after the next file sync). Sync() commits the captured images, applies, syncs.
//   defer_file_sync Sync() and a relaxed Evicted() (either policy, data journal) return once
//                   the transaction is committed (`applied` false). The sink's applier thread
//                   writes committed transactions to the file a batch at a time (each
//                   block's newest image of the batch), and fdatasyncs after 1 MiB or 50 ms
//                   without a commit; the
//                   journal keeps each transaction until that fdatasync returned. Committed
//                   bytes not yet written are bounded (kMaxBacklogBytes): beyond it a commit
//                   waits for the applier. While the file fails (the applier's last round
//                   did), a commit waits for the next round and returns its error (the
//                   transaction kept), so the file lags acknowledged umsyncs only by those
//                   acknowledged before the failure showed. Drain (uunmap, runtime
//                   destruction, a checkpoint) writes and syncs everything in the caller.
// Committed images that are not yet applied stay readable through ReadEvicted, so that a
// miss never reads a file block older than its committed version.
#ifndef UMAP_RUNTIME_WRITEBACK_JOURNAL_WRITE_BACK_H_
#define UMAP_RUNTIME_WRITEBACK_JOURNAL_WRITE_BACK_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "journal/journal.h"
#include "runtime/writeback/journal_handle.h"
#include "runtime/writeback/write_back.h"
#include "umap/env.h"

namespace umap::runtime {



class JournalWriteBack final : public WriteBack {
 public:
  // Registers the file in the journal (durable) and returns its sink.
  static absl::StatusOr<std::unique_ptr<JournalWriteBack>> Create(JournalHandle* journal,
                                                                  File* file,
                                                                  uint32_t block_size,
                                                                  journal::Policy policy,
                                                                  journal::Contents contents,
                                                                  bool defer_file_sync = false);

  WriteBackResult Evicted(absl::Span<const BlockImage> images) override;
  bool keeps_evicted() const override { return policy_ == journal::Policy::kAtomic; }
  absl::StatusOr<bool> ReadEvicted(uint64_t block, absl::Span<char> dst) override;
  WriteBackResult Sync(absl::Span<const BlockImage> images, uint64_t first, uint64_t end) override;
  // Forgets the mapping in the journal (after its last successful Sync).
  absl::Status Close() override;
  absl::Status Drain() override;
  absl::Status Settle() override;
  void StopBackground() override;

  uint64_t mapping_id() const { return mapping_id_; }
  ~JournalWriteBack() override;
  // defer_file_sync: checked before each round of the applier (a partitioned-write
  // mapping's locks, GuardedWriteBack); a failure is the round's error. Set before the first
  // commit; must stay callable until this sink is destroyed.
  void set_apply_guard(absl::AnyInvocable<absl::Status()> guard) {
    apply_guard_ = std::move(guard);
  }

  // Committed bytes the applier may have outstanding (not yet written to the file).
  static constexpr uint64_t kMaxBacklogBytes = 2ull << 20;

 private:
  JournalWriteBack(JournalHandle* journal, File* file, uint32_t block_size,
                   journal::Policy policy, uint64_t mapping_id, bool defer_file_sync);
  // Journal writes of this sink (commits, stages, marks) since the last Settle.
  std::atomic<uint64_t> unsettled_{0};

  // Commits images (+ staged blocks in [first, end)), then applies to the file (with
  // defer_file_sync: hands the transaction to the applier).
  WriteBackResult CommitAndApply(absl::Span<const BlockImage> images, uint64_t first,
                              uint64_t end, bool sync_file);
  // defer_file_sync: after a commit, waits while the backlog is over kMaxBacklogBytes, and
  // while the file fails returns the error of the applier's next round.
  WriteBackResult AwaitBacklog() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // The applier thread's loop, and one round of it: takes every unapplied transaction,
  // writes them without holding apply_mu_ (ReadEvicted and commits go on), and fdatasyncs
  // once 1 MiB is unsynced; when idle for kIdleSyncDelay it fdatasyncs the rest.
  void ApplierLoop();
  // Starts the applier thread (defer_file_sync) unless it runs: with the first commit, and
  // the first after StopBackground.
  void StartApplier() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  absl::Status ApplyBatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // The applier writes with plain pwrite(2), one merged run after the other, instead of
  // through the I/O manager's io_uring writer, on a file whose client writes behind (a FUSE
  // file: the runtime bounds its unsynced writes). io_uring cannot write a FUSE file
  // without blocking, so each write goes to an io-wq worker, and FUSE runs a file's
  // buffered writes one at a time anyway. Measured on GlusterFS (docs/performance.md):
  // plain pwrite(2) costs a third of the CPU per 4 KiB write (35 against 95 us of system
  // time, 2 against 4.6 context switches) at the same rate.
  bool ApplierWritesOneAtATime() const { return defer_file_sync_ && bounds_unsynced_writes(); }
  // Before a round: lets commits gather for up to kGatherDelay, or until kGatherBytes are
  // unapplied, so that a block a stream of umsyncs rewrites is written once per round
  // (ApplyBatch writes each block's newest image of the batch), as the page cache absorbed
  // the older versions of buffered writes. The file lags by that much more; commits never
  // wait for it (kGatherBytes < kMaxBacklogBytes).
  // Commits do not wake a gathering applier (each wake is a futex call, two context
  // switches and, on a VM, a TLB shootdown for the syncing thread's next write-protect)
  // until what they add reaches kGatherBytes; it takes them at its deadline.
  void GatherCommits() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // After a commit of `committed_bytes` (defer_file_sync): wakes the applier unless it is
  // gathering and the gathered bytes are short of kGatherBytes. Always while the file
  // fails, so that the commit gets a fresh round.
  void WakeApplier(uint64_t committed_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  static constexpr absl::Duration kGatherDelay = absl::Milliseconds(5);
  static constexpr uint64_t kGatherBytes = 512 << 10;
  static constexpr absl::Duration kIdleSyncDelay = absl::Milliseconds(50);
  // The file's fdatasync of what was written (applied_unsynced_, moved to syncing_), then
  // the synced transactions are marked applied (batched). `release_lock` (the applier):
  // apply_mu_ is not held during the fdatasync.
  // A synchronous apply of `txn` (just committed, nothing older pending) from `given`
  // where it holds no image. Keeps it in unapplied_ (with copies) when the apply fails.
  absl::Status ApplyDirect(journal::Transaction txn, absl::Span<const journal::BlockWrite> given)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  absl::Status SyncFileAndMark(bool release_lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // Writes the images of committed transaction `t` to the file (not synced): from memory,
  // or, when the journal alone holds them (images_in_journal: a commit written in several
  // batches), read back from it a few MiB at a time, in block order.
  absl::Status WriteTransaction(const journal::Transaction& t, bool one_at_a_time);
  // Several transactions that all hold their images: writes each block once, its newest
  // image (NewestImages in the .cc), and returns true. Otherwise writes nothing and returns
  // false (they are written one transaction after the other).
  absl::StatusOr<bool> WriteNewestImages(const std::map<uint64_t, journal::Transaction>& txns,
                                         bool one_at_a_time);
  // Copies into dst the image of `block` in the newest transaction of `txns` that has one
  // (reading it from the journal when only the journal holds it); false: none has.
  absl::StatusOr<bool> CopyNewest(const std::map<uint64_t, journal::Transaction>& txns,
                                  uint64_t block, absl::Span<char> dst);
  // Payload bytes of unapplied_ and applying_ (a few dozen transactions at most).
  uint64_t Backlog() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // Applies every committed transaction not yet applied, in LSN order. With sync_file, also
  // fdatasyncs and marks them (and earlier applied-unsynced ones) applied.
  absl::Status ApplyPending(bool sync_file) ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // ApplyPending's writes: every unapplied transaction into applied_unsynced_, in LSN order.
  absl::Status WritePending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // After a failed write: what was written since the last good fdatasync is applied again
  // too (back into unapplied_). A write can fail by the fdatasync WriteImages sends to
  // bound a write-behind client (BoundUnsyncedWrites), and such a client reports earlier
  // writes' failures late: either way those pages may be gone, and a later fdatasync that
  // succeeds would not bring them back.
  void RequeueUnsynced() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // OK while this process still owns the journal (journal::Journal::CheckOwner).
  absl::Status CheckOwnerBeforeApply();
  // After a failed Commit of this mapping: takes this mapping's pending transactions newer
  // than the last one it knows (failed commits that the journal kept) into unapplied_.
  // for_read: through JournalHandle::Read, and only once the journal instance in which the
  // commit failed was replaced (that instance never shows the failed batch, and still
  // shows the staged images it would have taken).
  absl::Status AdoptSurvivors(bool for_read) ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);

  JournalHandle* const journal_;
  File* const file_;
  const uint32_t block_size_;
  const journal::Policy policy_;
  const uint64_t mapping_id_;
  // Sync returns at the commit and the applier writes and syncs the file (RuntimeOptions::
  // defer_file_sync; data journal only: the journal's images are what makes the transaction
  // durable meanwhile).
  const bool defer_file_sync_;

  // Serialises commit+apply of this mapping, so each block's versions reach the file in LSN
  // order and a miss sees either the staged record or the committed image.
  absl::Mutex apply_mu_;
  // Committed, not yet applied (or apply failed): LSN -> transaction with images.
  std::map<uint64_t, journal::Transaction> unapplied_ ABSL_GUARDED_BY(apply_mu_);
  // defer_file_sync: the batch the applier is writing, outside apply_mu_ (read-only there;
  // ReadEvicted reads it under the lock). Older than everything in unapplied_.
  std::map<uint64_t, journal::Transaction> applying_ ABSL_GUARDED_BY(apply_mu_);
  // The fdatasync in progress covers these (written, unsynced); ReadEvicted reads
  // them too, since a failed fdatasync may have dropped their pages.
  std::map<uint64_t, journal::Transaction> syncing_ ABSL_GUARDED_BY(apply_mu_);
  // True while the applier writes or syncs without the lock: nobody else writes the file.
  bool applier_busy_ ABSL_GUARDED_BY(apply_mu_) = false;
  bool stop_ ABSL_GUARDED_BY(apply_mu_) = false;
  // The applier's last failure (OK after a good round): commits over the backlog return it.
  absl::Status apply_error_ ABSL_GUARDED_BY(apply_mu_);
  uint64_t apply_rounds_ ABSL_GUARDED_BY(apply_mu_) = 0;  // rounds ended, good or not
  // GatherCommits: the backlog when it began plus what commits added since (WakeApplier),
  // so that neither side recounts the backlog per commit.
  bool gathering_ ABSL_GUARDED_BY(apply_mu_) = false;
  uint64_t gathered_bytes_ ABSL_GUARDED_BY(apply_mu_) = 0;
  absl::CondVar apply_cv_;  // applier: work or stop; committers and Drain: progress
  std::thread applier_ ABSL_GUARDED_BY(apply_mu_);
  absl::AnyInvocable<absl::Status()> apply_guard_;
  // Applied to the file but not yet fdatasync'ed: marked applied after the next file sync.
  // Kept whole: if that fdatasync fails, the kernel may have dropped the written pages, so
  // they are applied again (never trust a later fsync after a failed one).
  std::map<uint64_t, journal::Transaction> applied_unsynced_ ABSL_GUARDED_BY(apply_mu_);
  uint64_t applied_unsynced_bytes_ ABSL_GUARDED_BY(apply_mu_) = 0;
  // Transactions applied and fdatasync'ed whose records are not marked applied yet. Marking
  // is a RocksDB write that queues behind other writers' WAL fsyncs; doing it once for a
  // batch keeps it off most umsyncs' path (measured: 4 threads of 4 KiB umsyncs on their own
  // files, 0.8-1.1k -> 1.8-2.8k umsyncs/s). Re-applying a marked-late transaction after a
  // crash is idempotent, so the cost is at most kMarkBatch extra replays. Marked when
  // kMarkBatch accumulate or their payload reaches kMarkBytes (bounded memtable use), and
  // at Close.
  static constexpr size_t kMarkBatch = 32;
  static constexpr uint64_t kMarkBytes = 1 << 20;
  std::vector<uint64_t> to_mark_ ABSL_GUARDED_BY(apply_mu_);
  uint64_t to_mark_bytes_ ABSL_GUARDED_BY(apply_mu_) = 0;
  absl::Status MarkAppliedBatch(bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // A transaction the file's fdatasync covered: listed for the next batch of marks.
  void NoteSynced(uint64_t lsn, const journal::Transaction& t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // The newest LSN this sink committed or adopted, and whether a Commit failed since.
  uint64_t last_lsn_ ABSL_GUARDED_BY(apply_mu_) = 0;
  bool commit_failed_ ABSL_GUARDED_BY(apply_mu_) = false;
  uint64_t failed_instance_ ABSL_GUARDED_BY(apply_mu_) = 0;  // reopens() at that failure
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_WRITEBACK_JOURNAL_WRITE_BACK_H_
