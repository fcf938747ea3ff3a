#include "faultinject/fault_env.h"

#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "base/mem_env.h"
#include "base/posix_error.h"
#include "base/status_macros.h"

namespace umap::faultinject {
namespace {

constexpr char kInjectedUrl[] = "umap.dev/faultinject";

constexpr absl::string_view kKindNames[kNumFaultKinds] = {
    "error", "torn_write", "short_read", "truncated_read", "stall", "sync_loses_data", "power_cut",
};

absl::Status Injected(FaultKind kind, int err, absl::string_view what) {
  absl::Status s = PosixError(err, absl::StrCat("injected ", FaultKindName(kind), ": ", what));
  s.SetPayload(kInjectedUrl, absl::Cord(FaultKindName(kind)));
  return s;
}

// Disjoint byte ranges of one file, each with its bytes.
class RangeImage {
 public:
  // Overwrites [offset, offset + bytes.size()).
  void Put(uint64_t offset, std::string bytes) {
    if (bytes.empty()) return;
    const uint64_t end = offset + bytes.size();
    auto it = ranges_.lower_bound(offset);
    if (it != ranges_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second.size() > offset) it = prev;
    }
    while (it != ranges_.end() && it->first < end) {
      const uint64_t s = it->first;
      const uint64_t e = s + it->second.size();
      std::string old = std::move(it->second);
      it = ranges_.erase(it);
      if (s < offset) ranges_.emplace(s, old.substr(0, offset - s));
      if (e > end) ranges_.emplace(end, old.substr(end - s));
    }
    ranges_.emplace(offset, std::move(bytes));
  }

  // The parts of [begin, end) no range covers.
  std::vector<std::pair<uint64_t, uint64_t>> Gaps(uint64_t begin, uint64_t end) const {
    std::vector<std::pair<uint64_t, uint64_t>> gaps;
    uint64_t pos = begin;
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin()) --it;
    for (; it != ranges_.end() && pos < end; ++it) {
      const uint64_t s = it->first;
      const uint64_t e = s + it->second.size();
      if (e <= pos) continue;
      if (s >= end) break;
      if (s > pos) gaps.emplace_back(pos, s);
      pos = std::max(pos, e);
    }
    if (pos < end) gaps.emplace_back(pos, end);
    return gaps;
  }

  const std::map<uint64_t, std::string>& ranges() const { return ranges_; }
  void Clear() { ranges_.clear(); }

 private:
  std::map<uint64_t, std::string> ranges_;
};

}  // namespace

// The durability state of one file path, shared by every handle of it.
//
// Invariant: the file's durable content (what a power cut would leave with kDropAll) is
// `base` where it has bytes, else the current content, below `durable_size`; nothing above.
struct TrackedFile {
  struct Write {
    uint64_t offset;
    std::string data;
    bool lost;  // a kSyncLosesData Sync covered it: it never becomes durable
    uint64_t end() const { return offset + data.size(); }
  };

  TrackedFile(std::string p, uint64_t size) : path(std::move(p)), durable_size(size) {}

  const std::string path;
  absl::Mutex mu;
  uint64_t durable_size ABSL_GUARDED_BY(mu);
  RangeImage base ABSL_GUARDED_BY(mu);
  std::vector<Write> pending ABSL_GUARDED_BY(mu);  // in write order
};

absl::string_view FaultKindName(FaultKind kind) {
  int i = static_cast<int>(kind);
  return i >= 0 && i < kNumFaultKinds ? kKindNames[i] : "unknown";
}

bool IsInjected(const absl::Status& status) { return InjectedKind(status).has_value(); }

std::optional<FaultKind> InjectedKind(const absl::Status& status) {
  if (status.ok()) return std::nullopt;
  auto payload = status.GetPayload(kInjectedUrl);
  if (!payload) return std::nullopt;
  for (int i = 0; i < kNumFaultKinds; ++i) {
    if (*payload == kKindNames[i]) return static_cast<FaultKind>(i);
  }
  return std::nullopt;
}

TruncateFn MemEnvTruncator(Env* mem_env) {
  return [mem_env](const std::string& path, uint64_t size) -> absl::Status {
    ASSIGN_OR_RETURN(std::string data, MemEnvReadFile(mem_env, path));
    data.resize(size);
    return MemEnvWriteFile(mem_env, path, data);
  };
}

