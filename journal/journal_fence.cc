#include "journal/journal_fence.h"

#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/clock.h"
#include "base/crc32c.h"
#include "base/dir_lock.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "journal/lock_holder.h"
#include "umap/env.h"

namespace umap::journal {
namespace {

constexpr char kMagic[] = "umap-journal-owner 1";
constexpr size_t kRecordBytes = 4096;  // one O_DIRECT-aligned read holds the whole line

uint64_t WallMicros() {
  struct timeval tv;
  ::gettimeofday(&tv, nullptr);
  return static_cast<uint64_t>(tv.tv_sec) * 1000000 + static_cast<uint64_t>(tv.tv_usec);
}

OwnerRecord ThisProcess(uint64_t epoch) {
  OwnerRecord r;
  r.epoch = epoch;
  r.open = true;
  r.pid = ::getpid();
  r.start_ticks = ProcessStartTicks(::getpid());
  r.uid = ::getuid();
  r.host = HostName();
  for (char& c : r.host) {
    if (c == ' ' || c == '=' || c == '\n') c = '_';
  }
  r.since_us = WallMicros();
  return r;
}

// The record as UMAP-OWNER holds it now: nullopt for an empty (new) file.
absl::StatusOr<std::optional<OwnerRecord>> ReadRecord(OfdLockFile& f) {
  // O_DIRECT needs an aligned buffer; the fault-free path allocates once per check.
  void* mem = nullptr;
  if (::posix_memalign(&mem, kRecordBytes, kRecordBytes) != 0) {
    return PosixError(ENOMEM, "buffer for the journal owner record");
  }
  std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(mem), &std::free);
  ASSIGN_OR_RETURN(size_t n, f.ReadFresh(0, absl::MakeSpan(buf.get(), kRecordBytes)));
  if (n == 0) return std::optional<OwnerRecord>();
  const std::string text(buf.get(), n);
  ASSIGN_OR_RETURN(OwnerRecord r, OwnerRecord::Decode(text.substr(0, text.find('\n'))));
  return std::optional<OwnerRecord>(std::move(r));
}

absl::Status WriteRecord(OfdLockFile& f, const OwnerRecord& r) {
  const std::string line = r.Encode() + "\n";
  return f.WriteDurably(0, absl::MakeConstSpan(line.data(), line.size()));
}

std::string Describe(const absl::StatusOr<std::optional<OwnerRecord>>& r) {
  if (!r.ok()) return absl::StrCat("an owner its record cannot tell (", r.status().message(), ")");
  if (!r->has_value()) return "an owner that wrote no record yet";
  return (*r)->Describe();
}

}  // namespace

std::string OwnerRecord::Encode() const {
  const std::string body = absl::StrCat(kMagic, " epoch=", epoch, " state=", open ? "open" : "closed",
                                        " pid=", pid, " start=", start_ticks, " uid=", uid,
                                        " host=", host, " since=", since_us);
  return absl::StrCat(body, absl::StrFormat(" crc=%08x", crc32c::Value(body.data(), body.size())));
}

absl::StatusOr<OwnerRecord> OwnerRecord::Decode(const std::string& text) {
  const size_t at = text.rfind(" crc=");
  uint32_t crc = 0;
  if (text.rfind(kMagic, 0) != 0 || at == std::string::npos ||
      !absl::SimpleHexAtoi(text.substr(at + 5), &crc) ||
      crc != crc32c::Value(text.data(), at)) {
    return absl::DataLossError(absl::StrCat("damaged journal owner record '", text.substr(0, 200), "'"));
  }
  OwnerRecord r;
  for (absl::string_view field : absl::StrSplit(text.substr(0, at), ' ', absl::SkipEmpty())) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos) continue;
    const absl::string_view k = field.substr(0, eq), v = field.substr(eq + 1);
    bool ok = true;
    if (k == "epoch") ok = absl::SimpleAtoi(v, &r.epoch);
    if (k == "state") r.open = v == "open";
    if (k == "pid") ok = absl::SimpleAtoi(v, &r.pid);
    if (k == "start") ok = absl::SimpleAtoi(v, &r.start_ticks);
    if (k == "uid") ok = absl::SimpleAtoi(v, &r.uid);
    if (k == "host") r.host = std::string(v);
    if (k == "since") ok = absl::SimpleAtoi(v, &r.since_us);
    if (!ok) return absl::DataLossError(absl::StrCat("journal owner record: bad ", k));
  }
  return r;
}

std::string OwnerRecord::Describe() const {
  return absl::StrCat("pid ", pid, " on ", host, " (uid ", uid, "), epoch ", epoch);
}

