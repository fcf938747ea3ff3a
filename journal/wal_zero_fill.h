// WalZeroFillFs: the journal's write-ahead log files are written into bytes that already
// exist, so that the fdatasync ending a commit flushes data only.
//
// An fdatasync after an append that grew the file must also persist the new size: on ext4
// (and every journaling file system) that is a commit of the file system's own journal, a
// second ordered write and cache flush beside the record's. A commit is one small append
// and one fdatasync, so that doubles what the journal's commit costs (measured in
// docs/performance.md, "What a durable umsync costs"). Here each WAL file is extended with
// written zeros ahead of RocksDB's appends, a step at a time (the step's first fdatasync
// persists the new size once), and the records overwrite them.
//
// Why zeros, and why RocksDB reads them back the same: a zero byte is no record type, and
// RocksDB's log reader skips a zero header (length 0, type 0) to the end of its 32 KiB
// block without reporting it, so a log that ends in zeros recovers exactly like one that
// ends at its last record (a torn record followed by zeros is a checksum mismatch at the
// tail, which point-in-time recovery drops as it drops a truncated one). Fallocated space
// would not do: its extents are unwritten, and the first write into each converts it, a
// metadata change again. RocksDB's own answer (recycle_log_file_num) is turned off by
// RocksDB 7.8 under kPointInTimeRecovery, the mode the journal's atomicity rests on.
//
// Used only where it pays (ZeroFillPaysOn): not on FUSE or network file systems.
//
// Only the newest WAL file may end in zeros: when RocksDB creates the next one, every
// older one this process still has open is cut back to its records and synced first. So
// journal/wal_damage.h, which calls bytes that cannot be read damage once intact synced
// records follow them, still sees a clean log. A WAL file keeps its zeros when it closes
// (the next open of the journal replays it and moves the log number past it, and a fenced
// owner must not write): the journal's directory is up to one step larger than its records.
#ifndef UMAP_JOURNAL_WAL_ZERO_FILL_H_
#define UMAP_JOURNAL_WAL_ZERO_FILL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/file_system.h"

namespace umap::journal {

class ZeroFilledWal;

class WalZeroFillFs final : public rocksdb::FileSystemWrapper {
 public:
  // Bytes of zeros written ahead of the log at a time, at most (the first steps are smaller:
  // 64 KiB, then the file's size): one fdatasync per step persists a new size; the others
  // flush data only.
  static constexpr uint64_t kStep = 1 << 20;

  explicit WalZeroFillFs(const std::shared_ptr<rocksdb::FileSystem>& target)
      : FileSystemWrapper(target) {}
  const char* Name() const override { return "UmapWalZeroFillFs"; }

  // A WAL file (`NNNNNN.log`) is created zero-filled, after every older one is cut back;
  // other files pass through.
  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;

  // Called by a ZeroFilledWal when it closes or is destroyed.
  void Forget(ZeroFilledWal* wal);

 private:
  absl::Mutex mu_;
  std::vector<ZeroFilledWal*> open_ ABSL_GUARDED_BY(mu_);  // zero-filled WAL files not closed
};

// True for RocksDB's name of a WAL file (a number and ".log", any directory).
bool IsWalFileName(const std::string& fname);

// Whether writing the WAL into zeros pays on the file system of type `f_type` (statfs(2)):
// not on FUSE or network file systems (base/fs_kind.h kNetwork), where the zeros cross the
// wire too and the server's own file still grows (measured on GlusterFS: commits 10-20%
// slower with them).
bool ZeroFillPaysOnFsType(int64_t f_type);
// The same for the file system holding `dir` (true if statfs fails: the open reports it).
bool ZeroFillPaysOn(const std::string& dir);

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_WAL_ZERO_FILL_H_