// ---------------------------------------------------------------------------------------
// FaultFile

class FaultFile final : public File {
 public:
  FaultFile(FaultEnv* env, std::unique_ptr<File> target, std::shared_ptr<TrackedFile> tracked,
            uint64_t generation)
      : env_(env), target_(std::move(target)), t_(std::move(tracked)), generation_(generation) {}

  absl::StatusOr<size_t> ReadAt(uint64_t offset, absl::Span<char> dst) override {
    if (env_->IsStale(generation_)) return env_->PowerCutError(What("read", offset));
    if (auto fired = env_->Decide(Op::kRead, t_->path)) {
      const Fault& f = fired->fault;
      switch (f.kind) {
        case FaultKind::kStall:
          RETURN_IF_ERROR(env_->Stall(f, What("read", offset)));
          break;
        case FaultKind::kShortRead:
        case FaultKind::kTruncatedRead: {
          size_t prefix = std::min<uint64_t>(
              f.prefix.value_or(dst.empty() ? 0 : fired->draw % dst.size()), dst.size());
          env_->Count(f.kind);
          ASSIGN_OR_RETURN(size_t n, target_->ReadAt(offset, dst.first(prefix)));
          if (f.kind == FaultKind::kTruncatedRead) return n;
          return Injected(f.kind, f.err, What("read", offset));
        }
        default:
          return env_->FailOrStall(f, What("read", offset));
      }
    }
    return target_->ReadAt(offset, dst);
  }

