// JournalHandle owns the runtime's Journal and reopens it after a write error poisoned it
// (the journal never writes again after an error until closed, reopened and recovered).
// Writes go through Run, which reopens first; reads of staged or committed images go
// through Read, which uses the poisoned journal as it is (it still serves reads), so that a
// failing reopen fails the next umsync, never a read of the application's own data. When a
// writable reopen fails (a full or failing disk), the journal is opened read-only instead
// (JournalOptions::read_only: writes nothing), which serves reads and counts as poisoned, so
// every Run tries the writable reopen again.
//
// Trouble and its log. A write error starts a spell of trouble: one warning, and a reopen.
// The spell lasts until the journal has gone kHealthyMicros after a reopen without a new
// error; a reopen that succeeds and is poisoned again within that time (a nearly full
// disk: the reopen frees a little, the next writes fill it) is a failed attempt like a
// reopen that fails. So a full disk is said once, with what happens and how long a fault
// waits, then one line every kSayEveryMicros at most, and one line when the journal is
// written again: never a line per attempt, however much each reopen happens to free.
#ifndef UMAP_RUNTIME_WRITEBACK_JOURNAL_HANDLE_H_
#define UMAP_RUNTIME_WRITEBACK_JOURNAL_HANDLE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "journal/journal.h"
#include "umap/env.h"

namespace umap::runtime {

// How long a page fault waits for a cache block (whose dirty contents could not be written
// back or spilled) before its thread gets SIGBUS (Runtime's fill wait).
inline constexpr int kFillWaitSeconds = 60;

class JournalHandle {
 public:
  static absl::StatusOr<std::unique_ptr<JournalHandle>> Open(journal::JournalOptions options);

  // Runs fn(journal) while no reopen can happen. If the journal is poisoned, reopens it
  // first (waiting for running calls to finish); a failed reopen is returned.
  template <typename Fn>
  auto Run(Fn&& fn) -> decltype(fn(std::declval<journal::Journal&>())) {
    if (absl::Status s = ReopenIfPoisoned(); !s.ok()) return s;
    absl::ReaderMutexLock l(&mu_);
    return fn(*journal_);
  }

  // Runs fn(journal) for a read. A poisoned journal still serves reads (journal.h), so this
  // does not reopen it: a journal write error must make writes fail, not reads of staged
  // blocks (a failed read is a SIGBUS). A failed writable reopen leaves a read-only open in
  // its place; only when even that failed, so that no journal is open, does this open one,
  // retrying a few times over ~100 ms so that a transient error does not fail the read.
  template <typename Fn>
  auto Read(Fn&& fn) -> decltype(fn(std::declval<journal::Journal&>())) {
    for (int attempt = 1;; ++attempt) {
      {
        absl::ReaderMutexLock l(&mu_);
        if (journal_ != nullptr) return fn(*journal_);
      }
      absl::Status s = ReopenIfPoisoned();
      if (!s.ok() && attempt >= kReadReopenAttempts) return s;
      if (!s.ok()) SleepBeforeRetry(attempt);
    }
  }

  const std::string& dir() const { return options_.dir; }
  // The journal's figures, without waiting: false when a reopen holds the journal (or none
  // is open). For observers that must never block (the stats publisher).
  bool TryStats(journal::Journal::Stats* out) const {
    if (!mu_.ReaderTryLock()) return false;
    const bool open = journal_ != nullptr;
    if (open) *out = journal_->stats();
    mu_.ReaderUnlock();
    return open;
  }
  // Checkpoint (Runtime::Quiesce): makes everything written durable (Journal::Sync), then
  // closes the journal, releasing RocksDB's LOCK and every descriptor, until Resume. Run and
  // Read fail meanwhile (errno ESTALE), never reopen. REQUIRES: no Run or Read is running.
  absl::Status Suspend();
  // Opens the journal again after Suspend. The directory must still exist (it is not
  // created again: an empty new journal would hide that the old one is gone). Errors: the
  // journal is open elsewhere (EBUSY, naming the pid), missing (ENOENT), or fails to open.
  absl::Status Resume(Env* env);
  bool suspended() const {
    absl::ReaderMutexLock l(&mu_);
    return suspended_;
  }

  // Successful reopens so far: identifies the Journal instance in use. May be read inside
  // Run/Read (no lock).
  uint64_t reopens() const { return reopens_.load(std::memory_order_acquire); }

  // Says that the journal is written again if a spell of trouble was said and the journal
  // is writable now (a program that exits soon after a full disk got room).
  ~JournalHandle();

 private:
  explicit JournalHandle(journal::JournalOptions options,
                         std::unique_ptr<journal::Journal> journal)
      : options_(std::move(options)), journal_(std::move(journal)) {}
  absl::Status ReopenIfPoisoned();
  absl::Status Closed() const;
  // Trouble (the file's head): the poisoning that starts it, or a relapse after a reopen.
  void NoteWriteError(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True once a reopen in trouble has gone kHealthyMicros without a new write error.
  bool HealedSinceReopen() const;
  void EndTrouble() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  enum class Attempt { kReadOnlyKept, kUnreadable, kRefilled };
  // A failed attempt: said in full at the first of a spell of trouble (what happens, for
  // how long, what to do), then one line every kSayEveryMicros at most, or at once when
  // the cause changes.
  void SayAttemptFailed(const absl::Status& why, Attempt how) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr uint64_t kSayEveryMicros = 10'000'000;
  static constexpr uint64_t kHealthyMicros = 5'000'000;
  static constexpr int kReadReopenAttempts = 4;
  static void SleepBeforeRetry(int attempt);

  const journal::JournalOptions options_;
  mutable absl::Mutex mu_;  // readers: journal calls; writer: reopen
  std::unique_ptr<journal::Journal> journal_ ABSL_GUARDED_BY(mu_);
  bool suspended_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> reopens_{0};  // written under mu_ (writer)
  uint64_t trouble_since_us_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no trouble
  bool reported_ ABSL_GUARDED_BY(mu_) = false;           // the trouble was said in full
  // When a writable reopen in trouble succeeded (0: none since the last failure). Read
  // without the lock by Run's fast path; written under mu_ (writer).
  std::atomic<uint64_t> reopened_in_trouble_us_{0};
  uint64_t last_said_us_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failed_attempts_ ABSL_GUARDED_BY(mu_) = 0;
  int last_errno_ ABSL_GUARDED_BY(mu_) = 0;  // of the failure said last
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_WRITEBACK_JOURNAL_HANDLE_H_
