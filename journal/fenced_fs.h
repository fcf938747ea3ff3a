// FencedFs: the journal's RocksDB FileSystem seen through its JournalFence. Every call that
// changes the journal directory — creating, reopening, renaming, linking, truncating or
// deleting a file or directory, appending to a file — first asks the fence whether this
// process still owns the journal (JournalFence::CheckFresh) and fails with an IOError
// naming the new owner when it does not. So a former owner's RocksDB, whose background
// flushes, compactions and obsolete-file deletions run on their own, never touches the
// files of the owner that took over; reads pass through.
#ifndef UMAP_JOURNAL_FENCED_FS_H_
#define UMAP_JOURNAL_FENCED_FS_H_

#include <memory>
#include <string>

#include "journal/journal_fence.h"
#include "rocksdb/file_system.h"

namespace umap::journal {

class FencedFs final : public rocksdb::FileSystemWrapper {
 public:
  // `fence` must outlive every file this FileSystem opens (the Journal owns both).
  FencedFs(const std::shared_ptr<rocksdb::FileSystem>& target, JournalFence* fence)
      : FileSystemWrapper(target), fence_(fence) {}
  const char* Name() const override { return "UmapFencedFs"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus NewRandomRWFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                    rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus RenameFile(const std::string& s, const std::string& t,
                               const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus LinkFile(const std::string& s, const std::string& t,
                             const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus Truncate(const std::string& f, size_t size, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus CreateDir(const std::string& f, const rocksdb::IOOptions& o,
                              rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus CreateDirIfMissing(const std::string& f, const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus DeleteDir(const std::string& f, const rocksdb::IOOptions& o,
                              rocksdb::IODebugContext* d) override;

  // OK, or the IOError a fenced (or unverifiable) owner gets for `what`.
  rocksdb::IOStatus Allow(const std::string& what);

 private:
  JournalFence* const fence_;
};

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_FENCED_FS_H_
