#include "runtime/reuse_tracker.h"

#include <time.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace umap::runtime {
namespace {

uint32_t TrackedFor(uint64_t blocks, uint32_t max_tracked) {
  return static_cast<uint32_t>(std::clamp<uint64_t>(blocks, 16, std::max(16u, max_tracked)));
}

// The capacity that keeps all but 1% of the reuses (and the first accesses) from missing.
uint64_t WorkingSet(const MissCurve& c) {
  const uint64_t ws = c.CapacityFor(c.first_rate() + 0.01 * c.total_rate());
  return ws == UINT64_MAX ? 0 : ws;
}

}  // namespace

ReuseTracker::ReuseTracker(uint64_t blocks, uint64_t salt, uint32_t max_tracked)
    : salt_(salt),
      max_tracked_(TrackedFor(blocks, max_tracked)),
      table_size_(std::bit_ceil(2 * max_tracked_)),
      ring_(kRingEvents),
      table_(table_size_),
      scratch_(max_tracked_) {}

uint64_t ReuseTracker::Now() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

size_t ReuseTracker::memory_bytes() const {
  return (size_t{table_size_} + max_tracked_) * sizeof(Slot) + size_t{kRingEvents} * 24 +
         2 * sizeof(MissCurve);
}

uint64_t ReuseTracker::Hash(uint64_t block) const {
  // splitmix64's finaliser: every bit of the block index reaches the top bits.
  uint64_t x = block ^ salt_;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

ReuseTracker::Slot* ReuseTracker::Find(uint64_t block) {
  const uint32_t mask = table_size_ - 1;
  for (uint32_t i = static_cast<uint32_t>(Hash(block)) & mask;; i = (i + 1) & mask) {
    Slot& s = table_[i];
    if (s.key == block + 1) return &s;
    if (s.key == 0) return nullptr;
  }
}

void ReuseTracker::Insert(uint64_t block, uint64_t now) {
  if (tracked_ >= max_tracked_) {
    RaiseShift();
    if (!IsSampled(Hash(block), shift())) return;  // it left the sample with the others
  }
  const uint32_t mask = table_size_ - 1;
  uint32_t i = static_cast<uint32_t>(Hash(block)) & mask;
  while (table_[i].key != 0) i = (i + 1) & mask;
  table_[i] = Slot{block + 1, now, 0, 0, 0};  // (last seen now)
  ++tracked_;
}

void ReuseTracker::RaiseShift() {
  const uint32_t shift = shift_.load(std::memory_order_relaxed) + 1;
  shift_.store(shift, std::memory_order_relaxed);
  // Keep the slots whose block stays sampled, then rebuild the table from them.
  uint32_t k = 0;
  for (uint32_t i = 0; i < table_size_; ++i) {
    const Slot& s = table_[i];
    if (s.key != 0 && IsSampled(Hash(s.key - 1), shift)) scratch_[k++] = s;
  }
  std::memset(static_cast<void*>(table_.data()), 0, size_t{table_size_} * sizeof(Slot));
  const uint32_t mask = table_size_ - 1;
  for (uint32_t j = 0; j < k; ++j) {
    uint32_t i = static_cast<uint32_t>(Hash(scratch_[j].key - 1)) & mask;
    while (table_[i].key != 0) i = (i + 1) & mask;
    table_[i] = scratch_[j];
  }
  tracked_ = k;
  cursor_ = 0;
}

void ReuseTracker::Process(uint64_t block, Kind kind, uint64_t now) {
  const uint32_t shift = shift_.load(std::memory_order_relaxed);
  if (!IsSampled(Hash(block), shift)) return;  // left the sample after it was recorded
  if (events_++ == 0 && phases_ == 0 && history_.span() == 0) epoch_start_ = now;
  if (kind == Kind::kHit) ++hits_;
  const double scale = std::ldexp(1.0, static_cast<int>(shift));
  Slot* s = Find(block);
  if (s == nullptr) {
    epoch_.AddFirst(scale);
    Insert(block, now);
    return;
  }
  // Counted from the parking when there was one: nothing touched the block since.
  const bool parked = s->flags & kParked;
  const uint64_t from = parked ? s->park : s->last;
  const uint64_t wait = std::max<uint64_t>(1, now > from ? now - from : 0);
  // The block's mean wait: the average of its waits so far, then a moving average over
  // about the last kWindow.
  const uint32_t n = s->flags >> kCountShift;
  const double mean = n == 0 ? static_cast<double>(wait)
                     : n < kWindow ? (static_cast<double>(s->mean) * n + wait) / (n + 1)
                                   : s->mean + (static_cast<double>(wait) - s->mean) / kWindow;
  s->mean = static_cast<uint32_t>(std::clamp(mean, 1.0, 4e9));
  // The accesses between the last seen one and the parking went unseen: this one stands
  // for them too, at the block's mean rate.
  double weight = 1;
  if (parked && s->park > s->last) {
    weight = std::min(kMaxWeight, 1 + static_cast<double>(s->park - s->last) / s->mean);
  }
  epoch_.Add(static_cast<double>(wait) * 1e-6, weight * scale);
  s->last = now;
  s->flags = std::min(n + 1, kWindow) << kCountShift;
}

uint32_t ReuseTracker::Drain() {
  uint32_t n = 0;
  EventRing::Event e;
  while (ring_.Pop(&e)) {
    Process(e.a >> 1, static_cast<Kind>(e.a & 1), static_cast<uint32_t>(e.b));
    ++n;
  }
  return n;
}

void ReuseTracker::NoteParked(uint64_t block, uint64_t now) {
  Slot* s = Find(block);
  if (s == nullptr) return;
  s->park = now;
  s->flags |= kParked;
}

void ReuseTracker::VisitTracked(uint32_t n, uint64_t now,
                                absl::FunctionRef<void(uint64_t, uint64_t)> fn) {
  for (uint32_t seen = 0; n > 0 && seen < table_size_; ++seen) {
    const Slot& s = table_[cursor_];
    cursor_ = (cursor_ + 1) & (table_size_ - 1);
    if (s.key == 0) continue;
    fn(s.key - 1, now > s.last ? now - s.last : 0);
    --n;
  }
}

bool ReuseTracker::EndEpoch(uint64_t now) {
  epoch_.AddSpan(std::max(1e-3, static_cast<double>(now > epoch_start_ ? now - epoch_start_ : 0) * 1e-6));
  epoch_start_ = now;
  // A phase change: the epoch's working set is half or twice the history's. An epoch with
  // too few accesses to tell is folded in as it is.
  const uint64_t ws = WorkingSet(epoch_);
  bool phase = false;
  if (history_.span() > 0 && epoch_.weight() >= 64 * std::ldexp(1.0, static_cast<int>(shift()))) {
    phase = std::max(ws, working_set_) >= 16 && (ws > 2 * working_set_ || working_set_ > 2 * ws);
  }
  if (phase) {
    history_ = epoch_;
    ++phases_;
  } else {
    history_.Scale(kDecay);
    history_.AddFrom(epoch_);
  }
  epoch_.Clear();
  working_set_ = WorkingSet(history_);
  return phase;
}

}  // namespace umap::runtime
