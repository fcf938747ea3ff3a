// Coherence: what one mapping does about other writers of its file (docs/consistency.md).
//
// Umap caches each mapping on its own and writes dirty blocks back only at umsync or
// eviction, whole blocks at a time: two writers of one block (two mappings, two processes,
// two nodes) overwrite each other's images, and a reader's cached block does not change when
// another writer writes it. So the modes are:
//   read-only          the mapping has no PROT_WRITE and no write-back sink: a store raises
//                      SIGSEGV with the reason logged (WriteRefusals);
//   partitioned-write  the mapping declares the byte ranges it writes; they are rounded out
//                      to whole blocks and write-locked with open-file-description locks
//                      (base/ofd_lock.h) before anything is read or replayed, so a second
//                      writer of an overlapping block, in this process, another one, or on
//                      another node of a file system whose locks are cluster-wide, fails
//                      with EBUSY naming the holder where it can be known; the rest of the
//                      mapping is read-only (SIGSEGV, logged); every write-back first checks
//                      that the locks still stand (CheckHeld), so a writer whose file
//                      system dropped them (a node cut off from the volume) writes nothing;
//   shared-write       no lock: nothing stops a conflicting writer (logged once per process).
// Every mode warns, when the mapping is made, if another description holds a write lock on
// part of the mapped range: what the mapping reads there may be stale.
//
// Lifetime: one per mapping, made by Establish before the mapping's file is read, destroyed
// with the mapping after its last write-back (destruction drops the locks).
#ifndef UMAP_RUNTIME_WRITEBACK_COHERENCE_H_
#define UMAP_RUNTIME_WRITEBACK_COHERENCE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/ofd_lock.h"
#include "journal/journal_fence.h"
#include "umap/umap_types.h"

namespace umap::runtime {

// What umap_ex2() asked for (umap_map_options, copied).
struct CoherenceRequest {
  umap_coherence mode = UMAP_COHERENCE_AUTO;
  std::vector<umap_range> write_ranges;  // file bytes; empty: the whole mapping
};

class Coherence {
 public:
  // Umap's locks for file bytes [a, b) stand on bytes [kLockSpace + a, kLockSpace + b): far
  // past any real file's end, so they never conflict with the locks a program takes on its
  // own files (SQLite's, LMDB's, its fcntl or OFD locks on the bytes it maps), while every
  // Umap mapping of the file, in any process or on any node, meets every other's. A lock
  // past the end of a file is allowed on every file system with byte-range locks.
  static constexpr uint64_t kLockSpace = uint64_t{1} << 62;

  // The mode a mapping gets: `asked`, else the runtime's default, else (AUTO) partitioned-
  // write of the whole mapping when PROT_WRITE was asked and read-only otherwise.
  static umap_coherence Resolve(umap_coherence asked, umap_coherence runtime_default,
                                bool prot_write);
  static const char* Name(umap_coherence mode);

  // The mapping covers file bytes [map_start, map_end) (block-aligned, map_end rounded up to
  // a block) of the file open on `fd`, called `file` in messages. Takes partitioned-write's
  // locks and warns about other writers. Errors (errno kept): EBUSY (a lock conflicts; the
  // message names the holder and its range), EINVAL (a write range outside the mapping,
  // empty, or partitioned-write without PROT_WRITE), the file system's errno when it has no
  // byte-range locks and partitioned-write was asked. `mode` AUTO-resolved partitioned-write
  // (auto_mode) falls back to shared-write, with a warning, on such a file system.
  static absl::StatusOr<std::unique_ptr<Coherence>> Establish(
      umap_coherence mode, bool auto_mode, int fd, const std::string& file, uint64_t map_start,
      uint64_t map_end, uint64_t block_size, const std::vector<umap_range>& write_ranges);
  ~Coherence();

  umap_coherence mode() const { return mode_; }
  // The mapping gets PROT_WRITE and a write-back sink.
  bool writable() const { return mode_ != UMAP_COHERENCE_READ_ONLY; }

