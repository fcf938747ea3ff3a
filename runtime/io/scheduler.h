// IoScheduler: the paper's per-file PIAO + FIFO queues and the least-served min-heap.
//
// Every queued fill is one block of one file queue (IoQueue: one per mapping) holding one
// cache block (cache_block). The scheduler keeps, per queue,
//   - a FIFO of queued blocks by arrival: an intrusive list threaded through per-cache_block nodes
//     (the number of queued fills never exceeds the pool's cache_block count, so the node array,
//     sized once, is all the memory the queues ever need: nothing is allocated per fault);
//   - the PIAO order by block index, which is the mapping's cache entry table itself: the
//     queued neighbours of block b are found by asking the queue's client for b-1, b+1, ...
//     (IoClient::QueuedCb), one index away, instead of keeping a second sorted structure.
// Next() always takes the FIFO head of the least-served backlogged queue (min-heap keyed by
// blocks handed out), then extends it with adjacent queued blocks of the same queue, downwards
// and upwards, up to max_blocks. A request waits behind at most the requests queued before it
// in its own queue, and a large file cannot starve a small one.
//
// Fairness across arrivals: a queue that becomes backlogged starts at the heap's current
// minimum key (a "virtual time"), so a file that was idle does not monopolise the channels
// until it has caught up with the bytes a busy file received meanwhile.
//
// Thread safety: all methods may be called from any thread; one mutex guards everything and
// is held for O(max_blocks) work, never across I/O. REQUIRES: a queue is removed (Close)
// only after no thread pushes to it any more.
#ifndef UMAP_RUNTIME_IO_SCHEDULER_H_
#define UMAP_RUNTIME_IO_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "runtime/cache/zeroed_array.h"

namespace umap::runtime::io {

inline constexpr uint32_t kNoCb = 0xffffffffu;

// The owner of a file queue (a Mapping): tells the scheduler which blocks are queued.
class IoClient {
 public:
  virtual ~IoClient() = default;
  // The cache_block a queued fill of `block` holds, or kNoCb (not queued, or out of range). Called
  // under the scheduler lock: must not block.
  virtual uint32_t QueuedCb(uint64_t block) const = 0;
};

class IoQueue {
 public:
  explicit IoQueue(IoClient* client) : client_(client) {}
  IoClient* client() const { return client_; }
  // Fills queued now.
  uint64_t queued() const { return queued_.load(std::memory_order_relaxed); }

 private:
  friend class IoScheduler;
  IoClient* const client_;
  // Guarded by the scheduler's mutex.
  uint32_t head_ = kNoCb;
  uint32_t tail_ = kNoCb;
  uint64_t key_ = 0;   // least-served key: blocks handed out, from the virtual time on
  int heap_pos_ = -1;  // index in the heap, -1 when not backlogged
  std::atomic<uint64_t> queued_{0};
};

// A run of adjacent blocks of one queue handed to a channel.
struct Run {
  IoQueue* queue = nullptr;
  uint64_t first = 0;        // first block index
  uint32_t count = 0;        // blocks
  uint64_t enqueued_us = 0;  // arrival of the FIFO head (for queue-wait statistics)
  uint32_t attempt = 0;      // 0 for the first try, n for the n-th retry
  bool sync_only = false;    // must be read through File::ReadAt (no descriptor to submit)
};

class IoScheduler {
 public:
  // `nodes`: one per cache block of the pool; `max_queues`: mappings that may exist at once.
  IoScheduler(uint32_t nodes, uint32_t max_queues);

  // Queues a fill of `block` of `q` that holds cache block `cache_block`. `now_us` stamps arrival.
  void Push(IoQueue* q, uint64_t block, uint32_t cache_block, uint64_t now_us);
  // Who asks for work: an asynchronous channel (new fills, due retries that it can submit),
  // a synchronous channel of the posix engine (everything), or a synchronous helper beside
  // io_uring channels (only due runs marked sync_only).
  enum class Taker { kAsync, kSync, kSyncHelper };
  // Takes the next run (at most max_blocks blocks); false when nothing is ready for `who`.
  // Requeued runs come first once due.
  bool Next(uint32_t max_blocks, uint64_t now_us, Taker who, Run* out);
  // Puts back a claimed run (a retry, or one an asynchronous channel cannot read), due at
  // `due_us`. Capacity is reserved for every cache_block, so this never allocates.
  void Requeue(const Run& run, uint64_t due_us);
  // Takes a requeued run that was due before `before_us` and that nobody took, of the kinds
  // whose channels are all stuck (sync_only runs when `sync_stuck`, the others when
  // `async_stuck`): the watchdog counts it as one more timeout.
  bool TakeOverdue(uint64_t before_us, bool sync_stuck, bool async_stuck, Run* out);
  // The earliest due time of a requeued run, or UINT64_MAX.
  uint64_t earliest_due_us() const;
  // Removes every queued fill of `q`, appending (block, cache_block) pairs to `dropped`.
  void Close(IoQueue* q, std::vector<std::pair<uint64_t, uint32_t>>* dropped);
  uint64_t backlog() const { return backlog_.load(std::memory_order_relaxed); }

  // Waits until something is ready or `*stop` becomes true (synchronous channels).
  void WaitForWork(const std::atomic<bool>* stop, Taker who, absl::FunctionRef<uint64_t()> now_us);
  void NotifyAll();

 private:
  struct Node {
    IoQueue* queue = nullptr;
    uint64_t block = 0;
    uint64_t enqueued_us = 0;
    uint32_t prev = kNoCb;
    uint32_t next = kNoCb;
  };
  void Unlink(uint32_t cache_block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static bool Takes(Taker who, const Run& r) {
    return who == Taker::kSync || (who == Taker::kAsync) != r.sync_only;
  }
  // Takes a due requeued run for `who` into *out; refreshes earliest_due_.
  bool TakeDue(uint64_t now_us, Taker who, Run* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWork(uint64_t now_us, Taker who) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // True when `cache_block` is queued in `q` for `block` (a neighbour the run may take).
  bool IsQueued(IoQueue* q, uint64_t block, uint32_t cache_block) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void HeapPush(IoQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HeapRemove(IoQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SiftUp(int i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SiftDown(int i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // Sized for the pool's capacity, touched as cache blocks are used (all-zero: not queued).
  ZeroedArray<Node> nodes_ ABSL_GUARDED_BY(mu_);
  const uint32_t node_count_;
  std::vector<IoQueue*> heap_ ABSL_GUARDED_BY(mu_);  // capacity reserved once
  struct Due {
    Run run;
    uint64_t due_us;
  };
  std::vector<Due> requeued_ ABSL_GUARDED_BY(mu_);  // capacity reserved once
  std::atomic<uint64_t> earliest_due_{UINT64_MAX};
  uint64_t vtime_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> backlog_{0};
  absl::CondVar work_cv_;
  // Threads waiting in WaitForWork that take fresh work (Taker::kSync). Push wakes one only
  // when there is one: beside io_uring channels the waiters are helpers, which take only
  // requeued runs, and a wake per queued block would only make them run and sleep again.
  int fresh_waiters_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace umap::runtime::io

#endif  // UMAP_RUNTIME_IO_SCHEDULER_H_
