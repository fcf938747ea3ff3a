// RuleBook: what umap-faultfuse knows about its requests: the armed rules, per-op counters
// (requests, replies outstanding and their peak), and the history of every data request
// (op, path, offset, length, O_DIRECT, result) for tests that expect exact I/O.
//
// Thread safety: every method may be called from any thread (one mutex; the daemon's
// request rate is a test's, not a benchmark's).
#ifndef UMAP_FAULTINJECT_FUSE_RULE_BOOK_H_
#define UMAP_FAULTINJECT_FUSE_RULE_BOOK_H_

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "faultinject/fuse/fuse_rule.h"

namespace umap::faultfuse {

class RuleBook {
 public:
  // The outcome for one arriving request, and its number in the history.
  struct Decision {
    Outcome outcome;
    int rule = -1;  // index of the rule that fired; -1: none
    uint64_t request = 0;
  };

  // Adds a rule after the others (a request is taken by the first rule that fires on it).
  // Returns its index.
  int Arm(FuseRule rule);
  // Drops every rule (stalled requests stay stalled).
  void Clear();
  // Drops rules, counters and history.
  void Reset();

  // A request arrived: counts it, records it and decides its outcome.
  Decision Arrive(FuseOp op, absl::string_view path, uint64_t offset, uint64_t len, bool direct);
  // Its reply went out: `result` is the byte count (>= 0) or -errno.
  void Replied(FuseOp op, uint64_t request, int64_t result);
  void NoteStalled(int delta);
  // The kernel interrupted request `request` (counted whether or not the stall honours it).
  void NoteInterrupt(uint64_t request);
  void NoteIgnoredSync();

  // "read=N write=N ... stalled=N max_stalled=N interrupts=N ignored_fsyncs=N fired=N"
  std::string StatsLine() const;
  // Space-separated entries "op,path,offset,length,result,flags" for paths containing
  // `path` (every request when empty), oldest first; result is "pending" until the reply,
  // flags "d" (O_DIRECT handle) and "i" (interrupted) or "-".
  std::string HistoryLine(absl::string_view path) const;
  void ClearHistory();
  // Waits until at least `n` requests are stalled; returns the number stalled.
  int WaitStalled(int n, absl::Duration timeout) const;
  int stalled() const;

 private:
  struct Entry {
    FuseOp op;
    std::string path;
    uint64_t offset;
    uint64_t len;
    bool direct;
    bool interrupted = false;
    bool done = false;
    int64_t result = 0;
  };
  static constexpr size_t kMaxHistory = 1 << 20;

  mutable absl::Mutex mu_;
  std::vector<FuseRule> rules_ ABSL_GUARDED_BY(mu_);
  std::array<uint64_t, kNumFuseOps> requests_ ABSL_GUARDED_BY(mu_) = {};
  std::array<int64_t, kNumFuseOps> inflight_ ABSL_GUARDED_BY(mu_) = {};
  std::array<int64_t, kNumFuseOps> max_inflight_ ABSL_GUARDED_BY(mu_) = {};
  uint64_t fired_ ABSL_GUARDED_BY(mu_) = 0;
  int stalled_ ABSL_GUARDED_BY(mu_) = 0;
  int max_stalled_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t interrupts_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t ignored_syncs_ ABSL_GUARDED_BY(mu_) = 0;
  // Request numbers start at 1; history_[i] is request first_request_ + i.
  uint64_t next_request_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t first_request_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<Entry> history_ ABSL_GUARDED_BY(mu_);
};

}  // namespace umap::faultfuse

#endif  // UMAP_FAULTINJECT_FUSE_RULE_BOOK_H_