  // Once the region [base, base + region_length) is reserved and registered: makes what the
  // mapping may not write read-only (all of it for read-only; for partitioned-write the
  // blocks outside its ranges) and registers those parts with WriteRefusals.
  absl::Status Protect(char* base, size_t region_length);

  // Before a write-back (umsync, eviction): OK while every lock of a partitioned-write
  // mapping still stands, tested from a second open file description (a file system may
  // drop locks, e.g. when it loses contact with this node). Once a lock was found lost the
  // mapping writes nothing more: every later call fails the same way (ENOLCK). A test that
  // passed less than kFresh ago (counted from its start) stands for the write-backs in
  // between: on a DFS the test is two round trips to the server per range (~0.5 ms on
  // GlusterFS, more than a small umsync's own write), and a write-back that follows a
  // passing test by up to a write's own duration is the window any check leaves anyway. The
  // journal fence's window, so that one figure governs both lock checks.
  static constexpr std::chrono::microseconds kFresh{journal::JournalFence::kFreshMicros};
  absl::Status CheckHeld();
  // A checkpoint: CRIU refuses to dump a process that holds file locks, so a quiesce drops
  // the partitioned-write locks (and the owner record), keeping the descriptions open; the
  // resume takes them again: EBUSY, naming the holder, when another writer took a range
  // meanwhile (the runtime is then fenced: that writer may have changed the blocks).
  void ReleaseForCheckpoint();
  absl::Status RelockAfterCheckpoint();
  bool checks_writes() const { return mode_ == UMAP_COHERENCE_PARTITIONED_WRITE && probe_; }

  // Mapping blocks (relative to the mapping's first) where Protect changed the protection:
  // the first block of each read-only or writable stretch after the first.
  std::vector<uint64_t> ProtectionBoundaries(size_t region_length) const;

  // Test-only: releases every lock, as a file system that lost contact with this node does.
  void TEST_DropLocks() {
    if (locks_ != nullptr) locks_->Unlock(0, 0).IgnoreError();
  }

  // File byte ranges (block-aligned) this mapping may write.
  const std::vector<umap_range>& locked() const { return locked_; }

 private:
  Coherence(umap_coherence mode, std::string file, uint64_t map_start, uint64_t map_end,
            uint64_t block_size)
      : mode_(mode),
        file_(std::move(file)),
        map_start_(map_start),
        map_end_(map_end),
        block_size_(block_size) {}
  absl::Status TakeLocks(int fd);
  absl::Status LockHeldRanges();  // on locks_, each of locked_; on a conflict none stays
  // A message naming who holds `c`: the file system's pid, else the owner records (read
  // through `file`) that overlap it, else that nothing names the holder.
  std::string Holder(OfdLockFile& file, const LockConflict& c) const;
  void WarnIfOthersWrite(int fd);
  absl::Status ProtectRange(char* base, uint64_t from, uint64_t to);

  umap_coherence mode_;  // set by Establish
  const std::string file_;
  const uint64_t map_start_, map_end_, block_size_;
  std::vector<umap_range> locked_;         // sorted, disjoint, block-aligned
  std::unique_ptr<OfdLockFile> locks_;     // holds the write locks
  std::unique_ptr<OfdLockFile> probe_;     // a second description: tests that they stand
  std::string record_id_;                  // our owner record on the file ("" if none)
  std::vector<int> refusals_;              // WriteRefusals handles
  absl::Mutex check_mu_;                   // one CheckHeld at a time (umsync, write-back)
  absl::Status lost_status_ ABSL_GUARDED_BY(check_mu_);  // OK until a lock was found lost
  // When the last passing test started (steady clock: a step of the wall clock must not
  // stretch the window).
  std::optional<std::chrono::steady_clock::time_point> last_held_ ABSL_GUARDED_BY(check_mu_);
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_WRITEBACK_COHERENCE_H_
