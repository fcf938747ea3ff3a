#include "faultinject/fault_fs.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace umap::faultinject {
namespace {

constexpr absl::string_view kOpNames[kNumFsOps] = {
    "new_writable_file", "append", "sync", "fsync", "close", "rename_file", "dir_fsync", "write",
};

std::string DirOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string NormalizeDir(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// FaultFs reports its own failures (DropUnsyncedData) as absl::Status. journal/ owns the
// production rocksdb::Status conversion; faultinject may not depend on journal/, and these
// are test-infrastructure errors, so a coarse mapping is enough here.
absl::Status ToAbsl(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsIOError()) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

}  // namespace

absl::string_view FsOpName(FsOp op) {
  int i = static_cast<int>(op);
  return i >= 0 && i < kNumFsOps ? kOpNames[i] : "unknown";
}

FileClass ClassifyFile(absl::string_view path) {
  size_t slash = path.find_last_of('/');
  absl::string_view base = slash == absl::string_view::npos ? path : path.substr(slash + 1);
  if (absl::EndsWith(base, ".log") && AllDigits(base.substr(0, base.size() - 4))) {
    return FileClass::kWal;
  }
  if (absl::StartsWith(base, "MANIFEST-")) return FileClass::kManifest;
  if (absl::EndsWith(base, ".sst") && AllDigits(base.substr(0, base.size() - 4))) {
    return FileClass::kTable;
  }
  return FileClass::kOther;
}

// ---------------------------------------------------------------------------------------

class FaultWritableFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultWritableFile(FaultFs* fs, std::string path, std::unique_ptr<rocksdb::FSWritableFile> t)
      : FSWritableFileOwnerWrapper(std::move(t)), fs_(fs), path_(std::move(path)) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    rocksdb::IOStatus s = BeforeWrite(FsOp::kAppend, "append");
    if (s.ok()) s = target()->Append(data, options, dbg);
    if (s.ok()) fs_->OnAppended(path_, data.size(), /*positioned=*/false);
    return s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    rocksdb::IOStatus s = BeforeWrite(FsOp::kAppend, "append");
    if (s.ok()) s = target()->Append(data, options, info, dbg);
    if (s.ok()) fs_->OnAppended(path_, data.size(), /*positioned=*/false);
    return s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                     const rocksdb::IOOptions& options,
                                     rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    rocksdb::IOStatus s = BeforeWrite(FsOp::kAppend, "positioned append");
    if (s.ok()) s = target()->PositionedAppend(data, offset, options, dbg);
    if (s.ok()) fs_->OnAppended(path_, offset + data.size(), /*positioned=*/true);
    return s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                     const rocksdb::IOOptions& options,
                                     const rocksdb::DataVerificationInfo& info,
                                     rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    rocksdb::IOStatus s = BeforeWrite(FsOp::kAppend, "positioned append");
    if (s.ok()) s = target()->PositionedAppend(data, offset, options, info, dbg);
    if (s.ok()) fs_->OnAppended(path_, offset + data.size(), /*positioned=*/true);
    return s;
  }
  rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    if (fs_->IsFrozen()) return fs_->Refuse("truncate " + path_);
    rocksdb::IOStatus s = target()->Truncate(size, options, dbg);
    if (s.ok()) fs_->OnTruncated(path_, size);
    return s;
  }
  rocksdb::IOStatus Flush(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    if (fs_->IsFrozen()) return fs_->Refuse("flush " + path_);
    return target()->Flush(options, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    return DoSync(FsOp::kSync, options, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    return DoSync(FsOp::kFsync, options, dbg);
  }
  // sync_file_range: starts writeback, promises nothing about durability.
  rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    if (fs_->IsFrozen()) return fs_->Refuse("range sync " + path_);
    if (fs_->skip_syncs()) return rocksdb::IOStatus::OK();
    return target()->RangeSync(offset, nbytes, options, dbg);
  }
  rocksdb::IOStatus Close(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    if (fs_->IsFrozen()) return fs_->Refuse("close " + path_);
    rocksdb::IOStatus s = fs_->Inject(FsOp::kClose, path_);
    if (!s.ok()) return s;
    return target()->Close(options, dbg);
  }

 private:
  rocksdb::IOStatus BeforeWrite(FsOp op, absl::string_view what, bool* loses_data = nullptr) {
    if (fs_->IsFrozen()) return fs_->Refuse(absl::StrCat(what, " ", path_));
    return fs_->Inject(op, path_, loses_data);
  }

  rocksdb::IOStatus DoSync(FsOp op, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    bool loses_data = false;
    rocksdb::IOStatus s = BeforeWrite(op, FsOpName(op), &loses_data);
    if (!s.ok()) {
      if (loses_data) fs_->OnSyncLostData(path_);
      return s;
    }
    if (fs_->skip_syncs()) return rocksdb::IOStatus::OK();
    // Only what was appended before the sync started is known to be covered by it.
    const uint64_t covered = fs_->SizeOf(path_);
    const uint64_t extended = fs_->ExtendedOf(path_);
    s = op == FsOp::kSync ? target()->Sync(options, dbg) : target()->Fsync(options, dbg);
    if (s.ok()) fs_->OnSynced(path_, covered, extended);
    return s;
  }

  FaultFs* const fs_;
  const std::string path_;
};

