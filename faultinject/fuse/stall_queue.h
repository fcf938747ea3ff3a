// StallQueue: the requests umap-faultfuse is holding back (a rule with stall=). No daemon
// thread blocks on a stalled request: the low-level FUSE API lets any thread reply later,
// so a held request costs memory only, and any number of them can be held at once (as many
// as the kernel sends: the whole queue depth of an io_uring).
//
// A held request is finished (handed to the Finish callback, which does its I/O and
// replies) when its stall time is up, when a test releases it, when the kernel interrupts
// it and its rule honours interrupts (finished as EINTR), or at Stop (as EIO).
//
// Thread safety: every method may be called from any thread. The Finish callback runs
// without the queue's lock, on the queue's timer thread or on the releasing thread.
#ifndef UMAP_FAULTINJECT_FUSE_STALL_QUEUE_H_
#define UMAP_FAULTINJECT_FUSE_STALL_QUEUE_H_

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "faultinject/fuse/fuse_rule.h"
#include "faultinject/fuse/rule_book.h"

namespace umap::faultfuse {

// Everything needed to finish a request later.
struct HeldRequest {
  fuse_req_t req = nullptr;
  FuseOp op = FuseOp::kRead;
  uint64_t request = 0;  // its number in the RuleBook's history
  Outcome outcome;
  std::string path;
  uint64_t ino = 0;
  fuse_file_info fi = {};  // the caller's file info (open: to fill; others: fi.fh)
  uint64_t offset = 0;
  size_t size = 0;
  int datasync = 0;
  std::string data;  // a write's bytes (copied: libfuse reuses its receive buffer)
};

class StallQueue {
 public:
  // Finishes `r`: with `error` set, replies that errno and does nothing else; otherwise does
  // what r.outcome says after its stall and replies.
  using Finish = std::function<void(HeldRequest& r, std::optional<int> error)>;

  StallQueue(RuleBook* book, Finish finish);
  ~StallQueue();  // Stop()
  StallQueue(const StallQueue&) = delete;
  StallQueue& operator=(const StallQueue&) = delete;

  // Holds `r` per r->outcome.stall (kTimed or kUntilReleased).
  void Hold(std::unique_ptr<HeldRequest> r);
  // Finishes every held request whose path contains `path` (all when empty), as its rule
  // says or, with `error`, failing with that errno. Returns how many.
  int Release(absl::string_view path, std::optional<int> error);
  // Fails every held request with EIO and stops the timer thread. Idempotent.
  void Stop();

 private:
  struct Held {
    std::unique_ptr<HeldRequest> r;
    absl::Time deadline;       // InfiniteFuture: until released
    bool registered = false;   // the interrupt callback is set; only then may it finish
    bool interrupted = false;  // honoured interrupt: finish as EINTR
  };
  static void OnInterrupt(fuse_req_t req, void* data);
  void Interrupted(uint64_t id);
  void Run();
  // Takes out the held requests that are due (deadline passed or honoured interrupt).
  std::map<uint64_t, Held> TakeDue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishAll(std::map<uint64_t, Held>& done, std::optional<int> error);

  RuleBook* const book_;
  const Finish finish_;
  absl::Mutex mu_;
  absl::CondVar changed_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Held> held_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

}  // namespace umap::faultfuse

#endif  // UMAP_FAULTINJECT_FUSE_STALL_QUEUE_H_