  absl::Status WriteAt(uint64_t offset, absl::Span<const char> src) override {
    if (env_->IsStale(generation_)) return env_->PowerCutError(What("write", offset));
    size_t n = src.size();
    std::optional<Fault> torn;
    if (auto fired = env_->Decide(Op::kWrite, t_->path)) {
      const Fault& f = fired->fault;
      if (f.kind == FaultKind::kStall) {
        RETURN_IF_ERROR(env_->Stall(f, What("write", offset)));
      } else if (f.kind == FaultKind::kTornWrite) {
        n = std::min<uint64_t>(f.prefix.value_or(n == 0 ? 0 : fired->draw % n), n);
        torn = f;
      } else {
        return env_->FailOrStall(f, What("write", offset));
      }
    }
    {
      absl::MutexLock l(&t_->mu);
      // Re-checked under the file's lock: DropUnsyncedData takes that lock after the freeze,
      // so a write either lands before the drop sees the file or is refused.
      if (env_->IsStale(generation_)) return env_->PowerCutError(What("write", offset));
      if (n > 0) {
        RETURN_IF_ERROR(SavePreImage(offset, offset + n));
        absl::Status s = target_->WriteAt(offset, src.first(n));
        // Recorded even when the target failed: some of the bytes may have landed.
        t_->pending.push_back({offset, std::string(src.data(), n), false});
        RETURN_IF_ERROR(s);
      }
    }
    if (torn) {
      env_->Count(FaultKind::kTornWrite);
      return Injected(FaultKind::kTornWrite, torn->err,
                      absl::StrCat(What("write", offset), " (", n, " of ", src.size(),
                                   " bytes written)"));
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (env_->IsStale(generation_)) return env_->PowerCutError(What("sync"));
    if (auto fired = env_->Decide(Op::kSync, t_->path)) {
      const Fault& f = fired->fault;
      if (f.kind == FaultKind::kStall) {
        RETURN_IF_ERROR(env_->Stall(f, What("sync")));
      } else {
        if (f.kind == FaultKind::kSyncLosesData) {
          absl::MutexLock l(&t_->mu);
          if (env_->IsStale(generation_)) return env_->PowerCutError(What("sync"));
          // The kernel marked the dirty pages clean after the failed writeback: they stay
          // readable in the cache, and no later fsync will ever write them.
          for (auto& w : t_->pending) w.lost = true;
        }
        env_->Count(f.kind);
        return Injected(f.kind, f.err, What("sync"));
      }
    }
    absl::MutexLock l(&t_->mu);
    if (env_->IsStale(generation_)) return env_->PowerCutError(What("sync"));
    RETURN_IF_ERROR(target_->Sync());
    CommitLocked();
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() override {
    if (env_->IsStale(generation_)) return env_->PowerCutError(What("size"));
    return target_->Size();
  }
  absl::StatusOr<FileIdentity> Identify() override {
    if (env_->IsStale(generation_)) return env_->PowerCutError(What("identify"));
    return target_->Identify();
  }
  absl::Status StampIdentity() override {
    if (env_->IsStale(generation_)) return env_->PowerCutError(What("stamp identity"));
    return target_->StampIdentity();
  }
  // No descriptor: nothing moves bytes with one (env.h), and a wrapper hands out none.
  int fd() const override { return -1; }

  // io_uring, when the env was made with Options::through_ring: the target prepares the
  // real submission; this wrapper decides the armed faults and applies them to what the
  // caller sees (FinishRead, FinishWritev), and tracks written bytes as WriteAt does.
  bool SupportsRing() const override {
    return env_->through_ring() && target_->SupportsRing();
  }
  void PrepareRead(io_uring_sqe* sqe, uint64_t offset, char* buf, uint32_t len) override {
    target_->PrepareRead(sqe, offset, buf, len);
  }
  int FinishRead(uint64_t offset, char* buf, uint32_t len, int res) override;
  void PrepareWritev(io_uring_sqe* sqe, const struct iovec* iov, unsigned n,
                     uint64_t offset) override;
  int FinishWritev(uint64_t offset, const struct iovec* iov, unsigned n, int res) override;
  const std::string& name() const override { return target_->name(); }

 private:
  // A write prepared for io_uring, until its FinishWritev: the bytes submitted (a torn
  // write's prefix) and the error the caller gets (0: the kernel's result).
  struct RingWrite {
    std::vector<struct iovec> iov;
    int err = 0;
  };
  // The fault and bookkeeping of a write about to be submitted (PrepareWritev); returns
  // how many of its `total` bytes go to the kernel.
  size_t DecideRingWrite(uint64_t offset, const struct iovec* iov, unsigned n, size_t total,
                         RingWrite* w);
  absl::Mutex ring_mu_;
  // Keyed by offset and the caller's iovec (unique while its write is in flight).
  std::map<std::pair<uint64_t, const struct iovec*>, RingWrite> ring_writes_
      ABSL_GUARDED_BY(ring_mu_);

  std::string What(absl::string_view op) const { return absl::StrCat(op, " ", t_->path); }
  std::string What(absl::string_view op, uint64_t offset) const {
    return absl::StrCat(op, " ", t_->path, " at ", offset);
  }

  // Keeps the durable bytes of [begin, end) that are about to be overwritten for the first
  // time since the last sync. Bytes at or above durable_size have no durable version.
  absl::Status SavePreImage(uint64_t begin, uint64_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(t_->mu) {
    end = std::min(end, t_->durable_size);
    if (begin >= end) return absl::OkStatus();
    for (auto [gb, ge] : t_->base.Gaps(begin, end)) {
      std::string bytes(ge - gb, '\0');
      ASSIGN_OR_RETURN(size_t n, target_->ReadAt(gb, absl::MakeSpan(bytes)));
      (void)n;  // past the end of a file shortened behind our back: zeros
      t_->base.Put(gb, std::move(bytes));
    }
    return absl::OkStatus();
  }

  // A successful Sync: every pending write not lost becomes durable.
  void CommitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(t_->mu) {
    const uint64_t old_size = t_->durable_size;
    uint64_t new_size = old_size;
    bool any_lost = false;
    for (const auto& w : t_->pending) {
      if (w.lost) {
        any_lost = true;
      } else {
        new_size = std::max(new_size, w.end());
      }
    }
    if (!any_lost) {
      t_->base.Clear();
      t_->pending.clear();
      t_->durable_size = new_size;
      return;
    }
    // Lost writes all precede the others (a kSyncLosesData Sync marks every pending write),
    // so replaying the kept ones over `base` in order gives the new durable content.
    std::vector<TrackedFile::Write> lost;
    for (auto& w : t_->pending) {
      if (w.lost) {
        lost.push_back(std::move(w));
      } else {
        t_->base.Put(w.offset, std::move(w.data));
      }
    }
    // Lost bytes above the old durable size that the file now covers were never written:
    // a power cut leaves zeros (a hole) there.
    for (const auto& w : lost) {
      for (auto [gb, ge] : t_->base.Gaps(std::max(w.offset, old_size), std::min(w.end(), new_size))) {
        t_->base.Put(gb, std::string(ge - gb, '\0'));
      }
    }
    t_->pending = std::move(lost);
    t_->durable_size = new_size;
  }

  FaultEnv* const env_;
  const std::unique_ptr<File> target_;
  const std::shared_ptr<TrackedFile> t_;
  const uint64_t generation_;
};

int FaultFile::FinishRead(uint64_t offset, char* buf, uint32_t len, int res) {
  res = target_->FinishRead(offset, buf, len, res);
  env_->CountRingResult();
  if (env_->IsStale(generation_)) {
    env_->Count(FaultKind::kPowerCut);
    return -EIO;
  }
  auto fired = env_->Decide(Op::kRead, t_->path);
  if (!fired) return res;
  const Fault& f = fired->fault;
  env_->Count(f.kind);
  if (f.kind == FaultKind::kTruncatedRead && res > 0) {
    // The kernel filled `res` bytes; the caller is told of a prefix of them, as if the
    // file ended there.
    return static_cast<int>(
        std::min<uint64_t>(f.prefix.value_or(fired->draw % static_cast<uint64_t>(res)), res));
  }
  // An error, or a short read (bytes landed in `buf`, then the error): the error.
  return -f.err;
}

size_t FaultFile::DecideRingWrite(uint64_t offset, const struct iovec* iov, unsigned n,
                                  size_t total, RingWrite* w) {
  if (env_->IsStale(generation_)) {
    env_->Count(FaultKind::kPowerCut);
    w->err = EIO;
    return 0;
  }
  size_t keep = total;
  if (auto fired = env_->Decide(Op::kWrite, t_->path)) {
    const Fault& f = fired->fault;
    env_->Count(f.kind);
    w->err = f.err;
    keep = f.kind == FaultKind::kTornWrite
               ? std::min<uint64_t>(f.prefix.value_or(total == 0 ? 0 : fired->draw % total),
                                    total)
               : 0;
  }
  if (keep == 0) return 0;
  absl::MutexLock l(&t_->mu);
  // As WriteAt: the bytes are recorded before they can land, with what they overwrite.
  if (env_->IsStale(generation_)) {
    w->err = EIO;
    return 0;
  }
  if (absl::Status s = SavePreImage(offset, offset + keep); !s.ok()) {
    w->err = ErrnoFromStatus(s) != 0 ? ErrnoFromStatus(s) : EIO;
    return 0;
  }
  std::string bytes;
  bytes.reserve(keep);
  for (unsigned i = 0; i < n && bytes.size() < keep; ++i) {
    const size_t take = std::min(iov[i].iov_len, keep - bytes.size());
    bytes.append(static_cast<const char*>(iov[i].iov_base), take);
    w->iov.push_back({iov[i].iov_base, take});
  }
  t_->pending.push_back({offset, std::move(bytes), false});
  return keep;
}

void FaultFile::PrepareWritev(io_uring_sqe* sqe, const struct iovec* iov, unsigned n,
                              uint64_t offset) {
  size_t total = 0;
  for (unsigned i = 0; i < n; ++i) total += iov[i].iov_len;
  RingWrite w;
  const size_t keep = DecideRingWrite(offset, iov, n, total, &w);
  absl::MutexLock l(&ring_mu_);
  RingWrite& stored = ring_writes_[{offset, iov}] = std::move(w);
  if (keep == 0) {
    io_uring_prep_nop(sqe);  // nothing reaches the file; FinishWritev returns the error
  } else {
    target_->PrepareWritev(sqe, stored.iov.data(), static_cast<unsigned>(stored.iov.size()),
                           offset);
  }
}

int FaultFile::FinishWritev(uint64_t offset, const struct iovec* iov, unsigned n, int res) {
  env_->CountRingResult();
  RingWrite w;
  {
    absl::MutexLock l(&ring_mu_);
    auto it = ring_writes_.find({offset, iov});
    if (it == ring_writes_.end()) return target_->FinishWritev(offset, iov, n, res);
    w = std::move(it->second);
    ring_writes_.erase(it);
  }
  if (!w.iov.empty()) {
    res = target_->FinishWritev(offset, w.iov.data(), static_cast<unsigned>(w.iov.size()), res);
  }
  return w.err != 0 ? -w.err : res;
}

// ---------------------------------------------------------------------------------------
// FaultEnv

FaultEnv::FaultEnv(Env* target, Options options)
    : EnvWrapper(target), options_(std::move(options)), rules_(options_.seed) {}

FaultEnv::~FaultEnv() = default;

absl::Status FaultEnv::ValidateForRing(Op op, const Fault& f) const {
  // Through io_uring a stall would block the channel that reaps it, which a stalled file
  // system does not: the FUSE fault file system (faultinject/fuse) models it.
  if (options_.through_ring && f.kind == FaultKind::kStall &&
      (op == Op::kRead || op == Op::kWrite)) {
    return absl::InvalidArgumentError(
        "a stall of a read or write cannot be armed on a FaultEnv made with through_ring "
        "(it would block the io_uring reaper); use the FUSE fault file system");
  }
  return absl::OkStatus();
}

absl::Status FaultEnv::Validate(Op op, const Fault& f) {
  bool applies = false;
  bool needs_err = true;
  switch (f.kind) {
    case FaultKind::kError: applies = true; break;
    case FaultKind::kStall: applies = true; needs_err = false; break;
    case FaultKind::kTornWrite: applies = op == Op::kWrite; break;
    case FaultKind::kShortRead: applies = op == Op::kRead; break;
    case FaultKind::kTruncatedRead: applies = op == Op::kRead; needs_err = false; break;
    case FaultKind::kSyncLosesData: applies = op == Op::kSync; break;
    case FaultKind::kPowerCut: applies = false; break;
  }
  if (!applies) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fault ", FaultKindName(f.kind), " does not apply to op ", static_cast<int>(op)));
  }
  if (f.err < 0 || (needs_err && f.err == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault ", FaultKindName(f.kind), " needs a positive errno, got ", f.err));
  }
  return absl::OkStatus();
}

absl::Status FaultEnv::FailNext(Op op, int count, Fault fault) {
  RETURN_IF_ERROR(Validate(op, fault));
  RETURN_IF_ERROR(ValidateForRing(op, fault));
  return rules_.FailNext(op, count, std::move(fault));
}

absl::Status FaultEnv::FailOneIn(Op op, uint32_t n, uint64_t seed, Fault fault) {
  RETURN_IF_ERROR(Validate(op, fault));
  RETURN_IF_ERROR(ValidateForRing(op, fault));
  return rules_.FailOneIn(op, n, seed, std::move(fault));
}

void FaultEnv::Clear(Op op) { rules_.Clear(op); }

void FaultEnv::ClearAll() { rules_.ClearAll(); }

absl::Status FaultEnv::FailOrStall(const Fault& fault, absl::string_view what) {
  if (fault.kind == FaultKind::kStall) return Stall(fault, what);
  Count(fault.kind);
  return Injected(fault.kind, fault.err, what);
}

void FaultEnv::Count(FaultKind kind) {
  fired_[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed);
}

absl::Status FaultEnv::Stall(const Fault& fault, absl::string_view what) {
  Count(FaultKind::kStall);
  bool frozen;
  {
    absl::MutexLock l(&mu_);
    // A local class may read FaultEnv's private members; Await evaluates it with mu_ held.
    struct Released {
      const FaultEnv* env;
      uint64_t epoch;
      bool Done() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return env->release_epoch_ != epoch || env->frozen_.load();
      }
    } released{this, release_epoch_};
    ++stalled_;
    mu_.AwaitWithTimeout(absl::Condition(&released, &Released::Done), fault.stall);
    --stalled_;
    frozen = frozen_.load();
  }
  if (frozen) return PowerCutError(what);
  if (fault.err != 0) return Injected(FaultKind::kStall, fault.err, what);
  return absl::OkStatus();
}

void FaultEnv::ReleaseStalls() {
  absl::MutexLock l(&mu_);
  ++release_epoch_;
}

int FaultEnv::stalled() const {
  absl::MutexLock l(&mu_);
  return stalled_;
}

bool FaultEnv::WaitForStalled(int n, absl::Duration timeout) const {
  struct Enough {
    const FaultEnv* env;
    int n;
    bool Done() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return env->stalled_ >= n; }
  } enough{this, n};
  absl::MutexLock l(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&enough, &Enough::Done), timeout);
}

