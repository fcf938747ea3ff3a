#include "journal/wal_zero_fill.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/fs_kind.h"

namespace umap::journal {

// A WAL file with written zeros ahead of its records. Appends and cuts hold mu_; RocksDB
// appends from one thread at a time, and cuts come from the creation of the next WAL file.
class ZeroFilledWal final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  ZeroFilledWal(WalZeroFillFs* fs, std::unique_ptr<rocksdb::FSWritableFile> file,
                std::unique_ptr<rocksdb::FSRandomRWFile> filler)
      : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs), filler_(std::move(filler)) {}
  ~ZeroFilledWal() override { fs_->Forget(this); }

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* d) override {
    return OnZeros(data.size(), o, d, [&] { return target()->Append(data, o, d); });
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* d) override {
    return OnZeros(data.size(), o, d, [&] { return target()->Append(data, o, info, d); });
  }
  rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
    absl::MutexLock lock(&mu_);
    rocksdb::IOStatus s = target()->Truncate(size, o, d);
    if (s.ok()) size_ = zeroed_ = size;
    return s;
  }
  // RocksDB sets a preallocation size on WAL files; with it PosixWritableFile cuts the file
  // back to its appends when closed or destroyed, even after a failed Close (a fenced
  // owner, a power cut in tests). The zeros are this file's preallocation: none there.
  void SetPreallocationBlockSize(size_t) override {}

  // A closing WAL keeps its zeros: no newer file of this process follows it, the next open
  // of the journal replays it and makes it obsolete, and a fenced owner must not write.
  rocksdb::IOStatus Close(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    fs_->Forget(this);
    rocksdb::IOStatus c = filler_->Close(o, d);
    rocksdb::IOStatus t = target()->Close(o, d);
    return t.ok() ? c : t;
  }

  // Cuts the file back to its records and syncs that: a newer WAL file is about to exist.
  // Later appends (RocksDB makes none) are not zero-filled.
  rocksdb::IOStatus CutBackForNewerWal() {
    absl::MutexLock lock(&mu_);
    if (cut_) return rocksdb::IOStatus::OK();
    const rocksdb::IOOptions o;
    if (zeroed_ > size_) {
      rocksdb::IOStatus s = target()->Truncate(size_, o, nullptr);
      if (s.ok()) s = target()->Fsync(o, nullptr);
      if (!s.ok()) return s;
    }
    cut_ = true;
    return rocksdb::IOStatus::OK();
  }

 private:
  // Runs `append` (of `n` bytes) once they will land on written zeros.
  template <typename AppendFn>
  rocksdb::IOStatus OnZeros(uint64_t n, const rocksdb::IOOptions& o, rocksdb::IODebugContext* d,
                            AppendFn append) {
    absl::MutexLock lock(&mu_);
    if (rocksdb::IOStatus s = Reserve(n, o, d); !s.ok()) return s;
    rocksdb::IOStatus s = append();
    if (s.ok()) size_ += n;
    return s;
  }

  // Makes sure `n` more bytes land on written zeros, extending them by whole steps.
  rocksdb::IOStatus Reserve(uint64_t n, const rocksdb::IOOptions& o, rocksdb::IODebugContext* d)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (cut_ || size_ + n <= zeroed_) return rocksdb::IOStatus::OK();
    static const char kZeros[64 << 10] = {};
    // The step doubles from 64 KiB: a short-lived WAL (one per journal open) writes few zeros.
    const uint64_t step = std::clamp<uint64_t>(zeroed_, sizeof(kZeros), WalZeroFillFs::kStep);
    const uint64_t end = std::max(zeroed_ + step, (size_ + n + step - 1) / step * step);
    while (zeroed_ < end) {
      const uint64_t len = std::min<uint64_t>(sizeof(kZeros), end - zeroed_);
      rocksdb::IOStatus s = filler_->Write(zeroed_, rocksdb::Slice(kZeros, len), o, d);
      if (!s.ok()) return s;
      zeroed_ += len;
    }
    return rocksdb::IOStatus::OK();
  }

  WalZeroFillFs* const fs_;
  const std::unique_ptr<rocksdb::FSRandomRWFile> filler_;  // writes the zeros
  absl::Mutex mu_;
  uint64_t size_ ABSL_GUARDED_BY(mu_) = 0;    // bytes of records appended
  uint64_t zeroed_ ABSL_GUARDED_BY(mu_) = 0;  // the file's size: records, then zeros
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
};

bool IsWalFileName(const std::string& fname) {
  absl::string_view name(fname);
  if (size_t slash = name.rfind('/'); slash != absl::string_view::npos) {
    name.remove_prefix(slash + 1);
  }
  if (!absl::ConsumeSuffix(&name, ".log") || name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); });
}

bool ZeroFillPaysOnFsType(int64_t f_type) { return FsKindOfType(f_type) != FsKind::kNetwork; }

bool ZeroFillPaysOn(const std::string& dir) { return FsKindOfPath(dir) != FsKind::kNetwork; }

rocksdb::IOStatus WalZeroFillFs::NewWritableFile(const std::string& fname,
                                                 const rocksdb::FileOptions& opts,
                                                 std::unique_ptr<rocksdb::FSWritableFile>* result,
                                                 rocksdb::IODebugContext* dbg) {
  if (!IsWalFileName(fname) || opts.use_direct_writes) {
    return target()->NewWritableFile(fname, opts, result, dbg);
  }
  {
    absl::MutexLock lock(&mu_);
    for (ZeroFilledWal* older : open_) {
      if (rocksdb::IOStatus s = older->CutBackForNewerWal(); !s.ok()) return s;
    }
  }
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s = target()->NewWritableFile(fname, opts, &file, dbg);
  if (!s.ok()) return s;
  std::unique_ptr<rocksdb::FSRandomRWFile> filler;
  s = target()->NewRandomRWFile(fname, opts, &filler, dbg);
  if (!s.ok()) return s;
  auto wal = std::make_unique<ZeroFilledWal>(this, std::move(file), std::move(filler));
  {
    absl::MutexLock lock(&mu_);
    open_.push_back(wal.get());
  }
  *result = std::move(wal);
  return s;
}

void WalZeroFillFs::Forget(ZeroFilledWal* wal) {
  absl::MutexLock lock(&mu_);
  open_.erase(std::remove(open_.begin(), open_.end(), wal), open_.end());
}

}  // namespace umap::journal
