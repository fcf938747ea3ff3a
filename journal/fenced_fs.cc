#include "journal/fenced_fs.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace umap::journal {
namespace {

// A writable file whose appends and truncations pass the fence first.
class FencedWritableFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FencedWritableFile(FencedFs* fs, std::string path, std::unique_ptr<rocksdb::FSWritableFile> t)
      : FSWritableFileOwnerWrapper(std::move(t)), fs_(fs), path_(std::move(path)) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = fs_->Allow("append to " + path_);
    return s.ok() ? target()->Append(data, o, d) : s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = fs_->Allow("append to " + path_);
    return s.ok() ? target()->Append(data, o, info, d) : s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                     const rocksdb::IOOptions& o,
                                     rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = fs_->Allow("append to " + path_);
    return s.ok() ? target()->PositionedAppend(data, offset, o, d) : s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                     const rocksdb::IOOptions& o,
                                     const rocksdb::DataVerificationInfo& info,
                                     rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = fs_->Allow("append to " + path_);
    return s.ok() ? target()->PositionedAppend(data, offset, o, info, d) : s;
  }
  rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = fs_->Allow("truncate " + path_);
    return s.ok() ? target()->Truncate(size, o, d) : s;
  }

 private:
  FencedFs* const fs_;
  const std::string path_;
};

}  // namespace

rocksdb::IOStatus FencedFs::Allow(const std::string& what) {
  absl::Status s = fence_->CheckFresh();
  if (s.ok()) return rocksdb::IOStatus::OK();
  return rocksdb::IOStatus::IOError(absl::StrCat("refused to ", what, ": ", s.message()));
}

rocksdb::IOStatus FencedFs::NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                            std::unique_ptr<rocksdb::FSWritableFile>* r,
                                            rocksdb::IODebugContext* d) {
  rocksdb::IOStatus s = Allow("create " + f);
  if (s.ok()) s = target()->NewWritableFile(f, o, r, d);
  if (s.ok()) *r = std::make_unique<FencedWritableFile>(this, f, std::move(*r));
  return s;
}

rocksdb::IOStatus FencedFs::ReopenWritableFile(const std::string& f,
                                               const rocksdb::FileOptions& o,
                                               std::unique_ptr<rocksdb::FSWritableFile>* r,
                                               rocksdb::IODebugContext* d) {
  rocksdb::IOStatus s = Allow("reopen " + f);
  if (s.ok()) s = target()->ReopenWritableFile(f, o, r, d);
  if (s.ok()) *r = std::make_unique<FencedWritableFile>(this, f, std::move(*r));
  return s;
}

rocksdb::IOStatus FencedFs::ReuseWritableFile(const std::string& f, const std::string& old,
                                              const rocksdb::FileOptions& o,
                                              std::unique_ptr<rocksdb::FSWritableFile>* r,
                                              rocksdb::IODebugContext* d) {
  rocksdb::IOStatus s = Allow("reuse " + old + " as " + f);
  if (s.ok()) s = target()->ReuseWritableFile(f, old, o, r, d);
  if (s.ok()) *r = std::make_unique<FencedWritableFile>(this, f, std::move(*r));
  return s;
}

rocksdb::IOStatus FencedFs::NewRandomRWFile(const std::string& f, const rocksdb::FileOptions& o,
                                            std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                            rocksdb::IODebugContext* d) {
  // RocksDB writes no journal file in place; refuse it to a fenced owner all the same.
  rocksdb::IOStatus s = Allow("open for writing " + f);
  return s.ok() ? target()->NewRandomRWFile(f, o, r, d) : s;
}

rocksdb::IOStatus FencedFs::RenameFile(const std::string& s, const std::string& t,
                                       const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) {
  rocksdb::IOStatus st = Allow("rename " + s + " to " + t);
  return st.ok() ? target()->RenameFile(s, t, o, d) : st;
}

rocksdb::IOStatus FencedFs::LinkFile(const std::string& s, const std::string& t,
                                     const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) {
  rocksdb::IOStatus st = Allow("link " + s + " to " + t);
  return st.ok() ? target()->LinkFile(s, t, o, d) : st;
}

rocksdb::IOStatus FencedFs::DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* d) {
  rocksdb::IOStatus s = Allow("delete " + f);
  return s.ok() ? target()->DeleteFile(f, o, d) : s;
}

rocksdb::IOStatus FencedFs::Truncate(const std::string& f, size_t size,
                                     const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) {
  rocksdb::IOStatus s = Allow("truncate " + f);
  return s.ok() ? target()->Truncate(f, size, o, d) : s;
}

rocksdb::IOStatus FencedFs::CreateDir(const std::string& f, const rocksdb::IOOptions& o,
                                      rocksdb::IODebugContext* d) {
  rocksdb::IOStatus s = Allow("create directory " + f);
  return s.ok() ? target()->CreateDir(f, o, d) : s;
}

rocksdb::IOStatus FencedFs::CreateDirIfMissing(const std::string& f, const rocksdb::IOOptions& o,
                                               rocksdb::IODebugContext* d) {
  rocksdb::IOStatus s = Allow("create directory " + f);
  return s.ok() ? target()->CreateDirIfMissing(f, o, d) : s;
}

rocksdb::IOStatus FencedFs::DeleteDir(const std::string& f, const rocksdb::IOOptions& o,
                                      rocksdb::IODebugContext* d) {
  rocksdb::IOStatus s = Allow("delete directory " + f);
  return s.ok() ? target()->DeleteDir(f, o, d) : s;
}

}  // namespace umap::journal