bool FaultEnv::IsStale(uint64_t generation) const {
  return frozen_.load() || generation != generation_.load();
}

absl::Status FaultEnv::PowerCutError(absl::string_view what) {
  Count(FaultKind::kPowerCut);
  return Injected(FaultKind::kPowerCut, EIO, what);
}

void FaultEnv::SimulatePowerCut() {
  absl::MutexLock l(&mu_);
  frozen_.store(true);
  generation_.fetch_add(1);
  ++release_epoch_;
}

bool FaultEnv::frozen() const { return frozen_.load(); }

void FaultEnv::Restart() {
  absl::MutexLock l(&mu_);
  files_.clear();
  frozen_.store(false);
}

absl::StatusOr<std::unique_ptr<File>> FaultEnv::Wrap(std::unique_ptr<File> file,
                                                     uint64_t generation) {
  // The first handle of a path fixes its durable baseline: what is there now survives.
  ASSIGN_OR_RETURN(uint64_t size, file->Size());
  std::shared_ptr<TrackedFile> tracked;
  {
    absl::MutexLock l(&mu_);
    auto& slot = files_[file->name()];
    if (!slot) slot = std::make_shared<TrackedFile>(file->name(), size);
    tracked = slot;
  }
  return std::unique_ptr<File>(new FaultFile(this, std::move(file), std::move(tracked), generation));
}

