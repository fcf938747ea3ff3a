#include "runtime/io/scheduler.h"

#include <algorithm>
#include <utility>

namespace umap::runtime::io {

IoScheduler::IoScheduler(uint32_t nodes, uint32_t max_queues) : nodes_(nodes), node_count_(nodes) {
  heap_.reserve(max_queues);
  requeued_.reserve(nodes);  // a run holds at least one cache block, so this many always fit
}

void IoScheduler::Requeue(const Run& run, uint64_t due_us) {
  absl::MutexLock l(&mu_);
  requeued_.push_back({run, due_us});
  if (due_us < earliest_due_.load(std::memory_order_relaxed)) {
    earliest_due_.store(due_us, std::memory_order_relaxed);
  }
  work_cv_.SignalAll();  // rare; any waiter may be the one that can take it
}

bool IoScheduler::TakeOverdue(uint64_t before_us, bool sync_stuck, bool async_stuck, Run* out) {
  absl::MutexLock l(&mu_);
  if (earliest_due_.load(std::memory_order_relaxed) >= before_us) return false;
  for (size_t i = 0; i < requeued_.size(); ++i) {
    if (requeued_[i].due_us >= before_us) continue;
    if (!(requeued_[i].run.sync_only ? sync_stuck : async_stuck)) continue;
    *out = requeued_[i].run;
    requeued_[i] = requeued_.back();
    requeued_.pop_back();
    uint64_t earliest = UINT64_MAX;
    for (const Due& d : requeued_) earliest = std::min(earliest, d.due_us);
    earliest_due_.store(earliest, std::memory_order_relaxed);
    return true;
  }
  return false;
}

uint64_t IoScheduler::earliest_due_us() const {
  return earliest_due_.load(std::memory_order_relaxed);
}

void IoScheduler::Push(IoQueue* q, uint64_t block, uint32_t cache_block, uint64_t now_us) {
  absl::MutexLock l(&mu_);
  Node& n = nodes_[cache_block];
  n.queue = q;
  n.block = block;
  n.enqueued_us = now_us;
  n.next = kNoCb;
  n.prev = q->tail_;
  if (q->tail_ != kNoCb) {
    nodes_[q->tail_].next = cache_block;
  } else {
    q->head_ = cache_block;
  }
  q->tail_ = cache_block;
  q->queued_.fetch_add(1, std::memory_order_relaxed);
  backlog_.fetch_add(1, std::memory_order_relaxed);
  if (q->heap_pos_ < 0) {
    // Joins at the current virtual time: an idle queue gets its fair share from now on,
    // not a burst to make up for the time it had nothing to read.
    if (q->key_ < vtime_) q->key_ = vtime_;
    HeapPush(q);
  }
  if (fresh_waiters_ > 0) work_cv_.Signal();
}

bool IoScheduler::IsQueued(IoQueue* q, uint64_t block, uint32_t cache_block) const {
  if (cache_block == kNoCb || cache_block >= node_count_) return false;
  // A node names a queue only while it is linked into that queue's FIFO.
  const Node& n = nodes_[cache_block];
  return n.queue == q && n.block == block;
}

void IoScheduler::Unlink(uint32_t cache_block) {
  Node& n = nodes_[cache_block];
  IoQueue* q = n.queue;
  if (n.prev != kNoCb) {
    nodes_[n.prev].next = n.next;
  } else {
    q->head_ = n.next;
  }
  if (n.next != kNoCb) {
    nodes_[n.next].prev = n.prev;
  } else {
    q->tail_ = n.prev;
  }
  n.prev = n.next = kNoCb;
  n.queue = nullptr;
  q->queued_.fetch_sub(1, std::memory_order_relaxed);
  backlog_.fetch_sub(1, std::memory_order_relaxed);
}

bool IoScheduler::TakeDue(uint64_t now_us, Taker who, Run* out) {
  if (requeued_.empty() || earliest_due_.load(std::memory_order_relaxed) > now_us) return false;
  bool taken = false;
  uint64_t earliest = UINT64_MAX;
  for (size_t i = 0; i < requeued_.size();) {
    const Due& d = requeued_[i];
    if (!taken && d.due_us <= now_us && Takes(who, d.run)) {
      *out = d.run;
      requeued_[i] = requeued_.back();
      requeued_.pop_back();
      taken = true;
      continue;  // look at the element moved into slot i
    }
    earliest = std::min(earliest, d.due_us);
    ++i;
  }
  earliest_due_.store(earliest, std::memory_order_relaxed);
  return taken;
}

bool IoScheduler::HasWork(uint64_t now_us, Taker who) const {
  if (who != Taker::kSyncHelper && !heap_.empty()) return true;
  if (earliest_due_.load(std::memory_order_relaxed) > now_us) return false;
  for (const Due& d : requeued_) {
    if (d.due_us <= now_us && Takes(who, d.run)) return true;
  }
  return false;
}

bool IoScheduler::Next(uint32_t max_blocks, uint64_t now_us, Taker who, Run* out) {
  absl::MutexLock l(&mu_);
  if (TakeDue(now_us, who, out)) return true;
  if (who == Taker::kSyncHelper) return false;
  if (heap_.empty()) return false;
  IoQueue* q = heap_[0];
  const uint32_t head = q->head_;
  Node& h = nodes_[head];
  const uint64_t b = h.block;
  out->queue = q;
  out->enqueued_us = h.enqueued_us;
  Unlink(head);
  uint64_t lo = b, hi = b;  // the run is [lo, hi]
  // Extend downwards, then upwards, through queued neighbours (PIAO order).
  IoClient* c = q->client();
  while (hi - lo + 1 < max_blocks && lo > 0) {
    uint32_t cache_block = c->QueuedCb(lo - 1);
    if (!IsQueued(q, lo - 1, cache_block)) break;
    Unlink(cache_block);
    --lo;
  }
  while (hi - lo + 1 < max_blocks) {
    uint32_t cache_block = c->QueuedCb(hi + 1);
    if (!IsQueued(q, hi + 1, cache_block)) break;
    Unlink(cache_block);
    ++hi;
  }
  out->first = lo;
  out->count = static_cast<uint32_t>(hi - lo + 1);
  vtime_ = q->key_;
  q->key_ += out->count;
  if (q->head_ == kNoCb) {
    HeapRemove(q);
  } else {
    SiftDown(q->heap_pos_);
  }
  return true;
}

void IoScheduler::Close(IoQueue* q, std::vector<std::pair<uint64_t, uint32_t>>* dropped) {
  absl::MutexLock l(&mu_);
  while (q->head_ != kNoCb) {
    const uint32_t cache_block = q->head_;
    dropped->emplace_back(nodes_[cache_block].block, cache_block);
    Unlink(cache_block);
  }
  if (q->heap_pos_ >= 0) HeapRemove(q);
}

void IoScheduler::WaitForWork(const std::atomic<bool>* stop, Taker who,
                              absl::FunctionRef<uint64_t()> now_us) {
  absl::MutexLock l(&mu_);
  for (;;) {
    if (stop->load(std::memory_order_acquire)) return;
    const uint64_t now = now_us();
    if (HasWork(now, who)) return;
    const uint64_t due = earliest_due_.load(std::memory_order_relaxed);
    // Timed: also covers a stop flag set without NotifyAll, and the next requeued run.
    const uint64_t wait_us = due > now ? std::min<uint64_t>(due - now, 100000) : 1000;
    const bool fresh = who == Taker::kSync;
    if (fresh) ++fresh_waiters_;
    work_cv_.WaitWithTimeout(&mu_, absl::Microseconds(static_cast<int64_t>(wait_us)));
    if (fresh) --fresh_waiters_;
  }
}

void IoScheduler::NotifyAll() {
  absl::MutexLock l(&mu_);
  work_cv_.SignalAll();
}

void IoScheduler::HeapPush(IoQueue* q) {
  q->heap_pos_ = static_cast<int>(heap_.size());
  heap_.push_back(q);
  SiftUp(q->heap_pos_);
}

void IoScheduler::HeapRemove(IoQueue* q) {
  const int i = q->heap_pos_;
  const int last = static_cast<int>(heap_.size()) - 1;
  if (i != last) {
    heap_[i] = heap_[last];
    heap_[i]->heap_pos_ = i;
  }
  heap_.pop_back();
  q->heap_pos_ = -1;
  if (i < static_cast<int>(heap_.size())) {
    IoQueue* moved = heap_[i];
    SiftUp(i);
    SiftDown(moved->heap_pos_);
  }
}

// The heap is small (backlogged mappings) and its keys change only at the top, so a plain
// binary heap with positions kept in the queues (for removal at unmap) is enough.
void IoScheduler::SiftUp(int i) {
  while (i > 0) {
    int parent = (i - 1) / 2;
    if (heap_[parent]->key_ <= heap_[i]->key_) break;
    std::swap(heap_[parent], heap_[i]);
    heap_[parent]->heap_pos_ = parent;
    heap_[i]->heap_pos_ = i;
    i = parent;
  }
}

void IoScheduler::SiftDown(int i) {
  const int n = static_cast<int>(heap_.size());
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && heap_[l]->key_ < heap_[m]->key_) m = l;
    if (r < n && heap_[r]->key_ < heap_[m]->key_) m = r;
    if (m == i) break;
    std::swap(heap_[m], heap_[i]);
    heap_[m]->heap_pos_ = m;
    heap_[i]->heap_pos_ = i;
    i = m;
  }
}

}  // namespace umap::runtime::io