// A random-access read/write file: its writes pass the rules (kWrite) and the freeze,
// and extend the file's tracked state (FileState::extended); syncs are forwarded untracked.
class FaultRandomRWFile final : public rocksdb::FSRandomRWFileOwnerWrapper {
 public:
  FaultRandomRWFile(FaultFs* fs, std::string path, std::unique_ptr<rocksdb::FSRandomRWFile> t)
      : FSRandomRWFileOwnerWrapper(std::move(t)), fs_(fs), path_(std::move(path)) {}

  rocksdb::IOStatus Write(uint64_t offset, const rocksdb::Slice& data,
                          const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    if (fs_->IsFrozen()) return fs_->Refuse("write " + path_);
    rocksdb::IOStatus s = fs_->Inject(FsOp::kWrite, path_);
    if (s.ok()) s = target()->Write(offset, data, options, dbg);
    if (s.ok()) fs_->OnWritten(path_, offset + data.size());
    return s;
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    if (fs_->IsFrozen()) return fs_->Refuse("sync " + path_);
    return target()->Sync(options, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    if (fs_->IsFrozen()) return fs_->Refuse("fsync " + path_);
    return target()->Fsync(options, dbg);
  }

 private:
  FaultFs* const fs_;
  const std::string path_;
};

class FaultDirectory final : public rocksdb::FSDirectoryWrapper {
 public:
  FaultDirectory(FaultFs* fs, std::string dir, std::unique_ptr<rocksdb::FSDirectory> t)
      : FSDirectoryWrapper(std::move(t)), fs_(fs), dir_(std::move(dir)) {}

  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    rocksdb::IOStatus s = Before();
    if (!s.ok() || fs_->skip_syncs()) return s;
    s = FSDirectoryWrapper::Fsync(options, dbg);
    if (s.ok()) fs_->OnDirSynced(dir_);
    return s;
  }
  rocksdb::IOStatus FsyncWithDirOptions(const rocksdb::IOOptions& options,
                                        rocksdb::IODebugContext* dbg,
                                        const rocksdb::DirFsyncOptions& dir_options) override {
    absl::ReaderMutexLock freeze(&fs_->freeze_mu_);  // see SimulatePowerCut
    rocksdb::IOStatus s = Before();
    if (!s.ok() || fs_->skip_syncs()) return s;
    s = FSDirectoryWrapper::FsyncWithDirOptions(options, dbg, dir_options);
    if (s.ok()) fs_->OnDirSynced(dir_);
    return s;
  }

 private:
  rocksdb::IOStatus Before() {
    if (fs_->IsFrozen()) return fs_->Refuse("fsync dir " + dir_);
    return fs_->Inject(FsOp::kDirFsync, dir_);
  }