absl::StatusOr<std::unique_ptr<File>> FaultEnv::OpenFile(const std::string& path,
                                                         OpenMode mode) {
  const uint64_t generation = generation_.load();
  if (frozen_.load()) return PowerCutError("open " + path);
  if (auto fired = Decide(Op::kOpen, path)) RETURN_IF_ERROR(FailOrStall(fired->fault, "open " + path));
  ASSIGN_OR_RETURN(std::unique_ptr<File> file, target()->OpenFile(path, mode));
  return Wrap(std::move(file), generation);
}

absl::StatusOr<std::unique_ptr<File>> FaultEnv::AdoptFd(int fd, OpenMode mode) {
  const uint64_t generation = generation_.load();
  const std::string what = absl::StrCat("adopt fd ", fd);
  if (frozen_.load()) return PowerCutError(what);
  ASSIGN_OR_RETURN(std::unique_ptr<File> file, target()->AdoptFd(fd, mode));
  // Decided after adopting, so that OnlyFor() can match the path behind the descriptor.
  if (auto fired = Decide(Op::kOpen, file->name())) RETURN_IF_ERROR(FailOrStall(fired->fault, what));
  return Wrap(std::move(file), generation);
}

absl::Status FaultEnv::CreateDir(const std::string& path, mode_t mode) {
  if (frozen_.load()) return PowerCutError("mkdir " + path);
  return target()->CreateDir(path, mode);
}

