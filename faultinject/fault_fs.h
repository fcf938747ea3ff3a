// FaultFs: a rocksdb::FileSystem wrapper that breaks the journal's storage on purpose.
//
// Debian's RocksDB 7.8.3 ships FileSystemWrapper but not rocksdb's own FaultInjectionTestFS,
// so this is ours. It reaches a DB as
//
//   auto fs = std::make_shared<FaultFs>(rocksdb::FileSystem::Default());
//   std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
//   options.env = env.get();   // env and fs must outlive the DB
//
// What it does:
//   - fails Append, Sync, Fsync, Close, NewWritableFile, RenameFile, a directory fsync or a
//     random-access write
//     with IOStatus::IOError or IOStatus::NoSpace: the next N calls, or 1 call in n drawn
//     from a seed; transient (the rule ends after N) or sticky (once fired, every later
//     matching call fails, like a disk that stays full); optionally only for one class of
//     RocksDB file (WAL, MANIFEST, SST, other). The rule engine is FaultEnv's
//     (faultinject/fault_rules.h);
//   - tracks, per writable file, the bytes appended and the size at its last successful
//     Sync/Fsync, and, per directory, the files created (or renamed into it) since the
//     directory's last fsync (NewDirectory(dir)->Fsync);
//   - SimulatePowerCut() freezes it (waiting for writes already in flight, so that none
//     lands after it returns): every later open, write, sync, rename, delete and
//     directory call fails with IOError (files already open for reading are not wrapped
//     and keep reading). DropUnsyncedData() then truncates every file to its last synced
//     size (or tears it at a random sector boundary of the unsynced tail, optionally with
//     one garbled sector), zeroes the ranges a LosesData sync failed to write, and
//     deletes the files created since their directory's last fsync (a file renamed over
//     an existing one gets the old content back). Restart() thaws it, as after a reboot;
//   - a failed Sync/Fsync leaves the tail unsynced (a later successful Sync makes it
//     durable), unless its fault has LosesData: then that tail is lost to a power cut
//     even if later syncs succeed (the lost-page fsync semantics of FaultEnv, as Linux
//     behaves after a writeback error);
//   - SkipSyncs(true): syncs return OK without reaching the disk and make nothing durable
//     (a disk whose write cache acknowledges flushes); tests that never cut power use it
//     for speed.
//
// RocksDB's Status cannot carry a payload, so injected errors are recognised by the
// counters (fired(), counters()), not by their text. Injected errors have no retryable or
// data-loss flags unless FsFault says so.
//
//   - fails writes through a random-access read/write file (kWrite: the zeros the journal
//     writes a WAL into, journal/wal_zero_fill.h) as it fails appends; they are
//     refused after the power cut. Those beyond a writable file's appended bytes extend it:
//     a Sync of that file makes the extension durable, and DropUnsyncedData then keeps it,
//     zeroing the unsynced appended bytes under it instead of cutting them off (a file
//     system that persisted the size with the earlier sync, but not the later data).
//
// Not modelled: unsynced deletes coming back, ReuseWritableFile (WAL recycling; forwarded
// untracked), syncs through a random-access read/write file, and reads of lost
// bytes (they stay readable until the power cut, as from a page cache that kept them).
//
// Thread safety: all methods may be called concurrently (RocksDB calls from its
// background threads). The base FileSystem must outlive this one. Tests only.
#ifndef UMAP_FAULTINJECT_FAULT_FS_H_
#define UMAP_FAULTINJECT_FAULT_FS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "faultinject/fault_rules.h"
#include "rocksdb/file_system.h"
#include "rocksdb/io_status.h"

namespace umap::faultinject {

// Operations FaultFs can fail.
enum class FsOp {
  kNewWritableFile,  // also ReopenWritableFile
  kAppend,           // Append and PositionedAppend
  kSync,             // FSWritableFile::Sync (fdatasync; RocksDB's WAL sync unless use_fsync)
  kFsync,            // FSWritableFile::Fsync
  kClose,            // FSWritableFile::Close
  kRenameFile,
  kDirFsync,         // FSDirectory::Fsync / FsyncWithDirOptions
  kWrite,            // FSRandomRWFile::Write (the zeros a WAL is written into)
};
inline constexpr int kNumFsOps = 8;
absl::string_view FsOpName(FsOp op);

// RocksDB file classes, by file name.
enum class FileClass {
  kAny,
  kWal,       // NNNNNN.log
  kManifest,  // MANIFEST-NNNNNN
  kTable,     // NNNNNN.sst
  kOther,     // CURRENT, IDENTITY, OPTIONS-*, *.dbtmp, ...
};
FileClass ClassifyFile(absl::string_view path);

struct FsFault {
  enum class Error { kIOError, kNoSpace };

