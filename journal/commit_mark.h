// CommitMark: the journal's record of its last acknowledged commit, kept outside the
// write-ahead log, so that a log cut short behind acknowledged commits is found
// (docs/journal_format.md §8, "A log cut short").
//
// RocksDB's point-in-time recovery keeps the readable prefix of the WAL: right for the torn
// tail a crash leaves (nothing in it was acknowledged), silent when the log lost records
// that were (a torn copy, a disk that filled during a copy, a `truncate`). Nothing inside
// the log can tell those apart, so the proof lives beside it: after a commit's synced
// write returned OK, and before Commit returns, the RocksDB sequence number of its batch
// (and its LSN) is written into <dir>/UMAP-COMMITTED and fdatasync'ed. An open that would
// recover less than that sequence number is refused (journal/integrity.h), naming the
// LSNs lost. A mark is written only after the WAL sync that covered its batch returned, so
// a crash never leaves a mark ahead of the log.
//
// The file holds two slots, 4 KiB apart, written alternately, 512 bytes at a time; each is
// one line of text with a generation and a CRC:
//   umap-commit-mark 1 gen=G sequence=S lsn=L crc=C
// The reader takes the slot with the higher generation. A new file's first slot says
// "nothing acknowledged" (generation 0, sequence 0), and slot g % 2 holds generation g; each
// line lies in one sector, which a power cut leaves old or new. So the only states a crash
// leaves are "slot 0 at generation 0, slot 1 empty" and "both intact, one generation apart":
// anything else (a slot zeroed, cut or changed) is damage (kDataLoss), never a reason to
// trust the older slot, which may lag the commits acknowledged since. The file is created before
// RocksDB creates the database, so a journal of format 2 or later without it lost it
// (journal/integrity.h); a journal of format 1 (an older build) has none until a writable open
// creates it.
//
// Concurrent commits share one write and fdatasync (Publish), as RocksDB's write groups
// share the WAL's. Thread safety: every method may be called from any thread.
#ifndef UMAP_JOURNAL_COMMIT_MARK_H_
#define UMAP_JOURNAL_COMMIT_MARK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/file_system.h"

namespace umap::journal {

class CommitMark {
 public:
  static constexpr const char* kFileName = "UMAP-COMMITTED";

  struct Mark {
    uint64_t sequence = 0;  // RocksDB sequence number of the last acknowledged commit's batch
    uint64_t lsn = 0;       // the highest LSN acknowledged
  };

  // The mark of the journal in `dir`, read through `fs`: nullopt when the file is missing;
  // sequence 0 when nothing was acknowledged yet. Errors: kDataLoss (errno EIO) when the
  // file holds no intact slot; the file system's.
  static absl::StatusOr<std::optional<Mark>> Read(rocksdb::FileSystem& fs, const std::string& dir);

  // Creates the file (nothing acknowledged) when it is missing: before RocksDB creates a
  // database in `dir`, so that a database of format 2 or later never lacks one.
  static absl::Status CreateIfMissing(rocksdb::FileSystem& fs, const std::string& dir);

  // For a writable open: opens the file, creating it (two empty slots, synced, and the
  // directory synced) when missing. With `reset`, writes that mark now, durably (a salvaged
  // journal: the mark must match what was kept, or every later open would be refused).
  static absl::StatusOr<std::unique_ptr<CommitMark>> Open(rocksdb::FileSystem& fs,
                                                          const std::string& dir,
                                                          std::optional<Mark> reset);

  // Makes a mark at least `m` durable: `m` is a commit whose synced write returned OK. A
  // caller whose mark another caller's write covers returns without writing. After a
  // failed write or sync every call fails with that error (the caller poisons the journal).
  absl::Status Publish(const Mark& m) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  CommitMark(std::string path, std::unique_ptr<rocksdb::FSRandomRWFile> file, uint64_t generation,
             Mark durable)
      : path_(std::move(path)),
        file_(std::move(file)),
        generation_(generation),
        durable_(durable) {}
  absl::Status WriteSlot(uint64_t generation, const Mark& m);

  const std::string path_;
  const std::unique_ptr<rocksdb::FSRandomRWFile> file_;

  absl::Mutex mu_;
  absl::CondVar written_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_);  // of the newest slot written
  Mark durable_ ABSL_GUARDED_BY(mu_);         // what the file holds, synced
  Mark wanted_ ABSL_GUARDED_BY(mu_);          // the highest mark asked for
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_COMMIT_MARK_H_
