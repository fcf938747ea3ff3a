#include "faultinject/fuse/stall_queue.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"

namespace umap::faultfuse {
namespace {

// libfuse's interrupt callback carries one pointer, which here is the held request's id
// (ids are never reused, so a late callback for a finished request finds nothing); the
// queue is the daemon's only one.
std::atomic<StallQueue*> g_queue{nullptr};

}  // namespace

StallQueue::StallQueue(RuleBook* book, Finish finish) : book_(book), finish_(std::move(finish)) {
  StallQueue* expected = nullptr;
  if (!g_queue.compare_exchange_strong(expected, this)) {
    std::fprintf(stderr, "umap-faultfuse: a second StallQueue in one process\n");
    std::abort();
  }
  timer_ = std::thread([this] { Run(); });
}

StallQueue::~StallQueue() {
  Stop();
  g_queue.store(nullptr);
}

void StallQueue::Hold(std::unique_ptr<HeldRequest> r) {
  fuse_req_t req = r->req;
  const bool timed = r->outcome.stall == Outcome::Stall::kTimed;
  const absl::Time deadline =
      timed ? absl::Now() + absl::Milliseconds(r->outcome.stall_ms) : absl::InfiniteFuture();
  uint64_t id;
  {
    absl::MutexLock l(&mu_);
    id = next_id_++;
    held_[id] = Held{std::move(r), deadline};
  }
  book_->NoteStalled(1);
  // Registered after the request is in the map, so that an interrupt that already arrived
  // (libfuse then calls back at once, from inside this call) finds it; the request is not
  // finished before registration is done, because finishing frees `req`.
  fuse_req_interrupt_func(req, &StallQueue::OnInterrupt,
                          reinterpret_cast<void*>(static_cast<uintptr_t>(id)));
  absl::MutexLock l(&mu_);
  held_[id].registered = true;
  changed_.SignalAll();
}

void StallQueue::OnInterrupt(fuse_req_t, void* data) {
  StallQueue* q = g_queue.load();
  if (q != nullptr) q->Interrupted(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(data)));
}

void StallQueue::Interrupted(uint64_t id) {
  // Called by libfuse with the request's lock held: never reply from here (a reply frees
  // the request under that lock). The timer thread finishes it.
  absl::MutexLock l(&mu_);
  auto it = held_.find(id);
  if (it == held_.end()) return;
  book_->NoteInterrupt(it->second.r->request);
  if (it->second.r->outcome.interruptible) {
    it->second.interrupted = true;
    changed_.SignalAll();
  }
}

std::map<uint64_t, StallQueue::Held> StallQueue::TakeDue() {
  std::map<uint64_t, Held> due;
  const absl::Time now = absl::Now();
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->second.registered && (it->second.interrupted || it->second.deadline <= now)) {
      due.insert(held_.extract(it++));
    } else {
      ++it;
    }
  }
  return due;
}

void StallQueue::Run() {
  for (;;) {
    std::map<uint64_t, Held> due;
    {
      absl::MutexLock l(&mu_);
      if (stop_) return;
      due = TakeDue();
      if (due.empty()) {
        absl::Time next = absl::InfiniteFuture();
        for (const auto& [id, h] : held_) next = std::min(next, h.deadline);
        changed_.WaitWithDeadline(&mu_, next);
        continue;
      }
    }
    for (auto& [id, h] : due) {
      book_->NoteStalled(-1);
      finish_(*h.r, h.interrupted ? std::optional<int>(EINTR) : std::nullopt);
    }
  }
}

int StallQueue::Release(absl::string_view path, std::optional<int> error) {
  std::map<uint64_t, Held> done;
  {
    absl::MutexLock l(&mu_);
    // A request still registering its interrupt callback is a moment away from registered.
    auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const auto& [id, h] : held_) {
        if (!h.registered) return false;
      }
      return true;
    };
    mu_.Await(absl::Condition(&settled));
    for (auto it = held_.begin(); it != held_.end();) {
      if (path.empty() || absl::StrContains(it->second.r->path, path)) {
        done.insert(held_.extract(it++));
      } else {
        ++it;
      }
    }
  }
  FinishAll(done, error);
  return static_cast<int>(done.size());
}

void StallQueue::FinishAll(std::map<uint64_t, Held>& done, std::optional<int> error) {
  for (auto& [id, h] : done) {
    book_->NoteStalled(-1);
    finish_(*h.r, h.interrupted ? std::optional<int>(EINTR) : error);
  }
}

void StallQueue::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stop_) return;
    stop_ = true;
    changed_.SignalAll();
  }
  timer_.join();
  Release("", EIO);
}

}  // namespace umap::faultfuse
