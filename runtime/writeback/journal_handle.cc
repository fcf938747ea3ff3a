#include "runtime/writeback/journal_handle.h"

#include <time.h>

#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/status_macros.h"

namespace umap::runtime {

absl::StatusOr<std::unique_ptr<JournalHandle>> JournalHandle::Open(
    journal::JournalOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<journal::Journal> j, journal::Journal::Open(options));
  // Every reopen keeps this owner epoch, or finds the journal taken over (fenced).
  options.expected_epoch = j->epoch();
  return std::unique_ptr<JournalHandle>(new JournalHandle(std::move(options), std::move(j)));
}

JournalHandle::~JournalHandle() {
  absl::MutexLock l(&mu_);
  if (reported_ && journal_ != nullptr && journal_->poisoned().ok()) EndTrouble();
}

void JournalHandle::SleepBeforeRetry(int attempt) {
  std::this_thread::sleep_for(std::chrono::milliseconds(10 * attempt));
}

absl::Status JournalHandle::Suspend() {
  absl::MutexLock l(&mu_);
  if (suspended_) return absl::OkStatus();
  absl::Status s = journal_ == nullptr ? absl::OkStatus() : journal_->Sync();
  if (!s.ok()) return s;
  journal_.reset();
  suspended_ = true;
  return absl::OkStatus();
}

absl::Status JournalHandle::Resume(Env* env) {
  absl::MutexLock l(&mu_);
  if (!suspended_) return absl::OkStatus();
  if (auto dir = env->IdentifyPath(options_.dir); !dir.ok()) {
    return WithErrno(absl::Status(dir.status().code(),
                                  absl::StrCat("journal directory ", options_.dir,
                                               " cannot be found: ", dir.status().message())),
                     ErrnoFromStatus(dir.status()));
  }
  // Staged images are this runtime's (its cache entries point at them): keep them.
  journal::JournalOptions o = options_;
  o.keep_staged = true;
  ASSIGN_OR_RETURN(journal_, journal::Journal::Open(o));
  suspended_ = false;
  reopens_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status JournalHandle::Closed() const {
  return PosixError(ESTALE, absl::StrCat("journal ", options_.dir, " is closed for a checkpoint"));
}

bool JournalHandle::HealedSinceReopen() const {
  const uint64_t at = reopened_in_trouble_us_.load(std::memory_order_relaxed);
  return at != 0 && MonotonicMicros() - at >= kHealthyMicros;
}

absl::Status JournalHandle::ReopenIfPoisoned() {
  {
    absl::ReaderMutexLock l(&mu_);
    if (suspended_) return Closed();
    if (journal_ != nullptr && journal_->poisoned().ok() && !HealedSinceReopen()) {
      return absl::OkStatus();
    }
  }
  absl::MutexLock l(&mu_);
  if (suspended_) return Closed();
  if (journal_ != nullptr && journal_->poisoned().ok()) {
    if (HealedSinceReopen()) EndTrouble();
    return absl::OkStatus();
  }
  if (journal_ != nullptr) NoteWriteError(journal_->poisoned());
  // Never write again to a journal that saw a write error: close it, open it again, which
  // recovers from what reached the disk (RocksDB point-in-time recovery). Staged records are
  // kept: this runtime's cache still refers to them.
  journal_.reset();
  journal::JournalOptions o = options_;
  o.keep_staged = true;
  auto j = journal::Journal::Open(o);
  if (!j.ok()) {
    // Keep the journal readable: a miss on a staged block, or on one whose committed version
    // is not applied yet, reads it from here, and a read that fails is a SIGBUS. A read-only
    // open writes nothing, so it works where the writable one failed for lack of space; it is
    // poisoned, so the next Run tries the writable reopen again.
    o.read_only = true;
    auto r = journal::Journal::Open(o);
    if (r.ok()) {
      journal_ = std::move(*r);
      reopens_.fetch_add(1, std::memory_order_release);
    }
    if (trouble_since_us_ == 0) trouble_since_us_ = MonotonicMicros();
    SayAttemptFailed(r.ok() ? j.status() : r.status(),
                     r.ok() ? Attempt::kReadOnlyKept : Attempt::kUnreadable);
    return j.status();
  }
  journal_ = std::move(*j);
  reopens_.fetch_add(1, std::memory_order_release);
  reopened_in_trouble_us_.store(MonotonicMicros(), std::memory_order_relaxed);
  return absl::OkStatus();
}

void JournalHandle::NoteWriteError(const absl::Status& why) {
  if (trouble_since_us_ == 0) {
    trouble_since_us_ = MonotonicMicros();
    UMAP_LOG(kWarn, "reopening journal ", options_.dir, " after: ", why.ToString());
    return;
  }
  // A read-only open after a failed attempt is poisoned too: that attempt is counted.
  if (reopened_in_trouble_us_.load(std::memory_order_relaxed) == 0) return;
  // Reopened, and written into a new error before it had gone kHealthyMicros without one
  // (a nearly full disk): another failed attempt of the same spell, not a new spell.
  reopened_in_trouble_us_.store(0, std::memory_order_relaxed);
  SayAttemptFailed(why, Attempt::kRefilled);
}

void JournalHandle::SayAttemptFailed(const absl::Status& why, Attempt how) {
  const uint64_t now = MonotonicMicros();
  ++failed_attempts_;
  if (!reported_) {
    reported_ = true;
    last_said_us_ = now;
    last_errno_ = ErrnoFromStatus(why);
    const char* state = how == Attempt::kReadOnlyKept ? "read-only until it can (blocks in "
                                                        "it stay readable)"
                        : how == Attempt::kRefilled   ? "and each reopen fills it again at "
                                                        "once (blocks in it stay readable)"
                                                      : "and cannot even be read";
    UMAP_LOG(kError, "journal ", options_.dir, " cannot be written (", why.message(), "), ",
             state,
             ". It is tried again every 100 ms. Meanwhile umsync and uunmap fail with that "
             "error and keep their blocks dirty (nothing acknowledged is lost); dirty blocks "
             "cannot be spilled or written back, so a page fault that needs a cache block "
             "waits up to ",
             kFillWaitSeconds,
             " s for one, then its thread gets SIGBUS. Make "
             "room on the journal's disk (or fix it), or umsync less data at a time");
    return;
  }
  // Another cause (the file system answers again, and says the journal was taken over;
  // the disk is full after it was unreachable) is news: said at once.
  const int err = ErrnoFromStatus(why);
  if (err == last_errno_ && now - last_said_us_ < kSayEveryMicros) return;
  last_said_us_ = now;
  if (err != last_errno_) {
    last_errno_ = err;
    UMAP_LOG(kError, "journal ", options_.dir, " cannot be written, now: ", why.message());
    return;
  }
  UMAP_LOG(kWarn, "journal ", options_.dir, " still cannot be written after ",
           (now - trouble_since_us_) / 1'000'000, " s (", failed_attempts_,
           " attempts): ", why.message());
}

void JournalHandle::EndTrouble() {
  if (reported_) {
    UMAP_LOG(kWarn, "journal ", options_.dir, " is written again after ",
             (MonotonicMicros() - trouble_since_us_) / 1'000'000, " s (", failed_attempts_,
             " failed attempts)");
  }
  trouble_since_us_ = 0;
  reported_ = false;
  reopened_in_trouble_us_.store(0, std::memory_order_relaxed);
  failed_attempts_ = 0;
}

}  // namespace umap::runtime