  static FsFault IOError() { return FsFault(); }
  static FsFault NoSpace() {
    FsFault f;
    f.error = Error::kNoSpace;
    return f;
  }
  FsFault Sticky() && {
    sticky = true;
    return std::move(*this);
  }
  FsFault Retryable() && {
    retryable = true;
    return std::move(*this);
  }
  FsFault OnlyFor(FileClass c) && {
    file_class = c;
    return std::move(*this);
  }
  // kSync / kFsync: the failed sync "marked the pages clean" (Linux after a writeback
  // error): the bytes it should have made durable stay readable until a power cut, but no
  // later sync writes them; DropUnsyncedData zeroes them even under later synced bytes.
  FsFault LosesData() && {
    loses_data = true;
    return std::move(*this);
  }
  // The path filter (FaultRules).
  bool Matches(absl::string_view path) const {
    return file_class == FileClass::kAny || ClassifyFile(path) == file_class;
  }

  Error error = Error::kIOError;
  FileClass file_class = FileClass::kAny;  // calls on other files neither fail nor count
  bool sticky = false;     // once fired, fail every later matching call until Clear
  bool retryable = false;  // IOStatus::SetRetryable(true)
  bool loses_data = false;
};

// What DropUnsyncedData keeps of each file's unsynced tail.
struct FsDropOptions {
  static FsDropOptions DropAll() { return FsDropOptions(); }
  static FsDropOptions Tear(uint64_t seed, bool garble = false) {
    FsDropOptions o;
    o.tear = true;
    o.seed = seed;
    o.garble = garble;
    return o;
  }

  bool tear = false;           // false: truncate to the synced size
  uint64_t seed = 1;           // tear: the cut, a multiple of sector_size in the tail
  bool garble = false;         // tear: the sector after the cut holds random bytes
  uint64_t sector_size = 512;
  bool delete_unsynced_files = true;  // files no directory fsync covered
};

struct FsCounters {
  std::array<uint64_t, kNumFsOps> fired{};  // injected failures per FsOp
  uint64_t refused_after_power_cut = 0;
  uint64_t files_truncated = 0;   // by DropUnsyncedData
  uint64_t bytes_dropped = 0;     // unsynced bytes cut off (garbled bytes count as dropped)
  uint64_t files_deleted = 0;     // created since their directory's last fsync
  uint64_t files_restored = 0;    // renamed over, given their old content back
  uint64_t bytes_lost_by_syncs = 0;  // marked lost by LosesData syncs
  uint64_t bytes_zeroed = 0;      // of those, zeroed by DropUnsyncedData
};

class FaultFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FaultFs(const std::shared_ptr<rocksdb::FileSystem>& base);
  ~FaultFs() override;
  const char* Name() const override { return "UmapFaultFs"; }

  // --- Arming (faultinject/fault_rules.h). Each op has at most one rule; arming replaces
  // it. Errors: kInvalidArgument for count < 1 / n < 1.
  absl::Status FailNext(FsOp op, int count, FsFault fault) {
    return rules_.FailNext(op, count, std::move(fault));
  }
  absl::Status FailOneIn(FsOp op, uint32_t n, uint64_t seed, FsFault fault) {
    return rules_.FailOneIn(op, n, seed, std::move(fault));
  }
  void Clear(FsOp op) { rules_.Clear(op); }
  void ClearAll() { rules_.ClearAll(); }
  // Sync, Fsync, RangeSync and directory fsyncs that no rule fails return OK without
  // reaching the base FileSystem; what they "synced" stays unsynced for DropUnsyncedData.
  void SkipSyncs(bool skip) { skip_syncs_.store(skip); }

  // --- Power cut. ---
  void SimulatePowerCut();
  bool frozen() const;
  // REQUIRES: frozen() (else kFailedPrecondition). Every file is attempted; the first
  // error of the base FileSystem is returned.
  absl::Status DropUnsyncedData(const FsDropOptions& options = FsDropOptions::DropAll());
  // Thaws; everything on disk now counts as durable.
  void Restart();