namespace {

// The directory's own lock (base/dir_lock.h): null where the file system keeps none.
absl::StatusOr<std::unique_ptr<DirLock>> LockDirectory(const std::string& dir,
                                                       uint64_t expected_epoch) {
  absl::StatusOr<std::unique_ptr<DirLock>> lock = DirLock::TryLock(dir);
  if (lock.ok()) return lock;
  const int err = ErrnoFromStatus(lock.status());
  if (DirLock::Unsupported(err)) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      UMAP_LOG(kWarn, "journal ", dir, ": the file system locks no directories (",
               lock.status().message(), "): a live owner whose ", JournalFence::kFileName,
               " was deleted cannot be seen by the next one");
    }
    return std::unique_ptr<DirLock>();
  }
  if (err != EBUSY) return lock.status();
  // Name the holder by its owner record when there is one to read (never created here),
  // else by the pid /proc/locks shows for the directory's lock.
  std::string holder = "another process (not shown in /proc/locks: on another node?)";
  if (absl::StatusOr<FileIdentity> id = Env::Default()->IdentifyPath(dir); id.ok()) {
    if (pid_t pid = FlockHolder(id->device, id->inode); pid > 0) {
      holder = absl::StrCat("process ", pid);
    }
  }
  absl::StatusOr<std::unique_ptr<OfdLockFile>> f =
      OfdLockFile::Open(absl::StrCat(dir, "/", JournalFence::kFileName), /*create=*/false,
                        /*direct=*/true);
  if (f.ok()) {
    absl::StatusOr<std::optional<OwnerRecord>> rec = ReadRecord(**f);
    if (rec.ok() && rec->has_value()) holder = (*rec)->Describe();
  }
  if (expected_epoch != 0) {
    return WithErrno(absl::FailedPreconditionError(absl::StrCat(
                         "journal ", dir, " was taken over by ", holder,
                         ", which holds the directory's lock; this process (epoch ", expected_epoch,
                         ") writes nothing more into it or its files")),
                     ESTALE);
  }
  return WithErrno(absl::UnavailableError(absl::StrCat(
                       "journal ", dir, " is in use by ", holder, " (it holds the lock of ", dir,
                       " itself, which no file deleted in it releases); stop that process or "
                       "wait for it to exit")),
                   EBUSY);
}

}  // namespace

absl::StatusOr<std::unique_ptr<JournalFence>> JournalFence::Acquire(const std::string& dir,
                                                                    uint64_t expected_epoch) {
  const std::string path = absl::StrCat(dir, "/", kFileName);
  // First the directory's own lock: a live owner keeps it whatever was deleted inside (its
  // UMAP-OWNER, RocksDB's LOCK), and nothing is created or written here before it is held.
  ASSIGN_OR_RETURN(std::unique_ptr<DirLock> dir_lock, LockDirectory(dir, expected_epoch));
  ASSIGN_OR_RETURN(std::unique_ptr<OfdLockFile> owner,
                   OfdLockFile::Open(path, /*create=*/true, /*direct=*/true));
  absl::StatusOr<std::optional<LockConflict>> held = owner->TryLock(0, 1, /*exclusive=*/true);
  if (!held.ok()) {
    return PosixError(ErrnoFromStatus(held.status()),
                      absl::StrCat("journal ", dir, ": cannot take the owner lock on ", path,
                                   " (", held.status().message(),
                                   "): a journal needs a file system with byte-range locks "
                                   "(docs/operations.md §1)"));
  }
  const absl::StatusOr<std::optional<OwnerRecord>> prev = ReadRecord(*owner);
  if (held->has_value()) {
    if (expected_epoch != 0) {
      return WithErrno(absl::FailedPreconditionError(absl::StrCat(
                           "journal ", dir, " was taken over by ", Describe(prev),
                           ", which holds its owner lock; this process (epoch ", expected_epoch,
                           ") writes nothing more into it or its files")),
                       ESTALE);
    }
    return WithErrno(absl::UnavailableError(absl::StrCat(
                         "journal ", dir, " is in use by ", Describe(prev), " (it holds ", path,
                         "'s lock); stop that process or wait for it to exit")),
                     EBUSY);
  }
  if (!prev.ok() && !absl::IsDataLoss(prev.status())) return prev.status();
  // RocksDB's LOCK, held by a live process whose UMAP-OWNER was deleted (on a file system
  // whose directory locks do not reach the other nodes): not ours, so nothing is written.
  if (pid_t pid = 0; LockIsHeld(absl::StrCat(dir, "/LOCK"), &pid)) {
    return WithErrno(absl::UnavailableError(absl::StrCat(
                         "journal ", dir, " is in use by ",
                         pid > 0 ? absl::StrCat("process ", pid) : std::string("another process"),
                         " (it holds ", dir, "/LOCK, though ", path,
                         " names no live owner); stop that process or wait for it to exit")),
                     EBUSY);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<OfdLockFile> probe,
                   OfdLockFile::Open(path, /*create=*/false, /*direct=*/false));
  OwnerRecord mine;
  if (expected_epoch != 0) {
    // A reopen of the journal this process owns: only if nobody took it over meanwhile.
    // Every other owner's open writes a later epoch, so the epoch alone tells. The process
    // may look different now (restored by CRIU: a new start time, perhaps another host),
    // and the record takes its new identity.
    mine = ThisProcess(expected_epoch);
    if (!prev.ok() || !prev->has_value() || (*prev)->epoch != expected_epoch) {
      return WithErrno(absl::FailedPreconditionError(absl::StrCat(
                           "journal ", dir, " was taken over by ", Describe(prev),
                           "; this process (epoch ", expected_epoch,
                           ") writes nothing more into it or its files")),
                       ESTALE);
    }
  } else {
    const uint64_t last = prev.ok() && prev->has_value() ? (*prev)->epoch : 0;
    mine = ThisProcess(last + 1);
    if (!prev.ok()) {
      UMAP_LOG(kWarn, "journal ", dir, ": ", prev.status().message(), "; taking it over as epoch ",
               mine.epoch);
    } else if (prev->has_value() && (*prev)->open) {
      UMAP_LOG(kWarn, "journal ", dir, ": taking over from ", (*prev)->Describe(),
               ", which did not close it (killed, crashed, or cut off from the file system); "
               "this process is epoch ", mine.epoch, ", and the former owner is fenced");
    }
  }
  // Durable before anything else is written into the directory: a former owner that comes
  // back finds it at its next check.
  RETURN_IF_ERROR(WriteRecord(*owner, mine));
  return std::unique_ptr<JournalFence>(new JournalFence(dir, std::move(dir_lock), std::move(owner),
                                                        std::move(probe), std::move(mine)));
}

