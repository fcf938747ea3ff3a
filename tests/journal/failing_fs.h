// A rocksdb::FileSystem that fails the journal's WAL appends or syncs on demand. Test-local
// and deliberately tiny: the full fault file system (power cut, 1-in-n faults, tagged
// errors) is faultinject/'s FaultFs.
#ifndef UMAP_TESTS_JOURNAL_FAILING_FS_H_
#define UMAP_TESTS_JOURNAL_FAILING_FS_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "rocksdb/file_system.h"

namespace umap::journal {

class FailingFs : public rocksdb::FileSystemWrapper {
 public:
  enum class Fault {
    kNone,
    kSyncIoError,    // WAL Sync/Fsync returns IOError (EIO)
    kSyncNoSpace,    // WAL Sync/Fsync returns NoSpace (ENOSPC)
    kAppendIoError,  // WAL Append returns IOError
  };

  FailingFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FailingFs"; }

  // Injects `fault` into every matching WAL call from now on, until Arm(kNone).
  void Arm(Fault fault) { fault_.store(fault); }
  // How many calls failed by injection so far.
  int injected() const { return injected_.load(); }
  // Makes file and directory syncs return OK without syncing: for tests that never cut
  // power and only want speed (what a sync makes durable is not what they check).
  void SkipSyncs(bool skip) { skip_syncs_.store(skip); }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(fname, opts, result, dbg);
    WrapFile(fname, s, result);
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname,
                                       const rocksdb::FileOptions& opts,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->ReopenWritableFile(fname, opts, result, dbg);
    WrapFile(fname, s, result);
    return s;
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                      const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->ReuseWritableFile(fname, old_fname, opts, result, dbg);
    WrapFile(fname, s, result);
    return s;
  }
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& io_opts,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewDirectory(name, io_opts, result, dbg);
    if (s.ok()) *result = std::make_unique<Directory>(this, std::move(*result));
    return s;
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(FailingFs* fs, bool wal, std::unique_ptr<rocksdb::FSWritableFile> target)
        : FSWritableFileOwnerWrapper(std::move(target)), fs_(fs), wal_(wal) {}

    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      if (wal_ && fs_->Hit(Fault::kAppendIoError)) {
        return rocksdb::IOStatus::IOError("injected append");
      }
      return FSWritableFileOwnerWrapper::Append(data, options, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (wal_ && fs_->Hit(Fault::kAppendIoError)) {
        return rocksdb::IOStatus::IOError("injected append");
      }
      return FSWritableFileOwnerWrapper::Append(data, options, info, dbg);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = SyncFault(); !s.ok()) return s;
      if (fs_->skip_syncs_.load()) return rocksdb::IOStatus::OK();
      return FSWritableFileOwnerWrapper::Sync(options, dbg);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* dbg) override {
      if (rocksdb::IOStatus s = SyncFault(); !s.ok()) return s;
      if (fs_->skip_syncs_.load()) return rocksdb::IOStatus::OK();
      return FSWritableFileOwnerWrapper::Fsync(options, dbg);
    }
    rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t nbytes,
                                const rocksdb::IOOptions& options,
                                rocksdb::IODebugContext* dbg) override {
      if (fs_->skip_syncs_.load()) return rocksdb::IOStatus::OK();
      return FSWritableFileOwnerWrapper::RangeSync(offset, nbytes, options, dbg);
    }

   private:
    rocksdb::IOStatus SyncFault() {
      if (!wal_) return rocksdb::IOStatus::OK();
      if (fs_->Hit(Fault::kSyncIoError)) return rocksdb::IOStatus::IOError("injected sync");
      if (fs_->Hit(Fault::kSyncNoSpace)) return rocksdb::IOStatus::NoSpace("injected sync");
      return rocksdb::IOStatus::OK();
    }

    FailingFs* const fs_;
    const bool wal_;
  };

  class Directory : public rocksdb::FSDirectoryWrapper {
   public:
    Directory(FailingFs* fs, std::unique_ptr<rocksdb::FSDirectory> target)
        : FSDirectoryWrapper(std::move(target)), fs_(fs) {}
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* dbg) override {
      if (fs_->skip_syncs_.load()) return rocksdb::IOStatus::OK();
      return FSDirectoryWrapper::Fsync(options, dbg);
    }
    rocksdb::IOStatus FsyncWithDirOptions(const rocksdb::IOOptions& options,
                                          rocksdb::IODebugContext* dbg,
                                          const rocksdb::DirFsyncOptions& dir_options) override {
      if (fs_->skip_syncs_.load()) return rocksdb::IOStatus::OK();
      return FSDirectoryWrapper::FsyncWithDirOptions(options, dbg, dir_options);
    }

   private:
    FailingFs* const fs_;
  };

  void WrapFile(const std::string& fname, const rocksdb::IOStatus& s,
                std::unique_ptr<rocksdb::FSWritableFile>* result) {
    if (!s.ok()) return;
    // Faults hit only WAL files: the journal's commit path.
    *result = std::make_unique<File>(this, absl::EndsWith(fname, ".log"), std::move(*result));
  }
  bool Hit(Fault f) {
    if (fault_.load() != f) return false;
    injected_.fetch_add(1);
    return true;
  }

  std::atomic<Fault> fault_{Fault::kNone};
  std::atomic<int> injected_{0};
  std::atomic<bool> skip_syncs_{false};
};

}  // namespace umap::journal

#endif  // UMAP_TESTS_JOURNAL_FAILING_FS_H_
