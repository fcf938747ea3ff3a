#include "runtime/writeback/coherence.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/round.h"
#include "base/status_macros.h"
#include "runtime/fault/uffd.h"
#include "runtime/writeback/write_refusals.h"

namespace umap::runtime {
namespace {


// errno values with which a file system says it has no byte-range locks at all, or the file
// cannot be opened again for them (a descriptor received from another user).
bool NoLocksHere(int err) {
  return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL || err == EACCES ||
         err == EPERM;
}

// A lock in Umap's lock space (Coherence::kLockSpace), told as the file bytes it stands for.
LockConflict InFile(LockConflict c) {
  if (c.start >= Coherence::kLockSpace) c.start -= Coherence::kLockSpace;
  return c;
}

std::string RangeText(uint64_t start, uint64_t end) {
  return absl::StrCat("[", start, ", ", end, ")");
}

// Sorted, merged, block-aligned copies of the declared ranges; EINVAL for an empty one or
// one outside [map_start, map_end).
absl::StatusOr<std::vector<umap_range>> LockRanges(const std::vector<umap_range>& asked,
                                                   uint64_t map_start, uint64_t map_end,
                                                   uint64_t block_size, const std::string& file) {
  std::vector<umap_range> in = asked;
  if (in.empty()) in.push_back({map_start, map_end - map_start});
  std::vector<umap_range> out;
  for (const umap_range& r : in) {
    if (r.length == 0 || r.offset < map_start || r.offset + r.length > map_end ||
        r.offset + r.length < r.offset) {
      return PosixError(EINVAL, absl::StrCat("umap: ", file, ": write range ",
                                             RangeText(r.offset, r.offset + r.length),
                                             " is empty or outside the mapped bytes ",
                                             RangeText(map_start, map_end)));
    }
    out.push_back({RoundDown(r.offset, block_size),
                   RoundUp(r.offset + r.length, block_size) - RoundDown(r.offset, block_size)});
  }
  std::sort(out.begin(), out.end(),
            [](const umap_range& a, const umap_range& b) { return a.offset < b.offset; });
  std::vector<umap_range> merged;
  for (const umap_range& r : out) {
    if (!merged.empty() && merged.back().offset + merged.back().length >= r.offset) {
      const uint64_t end = std::max(merged.back().offset + merged.back().length, r.offset + r.length);
      merged.back().length = end - merged.back().offset;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

// An owner record's value: "pid=P host=H uid=U start=T ranges=a-b,c-d".
std::string RecordValue(const std::vector<umap_range>& ranges) {
  std::vector<std::string> parts;
  for (const umap_range& r : ranges) {
    if (parts.size() == 32) {
      parts.push_back("...");
      break;
    }
    parts.push_back(absl::StrCat(r.offset, "-", r.offset + r.length));
  }
  return absl::StrCat("pid=", ::getpid(), " host=", HostName(), " uid=", ::getuid(),
                      " start=", ProcessStartTicks(::getpid()),
                      " ranges=", absl::StrJoin(parts, ","));
}

struct OwnerRecord {
  std::string host;
  pid_t pid = 0;
  uint64_t uid = 0, start = 0;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [a, b)
  bool partial = false;                               // "..." ended the list
};

OwnerRecord ParseRecord(const std::string& value) {
  OwnerRecord r;
  for (absl::string_view field : absl::StrSplit(value, ' ', absl::SkipEmpty())) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos) continue;
    const absl::string_view key = field.substr(0, eq), v = field.substr(eq + 1);
    if (key == "host") r.host = std::string(v);
    if (key == "pid") absl::SimpleAtoi(v, &r.pid);
    if (key == "uid") absl::SimpleAtoi(v, &r.uid);
    if (key == "start") absl::SimpleAtoi(v, &r.start);
    if (key != "ranges") continue;
    for (absl::string_view range : absl::StrSplit(v, ',', absl::SkipEmpty())) {
      if (range == "...") r.partial = true;
      std::pair<absl::string_view, absl::string_view> ab = absl::StrSplit(range, '-');
      uint64_t a = 0, b = 0;
      if (absl::SimpleAtoi(ab.first, &a) && absl::SimpleAtoi(ab.second, &b)) r.ranges.push_back({a, b});
    }
  }
  return r;
}

// A record of a process of this host that is gone (or whose pid now names another process).
bool LocalAndDead(const OwnerRecord& r) {
  if (r.host != HostName() || r.pid <= 0) return false;
  if (::kill(r.pid, 0) != 0 && errno == ESRCH) return true;
  return r.start != 0 && ProcessStartTicks(r.pid) != r.start;
}

}  // namespace

umap_coherence Coherence::Resolve(umap_coherence asked, umap_coherence runtime_default,
                                  bool prot_write) {
  if (asked != UMAP_COHERENCE_AUTO) return asked;
  if (runtime_default != UMAP_COHERENCE_AUTO) return runtime_default;
  return prot_write ? UMAP_COHERENCE_PARTITIONED_WRITE : UMAP_COHERENCE_READ_ONLY;
}

const char* Coherence::Name(umap_coherence mode) {
  switch (mode) {
    case UMAP_COHERENCE_AUTO: return "auto";
    case UMAP_COHERENCE_READ_ONLY: return "read-only";
    case UMAP_COHERENCE_PARTITIONED_WRITE: return "partitioned-write";
    case UMAP_COHERENCE_SHARED_WRITE: return "shared-write";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Coherence>> Coherence::Establish(
    umap_coherence mode, bool auto_mode, int fd, const std::string& file, uint64_t map_start,
    uint64_t map_end, uint64_t block_size, const std::vector<umap_range>& write_ranges) {
  std::unique_ptr<Coherence> c(new Coherence(mode, file, map_start, map_end, block_size));
  if (mode == UMAP_COHERENCE_PARTITIONED_WRITE) {
    ASSIGN_OR_RETURN(c->locked_, LockRanges(write_ranges, map_start, map_end, block_size, file));
    absl::Status s = c->TakeLocks(fd);
    if (!s.ok() && auto_mode && NoLocksHere(ErrnoFromStatus(s))) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) {
        UMAP_LOG(kWarn, "umap: ", file, ": no byte-range locks for it (",
                 s.message(), "): the mapping takes no lock (shared-write), nothing stops "
                 "another writer of it (logged once per process; docs/consistency.md)");
      }
      c->mode_ = UMAP_COHERENCE_SHARED_WRITE;
      c->locked_.clear();
    } else if (!s.ok()) {
      return s;
    }
  }
  if (c->mode_ == UMAP_COHERENCE_SHARED_WRITE && !auto_mode) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      UMAP_LOG(kWarn, "umap: ", file, " is mapped shared-write: no lock stops another writer "
               "of the same blocks, and concurrent writers overwrite each other's blocks "
               "(UNSAFE; logged once per process; docs/consistency.md)");
    }
  }
  c->WarnIfOthersWrite(fd);
  return c;
}

