// JournalFence: one owner of a journal directory at a time, and a former owner that writes
// nothing more once another took over (docs/durability.md, "Restart on another node").
//
// A journal on a shared file system is picked up by whichever node a job restarts on. The
// node it ran on may still be alive, cut off from the file system; its file system may drop
// its locks and later reconnect it without them. Such a stale owner must not write into the
// journal (its RocksDB would append to, create, rename and delete files the new owner
// uses) nor into the journaled files (its apply of an old transaction would roll back the
// new owner's blocks).
//
// <dir>/UMAP-OWNER holds the owner record, one line of text (made for `cat`):
//   umap-journal-owner 1 epoch=E state=open|closed pid=P start=T uid=U host=H since=US crc=C
// A writable open (Acquire), before RocksDB opens the directory:
//   0. takes an exclusive flock on the journal directory itself (base/dir_lock.h), held
//      until the fence is destroyed: a live owner keeps it whatever is deleted inside the
//      directory (its UMAP-OWNER, RocksDB's LOCK), so that deleting files never hands the
//      journal to a second process on the same node (EBUSY naming the holder). A file
//      system that locks no directories goes without (logged once);
//   1. takes an open-file-description write lock on byte 0 of UMAP-OWNER, the owner lock
//      (held until Release or death: EBUSY naming the record's owner when another holds it);
//   2. reads the record; a reopen by the runtime that owns epoch E (expected_epoch) must
//      find E (every other owner's open writes a later one), else it is fenced and takes
//      nothing; it writes E with its identity of now (a process restored from a checkpoint
//      has a new start time, perhaps another host);
//   3. refuses (EBUSY) when RocksDB's LOCK is held: its owner's UMAP-OWNER was deleted and
//      the directory lock did not reach it (another node). Nothing is written before this;
//   4. otherwise writes epoch E+1 with its own identity and fdatasyncs it, before anything
//      else is written into the directory (a takeover is logged when the previous owner had
//      not closed).
// Check (before every commit, before every apply to a journaled file, and before every
// write RocksDB makes into the directory: FencedFs) fails, for good, when
//   - the owner lock no longer stands (CheckWriteLock through a second description), or
//   - the record no longer names this epoch and this process (read through O_DIRECT on a
//     shared file system, so that no client cache shows an old record), or
//   - <dir>/UMAP-OWNER no longer names the file whose lock and record those are (deleted or
//     replaced: they prove nothing about who owns the journal now).
// Release (a clean close) marks the record closed; the locks go with the descriptions.
//
// Costs: a check is one lock test, one lock request, one 4 KiB read and one stat; on a
// local disk a few microseconds, on the GlusterFS testbed about a millisecond
// (docs/performance.md). A check younger than kFresh stands for FencedFs, the commits and
// the applies: a takeover needs the file system to drop this process's lock first, which
// none does faster than its lease or ping timeout (seconds), and a deletion of UMAP-OWNER
// is found by the next check that is not. A resume from a checkpoint checks afresh.
//
// Thread safety: every method may be called from any thread.
#ifndef UMAP_JOURNAL_JOURNAL_FENCE_H_
#define UMAP_JOURNAL_JOURNAL_FENCE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/dir_lock.h"
#include "base/ofd_lock.h"

namespace umap::journal {

// The owner record (UMAP-OWNER).
struct OwnerRecord {
  uint64_t epoch = 0;
  bool open = false;  // not closed cleanly (running, or died)
  int64_t pid = 0;
  uint64_t start_ticks = 0;  // the process's start time (tells it apart from a reused pid)
  uint64_t uid = 0;
  std::string host;
  uint64_t since_us = 0;  // wall clock when the epoch began

  std::string Encode() const;
  // kDataLoss for a damaged (torn, foreign) record.
  static absl::StatusOr<OwnerRecord> Decode(const std::string& text);
  // "pid 4242 on node-a (uid 1000), epoch 7"
  std::string Describe() const;
  bool SameOwner(const OwnerRecord& o) const {
    return epoch == o.epoch && pid == o.pid && start_ticks == o.start_ticks && host == o.host;
  }
};

class JournalFence {
 public:
  static constexpr const char* kFileName = "UMAP-OWNER";
  static constexpr uint64_t kFreshMicros = 5000;  // kFresh

  // See the file comment. expected_epoch 0: a new owner (takes over from any earlier one
  // whose lock is gone). Errors: EBUSY (kUnavailable) another process holds the owner lock;
  // ESTALE (kFailedPrecondition) fenced: the directory belongs to another owner now;
  // the file system's errno when UMAP-OWNER cannot be opened, locked, read or written
  // (ENOLCK: a file system without byte-range locks cannot hold a journal).
  static absl::StatusOr<std::unique_ptr<JournalFence>> Acquire(const std::string& dir,
                                                               uint64_t expected_epoch);
  // Drops the locks (the descriptions close). Does not mark the record closed: Release does.
  ~JournalFence();

  // OK while this process owns the directory; once it found otherwise, the same
  // kFailedPrecondition (errno ESTALE) for good. A read or lock error that leaves the
  // question open returns that error (errno kept) without deciding.
  absl::Status Check();
  // Check, unless one succeeded less than kFreshMicros ago.
  absl::Status CheckFresh();
  bool fenced() const { return fenced_.load(std::memory_order_acquire); }
  // Marks the record closed (a clean close: the next owner logs no takeover). Not fenced only.
  void Release();

  uint64_t epoch() const { return mine_.epoch; }
  const OwnerRecord& record() const { return mine_; }

  // Test-only: drops the owner lock (and the directory's lock) behind the fence's back, as
  // a file system that lost contact with this node does.
  void TEST_DropOwnerLock();

 private:
  JournalFence(std::string dir, std::unique_ptr<DirLock> dir_lock,
               std::unique_ptr<OfdLockFile> owner, std::unique_ptr<OfdLockFile> probe,
               OwnerRecord mine)
      : dir_(std::move(dir)),
        dir_lock_(std::move(dir_lock)),
        owner_(std::move(owner)),
        probe_(std::move(probe)),
        mine_(std::move(mine)) {}
  absl::Status Fence(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const std::unique_ptr<DirLock> dir_lock_;   // the directory's own lock; null where unsupported
  const std::unique_ptr<OfdLockFile> owner_;  // holds the owner lock; reads the record
  const std::unique_ptr<OfdLockFile> probe_;  // a second description: tests the lock
  const OwnerRecord mine_;

  absl::Mutex mu_;  // one Check at a time
  absl::Status fenced_status_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> fenced_{false};
  std::atomic<uint64_t> last_ok_us_{0};  // CLOCK_MONOTONIC µs of the last successful Check
};

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_JOURNAL_FENCE_H_
