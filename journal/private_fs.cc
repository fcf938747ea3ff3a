#include "journal/private_fs.h"

#include "base/private_dir.h"

namespace umap::journal {
namespace {

// After a successful creation: the file 0600, or the creation fails (nothing was written).
template <typename File>
rocksdb::IOStatus Restrict(rocksdb::IOStatus s, const std::string& fname,
                           std::optional<uid_t> give_to, std::unique_ptr<File>* result) {
  if (!s.ok()) return s;
  if (absl::Status r = RestrictToOwner(fname, give_to); !r.ok()) {
    result->reset();
    return rocksdb::IOStatus::IOError(std::string(r.message()));
  }
  return s;
}

}  // namespace

rocksdb::IOStatus PrivateFs::NewWritableFile(const std::string& fname,
                                             const rocksdb::FileOptions& opts,
                                             std::unique_ptr<rocksdb::FSWritableFile>* result,
                                             rocksdb::IODebugContext* dbg) {
  return Restrict(target()->NewWritableFile(fname, opts, result, dbg), fname, give_to_, result);
}

rocksdb::IOStatus PrivateFs::ReopenWritableFile(const std::string& fname,
                                                const rocksdb::FileOptions& opts,
                                                std::unique_ptr<rocksdb::FSWritableFile>* result,
                                                rocksdb::IODebugContext* dbg) {
  return Restrict(target()->ReopenWritableFile(fname, opts, result, dbg), fname, give_to_, result);
}

rocksdb::IOStatus PrivateFs::ReuseWritableFile(const std::string& fname,
                                               const std::string& old_fname,
                                               const rocksdb::FileOptions& opts,
                                               std::unique_ptr<rocksdb::FSWritableFile>* result,
                                               rocksdb::IODebugContext* dbg) {
  return Restrict(target()->ReuseWritableFile(fname, old_fname, opts, result, dbg), fname,
                  give_to_, result);
}

rocksdb::IOStatus PrivateFs::NewRandomRWFile(const std::string& fname,
                                             const rocksdb::FileOptions& opts,
                                             std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                                             rocksdb::IODebugContext* dbg) {
  return Restrict(target()->NewRandomRWFile(fname, opts, result, dbg), fname, give_to_, result);
}

rocksdb::IOStatus PrivateFs::LockFile(const std::string& fname, const rocksdb::IOOptions& opts,
                                      rocksdb::FileLock** lock, rocksdb::IODebugContext* dbg) {
  rocksdb::IOStatus s = target()->LockFile(fname, opts, lock, dbg);
  if (!s.ok()) return s;
  if (absl::Status r = RestrictToOwner(fname, give_to_); !r.ok()) {
    target()->UnlockFile(*lock, opts, dbg).PermitUncheckedError();  // failing anyway
    *lock = nullptr;
    return rocksdb::IOStatus::IOError(std::string(r.message()));
  }
  return s;
}

}  // namespace umap::journal