absl::Status Coherence::TakeLocks(int fd) {
  ASSIGN_OR_RETURN(locks_, OfdLockFile::Reopen(fd, /*write=*/true));
  RETURN_IF_ERROR(LockHeldRanges());
  ASSIGN_OR_RETURN(probe_, OfdLockFile::Reopen(fd, /*write=*/false));
  return absl::OkStatus();
}

void Coherence::ReleaseForCheckpoint() {
  if (locks_ == nullptr) return;
  {
    absl::MutexLock l(&check_mu_);
    last_held_.reset();  // the next write-back tests the locks the resume took again
  }
  if (!record_id_.empty()) locks_->RemoveOwnerRecord(record_id_).IgnoreError();
  record_id_.clear();
  if (absl::Status s = locks_->Unlock(0, 0); !s.ok()) {
    UMAP_LOG(kWarn, "umap: ", file_, ": releasing the partitioned-write locks for a checkpoint: ",
             s.ToString());
  }
}

absl::Status Coherence::RelockAfterCheckpoint() {
  if (locks_ == nullptr) return absl::OkStatus();
  return LockHeldRanges();
}

absl::Status Coherence::LockHeldRanges() {
  for (const umap_range& r : locked_) {
    absl::StatusOr<std::optional<LockConflict>> conflict =
        locks_->TryLock(kLockSpace + r.offset, r.length, /*exclusive=*/true);
    if (!conflict.ok() || conflict->has_value()) {
      absl::Status s = conflict.ok()
                           ? PosixError(EBUSY, absl::StrCat(
                                 "umap: ", file_, ": cannot map bytes ",
                                 RangeText(r.offset, r.offset + r.length),
                                 " for partitioned-write: ", InFile(**conflict).Describe(),
                                 " is held by ", Holder(*locks_, **conflict),
                                 " (one writer per block: docs/consistency.md)"))
                           : conflict.status();
      locks_->Unlock(0, 0).IgnoreError();  // what was taken; closing would do it too
      UMAP_LOG(kError, s.message());  // the caller of the C API sees only the errno
      return s;
    }
  }
  static std::atomic<uint64_t> seq{0};
  const std::string id = absl::StrCat(HostName(), ".", ::getpid(), ".", seq.fetch_add(1));
  if (absl::Status s = locks_->SetOwnerRecord(id, RecordValue(locked_)); s.ok()) {
    record_id_ = id;
  } else {
    // Locking works without it; only a refused writer's message is poorer.
    UMAP_LOG(kDebug, "no owner record for ", file_, ": ", s.ToString());
  }
  return absl::OkStatus();
}

std::string Coherence::Holder(OfdLockFile& file, const LockConflict& lock) const {
  const LockConflict c = InFile(lock);
  std::vector<std::string> names;
  if (c.pid > 0) names.push_back(absl::StrCat("pid ", c.pid, " (as the file system reports it)"));
  const uint64_t c_end = c.length == 0 ? ~0ull : c.start + c.length;
  for (const auto& [id, value] : file.OwnerRecords()) {
    if (id == record_id_) continue;
    const OwnerRecord r = ParseRecord(value);
    const bool overlaps =
        r.partial || std::any_of(r.ranges.begin(), r.ranges.end(), [&](const auto& ab) {
          return ab.first < c_end && c.start < ab.second;
        });
    if (!overlaps || LocalAndDead(r)) continue;
    names.push_back(absl::StrCat("pid ", r.pid, " on ", r.host, " (uid ", r.uid,
                                 "; its owner record user.umap.owner.", id, ")"));
  }
  if (names.empty()) {
    return "a holder nothing names (an open file description lock has no pid, and no owner "
           "record of it is on the file: not a Umap writer, or a file system without user "
           "extended attributes)";
  }
  return absl::StrJoin(names, ", or ");
}