absl::Status FaultEnv::SyncDir(const std::string& path) {
  if (frozen_.load()) return PowerCutError("sync dir " + path);
  if (auto fired = Decide(Op::kSyncDir, path)) {
    RETURN_IF_ERROR(FailOrStall(fired->fault, "sync dir " + path));
  }
  RETURN_IF_ERROR(target()->SyncDir(path));
  dir_syncs_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<FileIdentity> FaultEnv::IdentifyPath(const std::string& path) {
  if (frozen_.load()) return PowerCutError("stat " + path);
  return target()->IdentifyPath(path);
}

namespace {

// How many bytes of `w` a torn power cut keeps: a cut point chosen uniformly among the
// write's start, every sector boundary inside it, and its end.
uint64_t TornKeep(const TrackedFile::Write& w, uint64_t sector, uint64_t* rng) {
  const uint64_t first = (w.offset / sector + 1) * sector;
  const uint64_t inside = first < w.end() ? (w.end() - 1 - first) / sector + 1 : 0;
  const uint64_t pick = NextRandom(rng) % (inside + 2);
  if (pick == 0) return 0;
  if (pick == inside + 1) return w.data.size();
  return first + (pick - 1) * sector - w.offset;
}

absl::Status Truncate(const TruncateFn& hook, File& file, const std::string& path,
                      uint64_t size) {
  if (hook) return hook(path, size);
  if (file.fd() < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot drop unsynced appends of ", path,
        ": the file has no descriptor; set FaultEnv::Options::truncate"));
  }
  // Test infrastructure: the Env has no Truncate, so this is the one file syscall outside
  // base/env_posix.cc, and it runs only while the FaultEnv is frozen.
  if (::ftruncate(file.fd(), static_cast<off_t>(size)) != 0) {
    return PosixError(errno, absl::StrCat("ftruncate ", path));
  }
  return absl::OkStatus();
}

