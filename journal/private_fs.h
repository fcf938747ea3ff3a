// PrivateFs: the journal's rocksdb::FileSystem in the production path, wrapped around the
// one the caller gives (JournalOptions::fs). RocksDB creates its files with mode 0644 less
// the umask; this makes each one 0600 as soon as it exists, before anything is written to
// it, so the block images in a journal are readable by its owner only, also in a directory
// someone loosened or in a copy (docs/operations.md, "Who may touch a journal").
//
// RocksDB opens its files by path name (the FileSystem API has no directory descriptor),
// so a file cannot be created 0600 or opened relative to the checked directory: what keeps
// the path honest is base/private_dir.h's check that nobody else can change a directory on
// the way.
#ifndef UMAP_JOURNAL_PRIVATE_FS_H_
#define UMAP_JOURNAL_PRIVATE_FS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "rocksdb/file_system.h"

namespace umap::journal {

class PrivateFs : public rocksdb::FileSystemWrapper {
 public:
  // `give_to`: also make each file this user's (root working on another user's journal,
  // so that its owner can use the journal afterwards).
  PrivateFs(const std::shared_ptr<rocksdb::FileSystem>& target, std::optional<uid_t> give_to)
      : rocksdb::FileSystemWrapper(target), give_to_(give_to) {}
  static const char* kClassName() { return "UmapPrivateFs"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname,
                                       const rocksdb::FileOptions& opts,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                      const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomRWFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus LockFile(const std::string& fname, const rocksdb::IOOptions& opts,
                             rocksdb::FileLock** lock, rocksdb::IODebugContext* dbg) override;

 private:
  const std::optional<uid_t> give_to_;
};

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_PRIVATE_FS_H_