  // --- Inspection. ---
  // Bytes appended to `path` since its last successful Sync/Fsync (0 when untracked).
  uint64_t UnsyncedBytes(const std::string& path) const;
  // Files created in `dir` since its last fsync.
  std::set<std::string> UnsyncedDirEntries(const std::string& dir) const;
  uint64_t fired(FsOp op) const;
  FsCounters counters() const;

  // --- FileSystem. ---
  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname,
                                       const rocksdb::FileOptions& opts,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewSequentialFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSSequentialFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomRWFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomAccessFile(const std::string& fname,
                                        const rocksdb::FileOptions& opts,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
                                        rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& opts,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& dst,
                               const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus LinkFile(const std::string& src, const std::string& dst,
                             const rocksdb::IOOptions& opts,
                             rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& fname, const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus Truncate(const std::string& fname, size_t size,
                             const rocksdb::IOOptions& opts,
                             rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus CreateDir(const std::string& dir, const rocksdb::IOOptions& opts,
                              rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus CreateDirIfMissing(const std::string& dir, const rocksdb::IOOptions& opts,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteDir(const std::string& dir, const rocksdb::IOOptions& opts,
                              rocksdb::IODebugContext* dbg) override;

 private:
  friend class FaultWritableFile;
  friend class FaultRandomRWFile;
  friend class FaultDirectory;
  struct FileState {
    uint64_t size = 0;         // bytes appended (or the size when reopened)
    uint64_t synced_size = 0;  // size at the last successful Sync/Fsync
    uint64_t extended = 0;     // the end of random-access writes (beyond `size`: an extension)
    uint64_t synced_extended = 0;  // `extended` at the last successful Sync/Fsync
    // [begin, end) ranges a LosesData sync failed to write: never durable, whatever the
    // later syncs say.
    std::vector<std::pair<uint64_t, uint64_t>> lost;
  };

  // OK, or the injected error for this call of `op` on `path` (*loses_data: its fault
  // has LosesData).
  rocksdb::IOStatus Inject(FsOp op, const std::string& path, bool* loses_data = nullptr);
  rocksdb::IOStatus Refuse(absl::string_view what);  // frozen
  bool IsFrozen() const { return frozen_.load(); }
  bool skip_syncs() const { return skip_syncs_.load(); }

  // positioned: `n_or_end` is the end offset of the write, else the bytes appended.
  void OnAppended(const std::string& path, uint64_t n_or_end, bool positioned);
  void OnTruncated(const std::string& path, uint64_t size);
  uint64_t SizeOf(const std::string& path);
  uint64_t ExtendedOf(const std::string& path);
  void OnWritten(const std::string& path, uint64_t end);  // a random-access write
  // `size`, `extended`: what the sync covers (known when it started).
  void OnSynced(const std::string& path, uint64_t size, uint64_t extended);
  void OnSyncLostData(const std::string& path);
  // DropUnsyncedData: writes zeros over [begin, end) of `path` in the base FileSystem.
  rocksdb::IOStatus ZeroRange(const std::string& path, uint64_t begin, uint64_t end);
  // DropUnsyncedData: zeroes st's lost ranges below `keep` (the size the file keeps).
  absl::Status ZeroLost(const std::string& path, const FileState& st, uint64_t keep,
                        uint64_t* zeroed);
  void OnCreated(const std::string& path, std::optional<std::string> previous);
  void OnDirSynced(const std::string& dir);

  // FsFaults draw nothing beyond their decision, so the engine's seed is unused.
  FaultRules<FsOp, kNumFsOps, FsFault> rules_{0};
  std::array<std::atomic<uint64_t>, kNumFsOps> fired_{};
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> frozen_{false};
  std::atomic<bool> skip_syncs_{false};
  // Held shared by every call that writes through to the base FileSystem, from its frozen
  // check to its end; SimulatePowerCut takes it exclusively, so that it returns only when
  // no such call is in flight.
  mutable absl::Mutex freeze_mu_;

  mutable absl::Mutex mu_;
  std::map<std::string, FileState> files_ ABSL_GUARDED_BY(mu_);
  // dir -> (file name -> old content when the entry replaced an existing file, else nullopt)
  std::map<std::string, std::map<std::string, std::optional<std::string>>> new_entries_
      ABSL_GUARDED_BY(mu_);
  uint64_t files_truncated_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t files_deleted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t files_restored_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_lost_by_syncs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_zeroed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace umap::faultinject

#endif  // UMAP_FAULTINJECT_FAULT_FS_H_