// Rewrites `path` to its surviving content: everything at or above `durable_size` is
// unsynced, so cut it, then write back what is kept (a gap between kept ranges stays a
// hole of zeros, as on a real file system).
absl::Status WriteBack(Env* target, const TruncateFn& hook, const std::string& path,
                       uint64_t durable_size, const RangeImage& image) {
  ASSIGN_OR_RETURN(std::unique_ptr<File> file, target->OpenFile(path, OpenMode::kReadWrite));
  ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (size > durable_size) RETURN_IF_ERROR(Truncate(hook, *file, path, durable_size));
  for (const auto& [offset, bytes] : image.ranges()) RETURN_IF_ERROR(file->WriteAt(offset, bytes));
  return absl::OkStatus();
}

}  // namespace

absl::Status FaultEnv::DropUnsyncedData(const DropOptions& options) {
  if (!frozen_.load()) {
    return absl::FailedPreconditionError("DropUnsyncedData needs SimulatePowerCut first");
  }
  if (options.sector_size == 0) return absl::InvalidArgumentError("sector_size 0");
  std::vector<std::shared_ptr<TrackedFile>> files;
  {
    absl::MutexLock l(&mu_);
    for (auto& [path, t] : files_) files.push_back(t);  // path order: reproducible draws
  }
  uint64_t rng = options.seed;
  absl::Status first_error;
  for (auto& tp : files) {
    TrackedFile& t = *tp;
    absl::MutexLock l(&t.mu);
    if (t.pending.empty()) continue;
    // What survives: the durable image, plus what the mode keeps of each write in order.
    RangeImage image = t.base;
    uint64_t new_size = t.durable_size;
    for (const auto& w : t.pending) {
      if (w.lost) continue;
      uint64_t keep = 0;
      if (options.mode == DropMode::kKeep) keep = w.data.size();
      if (options.mode == DropMode::kTear) keep = TornKeep(w, options.sector_size, &rng);
      if (keep > 0) {
        image.Put(w.offset, w.data.substr(0, keep));
        new_size = std::max(new_size, w.offset + keep);
      }
      if (options.mode == DropMode::kTear && options.garble && keep < w.data.size()) {
        const uint64_t begin = w.offset + keep;
        const uint64_t end = std::min(w.end(), (begin / options.sector_size + 1) * options.sector_size);
        std::string junk(end - begin, '\0');
        for (char& c : junk) c = static_cast<char>(NextRandom(&rng));
        image.Put(begin, std::move(junk));
        new_size = std::max(new_size, end);
      }
    }
    absl::Status s = WriteBack(target(), options_.truncate, t.path, t.durable_size, image);
    if (!s.ok() && first_error.ok()) first_error = s;
    t.base.Clear();
    t.pending.clear();
    t.durable_size = new_size;
  }
  return first_error;
}

std::vector<std::pair<uint64_t, uint64_t>> FaultEnv::UnsyncedRanges(const std::string& path) const {
  std::shared_ptr<TrackedFile> t;
  {
    absl::MutexLock l(&mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return {};
    t = it->second;
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  {
    absl::MutexLock l(&t->mu);
    for (const auto& w : t->pending) ranges.emplace_back(w.offset, w.end());
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

uint64_t FaultEnv::fired(FaultKind kind) const {
  return fired_[static_cast<int>(kind)].load(std::memory_order_relaxed);
}

uint64_t FaultEnv::dir_syncs() const { return dir_syncs_.load(std::memory_order_relaxed); }

}  // namespace umap::faultinject