void Coherence::WarnIfOthersWrite(int fd) {
  std::unique_ptr<OfdLockFile> own;
  OfdLockFile* file = locks_.get();  // our own locks never conflict with a test through it
  if (file == nullptr) {
    absl::StatusOr<std::unique_ptr<OfdLockFile>> f = OfdLockFile::Reopen(fd, /*write=*/false);
    if (!f.ok()) return;  // a warning only: a mapping that cannot reopen its file still works
    own = *std::move(f);
    file = own.get();
  }
  absl::StatusOr<std::optional<LockConflict>> c =
      file->Test(kLockSpace + map_start_, map_end_ - map_start_, /*exclusive=*/false);
  if (!c.ok() || !c->has_value()) return;
  UMAP_LOG(kWarn, "umap: ", file_, " is being written by another writer: ",
           InFile(**c).Describe(),
           " is held by ", Holder(*file, **c), ". This ", Name(mode_),
           " mapping's view of those bytes may be stale: it reads them when it first faults "
           "on them and never sees later writes to blocks it holds (docs/consistency.md)");
}

absl::Status Coherence::ProtectRange(char* base, uint64_t from, uint64_t to) {
  if (from >= to) return absl::OkStatus();
  char* p = base + (from - map_start_);
  if (int err = ProtectPages(p, to - from, PROT_READ)) {
    return PosixError(err, absl::StrCat("mprotect of the read-only part of the mapping of ", file_));
  }
  ASSIGN_OR_RETURN(int h, WriteRefusals::Register(p, to - from, from, file_,
                                                  mode_ == UMAP_COHERENCE_READ_ONLY
                                                      ? WriteRefusals::Reason::kReadOnly
                                                      : WriteRefusals::Reason::kOutsideRanges));
  refusals_.push_back(h);
  return absl::OkStatus();
}

absl::Status Coherence::Protect(char* base, size_t region_length) {
  const uint64_t end = map_start_ + region_length;
  if (mode_ == UMAP_COHERENCE_READ_ONLY) return ProtectRange(base, map_start_, end);
  if (mode_ != UMAP_COHERENCE_PARTITIONED_WRITE) return absl::OkStatus();
  uint64_t at = map_start_;
  for (const umap_range& r : locked_) {
    RETURN_IF_ERROR(ProtectRange(base, at, r.offset));
    at = r.offset + r.length;
  }
  return ProtectRange(base, at, end);
}

std::vector<uint64_t> Coherence::ProtectionBoundaries(size_t region_length) const {
  std::vector<uint64_t> out;
  if (mode_ != UMAP_COHERENCE_PARTITIONED_WRITE) return out;
  const uint64_t end = map_start_ + region_length;
  for (const umap_range& r : locked_) {
    for (uint64_t at : {r.offset, r.offset + r.length}) {
      if (at > map_start_ && at < end) out.push_back((at - map_start_) / block_size_);
    }
  }
  return out;  // ascending: the ranges are sorted and disjoint
}

absl::Status Coherence::CheckHeld() {
  absl::MutexLock l(&check_mu_);
  if (!lost_status_.ok()) return lost_status_;
  const auto start = std::chrono::steady_clock::now();
  if (last_held_.has_value() && start - *last_held_ < kFresh) return absl::OkStatus();
  for (const umap_range& r : locked_) {
    ASSIGN_OR_RETURN(LockCheck check,
                     CheckWriteLock(*locks_, *probe_, kLockSpace + r.offset, r.length));
    if (check.held) continue;
    lost_status_ = PosixError(
        ENOLCK,
        absl::StrCat("umap: ", file_, ": this partitioned-write mapping lost its lock on bytes ",
                     RangeText(r.offset, r.offset + r.length),
                     check.other.has_value()
                         ? absl::StrCat(" (now ", InFile(*check.other).Describe(), " is held by ",
                                        Holder(*locks_, *check.other), ")")
                         : std::string(" (the file system dropped it: this node lost contact "
                                       "with the file system, or the lock was cleared)"),
                     "; to keep another writer's blocks intact it writes nothing more to the "
                     "file: its unsynced changes stay in memory until it is unmapped"));
    UMAP_LOG(kError, lost_status_.message());
    return lost_status_;
  }
  last_held_ = start;
  return absl::OkStatus();
}

Coherence::~Coherence() {
  for (int h : refusals_) WriteRefusals::Unregister(h);
  if (locks_ != nullptr && !record_id_.empty()) {
    // Best effort: a stale record is ignored by readers once no lock stands behind it.
    locks_->RemoveOwnerRecord(record_id_).IgnoreError();
  }
}

}  // namespace umap::runtime