  FaultFs* const fs_;
  const std::string dir_;
};

// ---------------------------------------------------------------------------------------

FaultFs::FaultFs(const std::shared_ptr<rocksdb::FileSystem>& base) : FileSystemWrapper(base) {}

FaultFs::~FaultFs() = default;

rocksdb::IOStatus FaultFs::Inject(FsOp op, const std::string& path, bool* loses_data) {
  auto fired = rules_.Decide(op, path, /*with_draw=*/false);
  if (!fired) return rocksdb::IOStatus::OK();
  const FsFault& fault = fired->fault;
  fired_[static_cast<int>(op)].fetch_add(1, std::memory_order_relaxed);
  if (loses_data != nullptr) *loses_data = fault.loses_data;
  std::string msg = absl::StrCat("injected ", FsOpName(op), " failure: ", path);
  rocksdb::IOStatus s = fault.error == FsFault::Error::kNoSpace ? rocksdb::IOStatus::NoSpace(msg)
                                                                : rocksdb::IOStatus::IOError(msg);
  if (fault.retryable) s.SetRetryable(true);
  return s;
}

rocksdb::IOStatus FaultFs::Refuse(absl::string_view what) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  return rocksdb::IOStatus::IOError(absl::StrCat("power cut: ", what));
}

void FaultFs::OnAppended(const std::string& path, uint64_t n_or_end, bool positioned) {
  absl::MutexLock l(&mu_);
  FileState& st = files_[path];
  st.size = positioned ? std::max(st.size, n_or_end) : st.size + n_or_end;
}

