// Mapping: read-ahead (streams of sequential misses, the fills queued for the I/O
// channels ahead of them).
#include "runtime/fault/mapping.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/round.h"
#include "base/status_macros.h"
#include "runtime/fault/mapping_host.h"
#include "runtime/fault/mapping_internal.h"
#include "runtime/writeback/capture_spans.h"

namespace umap::runtime {

using Table = CacheEntryTable;
using mapping_internal::AddrHex;
using mapping_internal::IsFilled;

void Mapping::QueueFill(uint64_t block, uint64_t entry, uint32_t cache_block, bool write, pid_t tid,
                        bool kick, bool stash) {
  rt_->set_fill_tid(cache_block, tid);
  const uint64_t v = (entry & ~(Table::kCbMask | Table::kFillWrite | Table::kStash)) |
                     Table::kFilling | cache_block | (write && writable_ ? Table::kFillWrite : 0) |
                     (stash ? Table::kStash : 0);
  table_.Unlock(block, v);
  if (tid != 0) misses_.fetch_add(1, std::memory_order_relaxed);  // 0: read-ahead
  io_->Submit(ioq_, block, cache_block, kick);
}

Mapping::Stream* Mapping::FindStream(uint64_t block) const {
  for (const Stream& t : streams_) {
    const uint64_t next = t.next.load(std::memory_order_relaxed);
    const uint64_t ahead = t.ahead.load(std::memory_order_relaxed);
    // The stream goes on: the expected miss, or a fault inside what was read ahead (the
    // application caught up with read-ahead still in flight).
    if (block >= next && block <= std::max(next, ahead)) return const_cast<Stream*>(&t);
  }
  return nullptr;
}

Mapping::Stream* Mapping::StartStream(uint64_t block) {
  // A new stream replaces the next victim (round robin over a few streams); the old one's
  // trigger, if its reader never came, gives back its stash buffer and cache block, and a
  // probe that never had its second miss scores 0.
  Stream& t = streams_[stream_victim_.fetch_add(1, std::memory_order_relaxed) % kStreams];
  DropStash(t.trigger.exchange(~0ull, std::memory_order_relaxed));
  if (t.probe.exchange(false, std::memory_order_relaxed)) ScoreProbe(false);
  t.next.store(block + 1, std::memory_order_relaxed);
  t.length.store(0, std::memory_order_relaxed);
  t.ahead.store(block + 1, std::memory_order_relaxed);
  return &t;
}

void Mapping::ScoreProbe(bool started_a_run) {
  // An average over the last ~8 probes; racy updates only blur it.
  const uint32_t s = run_score_.load(std::memory_order_relaxed);
  run_score_.store(started_a_run ? s + (kScoreOne - s) / 8 : s - s / 8, std::memory_order_relaxed);
}

bool Mapping::MaybePrefetch(uint64_t block) {
  const uint32_t max = rt_->prefetch_blocks();
  if (max == 0) return false;
  Stream* s = FindStream(block);
  if (s == nullptr) {
    StartStream(block);
    return false;
  }
  const uint32_t len = s->length.fetch_add(1, std::memory_order_relaxed) + 1;
  if (len == 1) NoteStreamStarted(s);
  s->next.store(block + 1, std::memory_order_relaxed);
  // The window starts at 8 blocks and doubles with the stream's length, up to the maximum.
  const uint64_t window = std::min<uint64_t>(max, 8ull << std::min<uint32_t>(len - 1, 16));
  const uint64_t ahead = std::max(s->ahead.load(std::memory_order_relaxed), block + 1);
  // Keep about one window ahead of the reader; refill once half of it is consumed.
  if (ahead > block + 1 + window / 2) return true;
  const uint64_t to = std::min<uint64_t>(table_.size(), block + 1 + window);
  // The trigger: a block half a window ahead of the reader is kept aside, not installed, so
  // that the reader faults on it and queues the next half window while half a window is
  // still ahead of it; without it the reader would run into the end of the window and wait
  // for the whole next one (one read in flight at a time).
  const uint64_t trigger = window >= 16 ? std::max<uint64_t>(ahead, block + 1 + window / 2) : ~0ull;
  uint64_t p = ahead;
  for (; p < to; ++p) {
    Table::Entry pe = table_.Load(p);
    if (pe.present() || pe.poisoned() || pe.filling() || pe.shadow() || pe.staged() ||
        pe.stashed() || pe.parked() || pe.locked()) {
      continue;
    }
    if (ValidBytes(p) == 0) break;
    uint32_t cache_block = rt_->TryAcquireBlock(/*bulk=*/true);
    if (cache_block == BlockPool::kNone)
      break;  // no free or clean block right now: read-ahead waits
    Table::Entry e;
    if (!table_.TryLock(p, &e)) {
      rt_->pool().Release(cache_block);
      continue;
    }
    if (e.present() || e.poisoned() || e.filling() || e.shadow() || e.staged() || e.stashed() ||
        e.parked()) {
      table_.Unlock(p, e.v);
      rt_->pool().Release(cache_block);
      continue;
    }
    const bool stash = p == trigger;
    if (stash) DropStash(s->trigger.exchange(p, std::memory_order_relaxed));
    QueueFill(p, e.v, cache_block, /*write=*/false, /*tid=*/0, /*kick=*/false, stash);
    prefetched_.fetch_add(1, std::memory_order_relaxed);
  }
  s->ahead.store(p, std::memory_order_relaxed);
  io_->Kick();
  return true;
}

}  // namespace umap::runtime