JournalFence::~JournalFence() = default;

absl::Status JournalFence::Fence(const std::string& why) {
  fenced_status_ = WithErrno(
      absl::FailedPreconditionError(absl::StrCat(
          "journal ", dir_, " is no longer this process's (", mine_.Describe(), "): ", why,
          ". The job was restarted elsewhere or another process took the journal over; to "
          "protect it, this process writes nothing more into the journal or its files, and "
          "its unsynced changes are lost: end it (docs/operations.md §4)")),
      ESTALE);
  fenced_.store(true, std::memory_order_release);
  UMAP_LOG(kError, fenced_status_.message());
  return fenced_status_;
}

absl::Status JournalFence::Check() {
  absl::MutexLock l(&mu_);
  if (!fenced_status_.ok()) return fenced_status_;
  ASSIGN_OR_RETURN(LockCheck lock, CheckWriteLock(*owner_, *probe_, 0, 1));
  const absl::StatusOr<std::optional<OwnerRecord>> rec = ReadRecord(*owner_);
  const bool record_changed =
      rec.ok() && (!rec->has_value() || !(*rec)->SameOwner(mine_));
  if (!lock.held) {
    return Fence(absl::StrCat(
        lock.other.has_value() ? "another process holds its owner lock now"
                               : "the file system dropped its owner lock (this node lost "
                                 "contact with the file system, or the lock was cleared)",
        record_changed ? absl::StrCat("; the owner record names ", Describe(rec)) : ""));
  }
  if (absl::IsDataLoss(rec.status())) return Fence(std::string(rec.status().message()));
  if (!rec.ok()) return rec.status();  // cannot tell now: neither fenced nor checked
  if (record_changed) return Fence(absl::StrCat("the owner record names ", Describe(rec)));
  // The lock and the record read above are those of the file this process opened. Deleted
  // or replaced, it proves nothing: another process may own a new one now.
  ASSIGN_OR_RETURN(const bool named, owner_->PathNamesThisFile(absl::StrCat(dir_, "/", kFileName)));
  if (!named) {
    return Fence(absl::StrCat(dir_, "/", kFileName,
                              " was deleted or replaced: its lock and "
                              "record no longer prove that this process owns the journal"));
  }
  last_ok_us_.store(MonotonicMicros(), std::memory_order_release);
  return absl::OkStatus();
}

absl::Status JournalFence::CheckFresh() {
  if (!fenced() &&
      MonotonicMicros() - last_ok_us_.load(std::memory_order_acquire) < kFreshMicros) {
    return absl::OkStatus();
  }
  return Check();
}

void JournalFence::Release() {
  if (fenced()) return;
  OwnerRecord closed = mine_;
  closed.open = false;
  if (absl::Status s = WriteRecord(*owner_, closed); !s.ok()) {
    // Only the next owner's log line depends on it ("taking over from ...").
    UMAP_LOG(kWarn, "journal ", dir_, ": could not mark its owner record closed: ", s.ToString());
  }
}

void JournalFence::TEST_DropOwnerLock() {
  owner_->Unlock(0, 1).IgnoreError();
  if (dir_lock_ != nullptr) dir_lock_->TEST_Release();
}

}  // namespace umap::journal