void FaultFs::OnTruncated(const std::string& path, uint64_t size) {
  absl::MutexLock l(&mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return;
  it->second.size = size;
  it->second.synced_size = std::min(it->second.synced_size, size);
  it->second.extended = std::min(it->second.extended, size);
  it->second.synced_extended = std::min(it->second.synced_extended, size);
  for (auto& [begin, end] : it->second.lost) end = std::min(end, size);
}

void FaultFs::OnWritten(const std::string& path, uint64_t end) {
  absl::MutexLock l(&mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return;  // not created through this FileSystem: untracked
  it->second.extended = std::max(it->second.extended, end);
}

uint64_t FaultFs::ExtendedOf(const std::string& path) {
  absl::MutexLock l(&mu_);
  auto it = files_.find(path);
  return it == files_.end() ? 0 : it->second.extended;
}

uint64_t FaultFs::SizeOf(const std::string& path) {
  absl::MutexLock l(&mu_);
  auto it = files_.find(path);
  return it == files_.end() ? 0 : it->second.size;
}

void FaultFs::OnSynced(const std::string& path, uint64_t size, uint64_t extended) {
  absl::MutexLock l(&mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return;
  it->second.synced_size = std::max(it->second.synced_size, std::min(size, it->second.size));
  it->second.synced_extended =
      std::max(it->second.synced_extended, std::min(extended, it->second.extended));
}

void FaultFs::OnSyncLostData(const std::string& path) {
  absl::MutexLock l(&mu_);
  auto it = files_.find(path);
  if (it == files_.end() || it->second.size <= it->second.synced_size) return;
  FileState& st = it->second;
  st.lost.emplace_back(st.synced_size, st.size);
  bytes_lost_by_syncs_ += st.size - st.synced_size;
  // The pages are clean now: the next sync covers only what is appended after this one.
  st.synced_size = st.size;
}

void FaultFs::OnCreated(const std::string& path, std::optional<std::string> previous) {
  absl::MutexLock l(&mu_);
  // emplace keeps an older record: the oldest durable state is what a power cut restores.
  new_entries_[DirOf(path)].emplace(BaseOf(path), std::move(previous));
}

void FaultFs::OnDirSynced(const std::string& dir) {
  absl::MutexLock l(&mu_);
  new_entries_.erase(NormalizeDir(dir));
}

rocksdb::IOStatus FaultFs::NewWritableFile(const std::string& fname,
                                           const rocksdb::FileOptions& opts,
                                           std::unique_ptr<rocksdb::FSWritableFile>* result,
                                           rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock freeze(&freeze_mu_);  // see SimulatePowerCut
  if (IsFrozen()) return Refuse("create " + fname);
  rocksdb::IOStatus s = Inject(FsOp::kNewWritableFile, fname);
  if (!s.ok()) return s;
  const bool existed = target()->FileExists(fname, rocksdb::IOOptions(), dbg).ok();
  s = target()->NewWritableFile(fname, opts, result, dbg);
  if (!s.ok()) return s;
  {
    absl::MutexLock l(&mu_);
    files_[fname] = FileState{};
  }
  // An existing entry was already durable in its directory; only a new name needs a dir sync.
  if (!existed) OnCreated(fname, std::nullopt);
  *result = std::make_unique<FaultWritableFile>(this, fname, std::move(*result));
  return s;
}

rocksdb::IOStatus FaultFs::ReopenWritableFile(const std::string& fname,
                                              const rocksdb::FileOptions& opts,
                                              std::unique_ptr<rocksdb::FSWritableFile>* result,
                                              rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock freeze(&freeze_mu_);  // see SimulatePowerCut
  if (IsFrozen()) return Refuse("reopen " + fname);
  rocksdb::IOStatus s = Inject(FsOp::kNewWritableFile, fname);
  if (!s.ok()) return s;
  uint64_t size = 0;
  const bool existed = target()->GetFileSize(fname, rocksdb::IOOptions(), &size, dbg).ok();
  s = target()->ReopenWritableFile(fname, opts, result, dbg);
  if (!s.ok()) return s;
  {
    absl::MutexLock l(&mu_);
    auto [it, fresh] = files_.try_emplace(fname);
    if (fresh) it->second.synced_size = size;  // untracked content counts as durable
    it->second.size = size;
  }
  if (!existed) OnCreated(fname, std::nullopt);
  *result = std::make_unique<FaultWritableFile>(this, fname, std::move(*result));
  return s;
}

rocksdb::IOStatus FaultFs::NewSequentialFile(const std::string& fname,
                                             const rocksdb::FileOptions& opts,
                                             std::unique_ptr<rocksdb::FSSequentialFile>* result,
                                             rocksdb::IODebugContext* dbg) {
  if (IsFrozen()) return Refuse("open " + fname);
  return target()->NewSequentialFile(fname, opts, result, dbg);
}

rocksdb::IOStatus FaultFs::NewRandomRWFile(const std::string& fname,
                                           const rocksdb::FileOptions& opts,
                                           std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                                           rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock freeze(&freeze_mu_);  // see SimulatePowerCut
  if (IsFrozen()) return Refuse("open for writing " + fname);
  rocksdb::IOStatus s = target()->NewRandomRWFile(fname, opts, result, dbg);
  if (!s.ok()) return s;
  *result = std::make_unique<FaultRandomRWFile>(this, fname, std::move(*result));
  return s;
}

rocksdb::IOStatus FaultFs::NewRandomAccessFile(
    const std::string& fname, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSRandomAccessFile>* result, rocksdb::IODebugContext* dbg) {
  if (IsFrozen()) return Refuse("open " + fname);
  return target()->NewRandomAccessFile(fname, opts, result, dbg);
}

rocksdb::IOStatus FaultFs::NewDirectory(const std::string& name, const rocksdb::IOOptions& opts,
                                        std::unique_ptr<rocksdb::FSDirectory>* result,
                                        rocksdb::IODebugContext* dbg) {
  if (IsFrozen()) return Refuse("open dir " + name);
  rocksdb::IOStatus s = target()->NewDirectory(name, opts, result, dbg);
  if (!s.ok()) return s;
  *result = std::make_unique<FaultDirectory>(this, NormalizeDir(name), std::move(*result));
  return s;
}

rocksdb::IOStatus FaultFs::RenameFile(const std::string& src, const std::string& dst,
                                      const rocksdb::IOOptions& opts,
                                      rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock freeze(&freeze_mu_);  // see SimulatePowerCut
  if (IsFrozen()) return Refuse("rename " + src);
  rocksdb::IOStatus s = Inject(FsOp::kRenameFile, dst);
  if (!s.ok()) return s;
  // The replaced file's content comes back if a power cut undoes the rename (RocksDB
  // replaces CURRENT and OPTIONS this way; they are small).
  std::optional<std::string> previous;
  if (target()->FileExists(dst, opts, dbg).ok()) {
    std::string old;
    if (rocksdb::ReadFileToString(target(), dst, &old).ok()) previous = std::move(old);
  }
  s = target()->RenameFile(src, dst, opts, dbg);
  if (!s.ok()) return s;
  {
    absl::MutexLock l(&mu_);
    if (auto it = files_.find(src); it != files_.end()) {
      files_[dst] = it->second;
      files_.erase(src);
    } else {
      files_.erase(dst);
    }
    auto sd = new_entries_.find(DirOf(src));
    if (sd != new_entries_.end()) sd->second.erase(BaseOf(src));
  }
  OnCreated(dst, std::move(previous));
  return s;
}

rocksdb::IOStatus FaultFs::LinkFile(const std::string& src, const std::string& dst,
                                    const rocksdb::IOOptions& opts, rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock freeze(&freeze_mu_);  // see SimulatePowerCut
  if (IsFrozen()) return Refuse("link " + src);
  rocksdb::IOStatus s = target()->LinkFile(src, dst, opts, dbg);
  if (s.ok()) OnCreated(dst, std::nullopt);
  return s;
}

rocksdb::IOStatus FaultFs::DeleteFile(const std::string& fname, const rocksdb::IOOptions& opts,
                                      rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock freeze(&freeze_mu_);  // see SimulatePowerCut
  if (IsFrozen()) return Refuse("delete " + fname);
  rocksdb::IOStatus s = target()->DeleteFile(fname, opts, dbg);
  if (!s.ok()) return s;
  absl::MutexLock l(&mu_);
  files_.erase(fname);
  auto d = new_entries_.find(DirOf(fname));
  if (d != new_entries_.end()) {
    auto e = d->second.find(BaseOf(fname));
    // A created-and-deleted name leaves no trace; a replaced file whose replacement is
    // deleted before any dir sync comes back at a power cut, so that record stays.
    if (e != d->second.end() && !e->second.has_value()) d->second.erase(e);
  }
  return s;
}

rocksdb::IOStatus FaultFs::Truncate(const std::string& fname, size_t size,
                                    const rocksdb::IOOptions& opts, rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock freeze(&freeze_mu_);  // see SimulatePowerCut
  if (IsFrozen()) return Refuse("truncate " + fname);
  rocksdb::IOStatus s = target()->Truncate(fname, size, opts, dbg);
  if (s.ok()) OnTruncated(fname, size);
  return s;
}

rocksdb::IOStatus FaultFs::CreateDir(const std::string& dir, const rocksdb::IOOptions& opts,
                                     rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock freeze(&freeze_mu_);  // see SimulatePowerCut
  if (IsFrozen()) return Refuse("mkdir " + dir);
  return target()->CreateDir(dir, opts, dbg);
}

rocksdb::IOStatus FaultFs::CreateDirIfMissing(const std::string& dir,
                                              const rocksdb::IOOptions& opts,
                                              rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock freeze(&freeze_mu_);  // see SimulatePowerCut
  if (IsFrozen()) return Refuse("mkdir " + dir);
  return target()->CreateDirIfMissing(dir, opts, dbg);
}

rocksdb::IOStatus FaultFs::DeleteDir(const std::string& dir, const rocksdb::IOOptions& opts,
                                     rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock freeze(&freeze_mu_);  // see SimulatePowerCut
  if (IsFrozen()) return Refuse("rmdir " + dir);
  return target()->DeleteDir(dir, opts, dbg);
}

void FaultFs::SimulatePowerCut() {
  // Waits for calls that passed their frozen check and are still writing: once this
  // returns, nothing reaches the base FileSystem any more, so DropUnsyncedData sees every
  // byte that will ever land (without it, an append in flight at the cut could land after
  // the drop, and a frozen journal's files could still change).
  absl::MutexLock l(&freeze_mu_);
  frozen_.store(true);
}

bool FaultFs::frozen() const { return frozen_.load(); }

void FaultFs::Restart() {
  absl::MutexLock l(&mu_);
  files_.clear();
  new_entries_.clear();
  frozen_.store(false);
}

rocksdb::IOStatus FaultFs::ZeroRange(const std::string& path, uint64_t begin, uint64_t end) {
  if (begin >= end) return rocksdb::IOStatus::OK();
  const rocksdb::IOOptions io;
  std::unique_ptr<rocksdb::FSRandomRWFile> rw;
  rocksdb::IOStatus s = target()->NewRandomRWFile(path, rocksdb::FileOptions(), &rw, nullptr);
  if (s.ok()) s = rw->Write(begin, std::string(end - begin, '\0'), io, nullptr);
  if (s.ok()) s = rw->Close(io, nullptr);
  return s;
}

absl::Status FaultFs::ZeroLost(const std::string& path, const FileState& st, uint64_t keep,
                              uint64_t* zeroed) {
  const rocksdb::IOOptions io;
  if (st.lost.empty() || !target()->FileExists(path, io, nullptr).ok()) return absl::OkStatus();
  for (const auto& [begin, lost_end] : st.lost) {
    const uint64_t end = std::min(lost_end, keep);
    if (begin >= end) continue;
    // What a disk shows for blocks that were allocated but never written.
    rocksdb::IOStatus s = ZeroRange(path, begin, end);
    if (!s.ok()) return ToAbsl(s, "zero lost bytes of " + path);
    *zeroed += end - begin;
  }
  return absl::OkStatus();
}

absl::Status FaultFs::DropUnsyncedData(const FsDropOptions& options) {
  if (!IsFrozen()) {
    return absl::FailedPreconditionError("DropUnsyncedData needs SimulatePowerCut first");
  }
  if (options.sector_size == 0) return absl::InvalidArgumentError("sector_size 0");
  std::map<std::string, FileState> files;
  std::map<std::string, std::map<std::string, std::optional<std::string>>> entries;
  {
    absl::MutexLock l(&mu_);
    files.swap(files_);
    entries.swap(new_entries_);
  }
  const rocksdb::IOOptions io;
  absl::Status first_error;
  auto note = [&](const absl::Status& s) {
    if (!s.ok() && first_error.ok()) first_error = s;
  };
  uint64_t rng = options.seed;
  uint64_t truncated = 0, dropped = 0, deleted = 0, restored = 0, zeroed = 0;
  for (const auto& [path, st] : files) {  // path order: reproducible draws
    if (st.size <= st.synced_size) {
      note(ZeroLost(path, st, st.size, &zeroed));
      continue;
    }
    uint64_t keep = st.synced_size;
    if (options.tear) {
      // A cut among: the synced size, each sector boundary inside the tail, the full size.
      const uint64_t sector = options.sector_size;
      const uint64_t first = (st.synced_size / sector + 1) * sector;
      const uint64_t inside = first < st.size ? (st.size - 1 - first) / sector + 1 : 0;
      const uint64_t pick = NextRandom(&rng) % (inside + 2);
      keep = pick == 0 ? st.synced_size : pick == inside + 1 ? st.size : first + (pick - 1) * sector;
    }
    uint64_t keep_size = keep;  // the file's size after the cut
    if (!target()->FileExists(path, io, nullptr).ok()) continue;  // deleted since
    uint64_t on_disk = 0;
    rocksdb::IOStatus s = target()->GetFileSize(path, io, &on_disk, nullptr);
    if (s.ok() && st.synced_extended > keep) {
      // A synced extension (written zeros) survives with its size: the unsynced appended
      // bytes over it read as what was there before them, and only what lies beyond it goes.
      s = ZeroRange(path, keep, std::min(st.size, st.synced_extended));
      keep_size = st.synced_extended;
    }
    if (s.ok() && on_disk > keep_size) {
      // PosixFileSystem (7.8) has no FileSystem::Truncate; its writable file has one.
      std::unique_ptr<rocksdb::FSWritableFile> w;
      s = target()->ReopenWritableFile(path, rocksdb::FileOptions(), &w, nullptr);
      if (s.ok()) s = w->Truncate(keep_size, io, nullptr);
      if (s.ok()) s = w->Close(io, nullptr);
    }
    note(ToAbsl(s, "truncate " + path));
    if (!s.ok()) continue;
    ++truncated;
    dropped += st.size - keep;
    if (options.tear && options.garble && keep < st.size) {
      // The sector that was being written when power failed holds neither old nor new bytes.
      const uint64_t end = std::min(st.size, (keep / options.sector_size + 1) * options.sector_size);
      std::string junk(end - keep, '\0');
      for (char& c : junk) c = static_cast<char>(NextRandom(&rng));
      std::unique_ptr<rocksdb::FSRandomRWFile> rw;
      s = target()->NewRandomRWFile(path, rocksdb::FileOptions(), &rw, nullptr);
      if (s.ok()) s = rw->Write(keep, junk, io, nullptr);
      if (s.ok()) s = rw->Close(io, nullptr);
      note(ToAbsl(s, "garble " + path));
    }
    note(ZeroLost(path, st, keep, &zeroed));
  }
  if (options.delete_unsynced_files) {
    for (const auto& [dir, names] : entries) {
      for (const auto& [name, previous] : names) {
        const std::string path = dir == "/" ? "/" + name : dir + "/" + name;
        rocksdb::IOStatus s;
        if (previous.has_value()) {
          s = rocksdb::WriteStringToFile(target(), *previous, path, /*should_sync=*/true);
          if (s.ok()) ++restored;
        } else if (target()->FileExists(path, io, nullptr).ok()) {
          s = target()->DeleteFile(path, io, nullptr);
          if (s.ok()) ++deleted;
        }
        note(ToAbsl(s, "undo directory entry " + path));
      }
    }
  }
  absl::MutexLock l(&mu_);
  files_truncated_ += truncated;
  bytes_dropped_ += dropped;
  files_deleted_ += deleted;
  files_restored_ += restored;
  bytes_zeroed_ += zeroed;
  return first_error;
}

uint64_t FaultFs::UnsyncedBytes(const std::string& path) const {
  absl::MutexLock l(&mu_);
  auto it = files_.find(path);
  return it == files_.end() ? 0 : it->second.size - std::min(it->second.size, it->second.synced_size);
}

std::set<std::string> FaultFs::UnsyncedDirEntries(const std::string& dir) const {
  absl::MutexLock l(&mu_);
  std::set<std::string> out;
  auto it = new_entries_.find(NormalizeDir(dir));
  if (it != new_entries_.end()) {
    for (const auto& [name, previous] : it->second) out.insert(name);
  }
  return out;
}

uint64_t FaultFs::fired(FsOp op) const {
  return fired_[static_cast<int>(op)].load(std::memory_order_relaxed);
}

FsCounters FaultFs::counters() const {
  FsCounters c;
  for (int i = 0; i < kNumFsOps; ++i) c.fired[i] = fired_[i].load(std::memory_order_relaxed);
  c.refused_after_power_cut = refused_.load(std::memory_order_relaxed);
  absl::MutexLock l(&mu_);
  c.files_truncated = files_truncated_;
  c.bytes_dropped = bytes_dropped_;
  c.files_deleted = files_deleted_;
  c.files_restored = files_restored_;
  c.bytes_lost_by_syncs = bytes_lost_by_syncs_;
  c.bytes_zeroed = bytes_zeroed_;
  return c;
}

}  // namespace umap::faultinject
