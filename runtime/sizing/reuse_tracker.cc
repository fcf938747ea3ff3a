#include "runtime/sizing/reuse_tracker.h"

#include <time.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "base/clock.h"

namespace umap::runtime {
namespace {

uint32_t TrackedFor(uint64_t blocks, uint32_t max_tracked) {
  return static_cast<uint32_t>(std::clamp<uint64_t>(blocks, 16, std::max(16u, max_tracked)));
}

// The capacity that keeps all but 1% of the reuses (and the first accesses) from missing.
uint64_t WorkingSet(const MissCurve& c) {
  const uint64_t ws = c.CapacityFor(c.first_rate() + 0.01 * c.total_rate());
  return ws == UINT64_MAX ? static_cast<uint64_t>(c.blocks()) : ws;
}

constexpr double kTickSeconds = 1e-4;

}  // namespace

ReuseTracker::ReuseTracker(uint64_t blocks, uint64_t salt, uint32_t max_tracked)
    : salt_(salt),
      max_tracked_(TrackedFor(blocks, max_tracked)),
      table_size_(std::bit_ceil(2 * max_tracked_)),
      ring_(kRingEvents),
      table_(table_size_),
      scratch_(max_tracked_),
      fade_(std::log(2.0) / kHalfLife) {}

uint64_t ReuseTracker::Now() { return MonotonicMicros(); }

size_t ReuseTracker::memory_bytes() const {
  return (size_t{table_size_} + max_tracked_) * sizeof(Slot) + size_t{kRingEvents} * 24 +
         3 * sizeof(MissCurve);
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

void ReuseTracker::Insert(uint64_t block, uint32_t now) {
  if (tracked_ >= max_tracked_) {
    RaiseShift();
    if (!IsSampled(Hash(block), shift())) return;  // it left the sample with the others
  }
  const uint32_t mask = table_size_ - 1;
  uint32_t i = static_cast<uint32_t>(Hash(block)) & mask;
  while (table_[i].key != 0) i = (i + 1) & mask;
  table_[i] = Slot{block + 1, now, 0, 0, 0, 0, 0};
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

void ReuseTracker::AddPending(const Slot& s, uint32_t now, bool censored, MissCurve* to) {
  // Every instant weighs the same: the waits only give the shape of F (a ratio), and the
  // sample's scale, which changes when the sample shrinks, goes to the strata's blocks.
  constexpr double kWeight = 1;
  if (s.park_pending) {
    to->AddWaits(0, static_cast<uint32_t>(now - s.park) * kTickSeconds, 0, 1, kWeight, fade_,
                 censored);
  }
  if (s.pending > 0) {
    const double spacing =
        s.pending > 1 ? static_cast<uint32_t>(s.latest - s.first) * kTickSeconds / (s.pending - 1)
                      : 0;
    to->AddWaits(1, static_cast<uint32_t>(now - s.latest) * kTickSeconds, spacing, s.pending,
                 kWeight, fade_, censored);
  }
}

void ReuseTracker::Process(uint64_t block, Kind kind, uint64_t now_us) {
  const uint32_t shift = shift_.load(std::memory_order_relaxed);
  if (!IsSampled(Hash(block), shift)) return;  // left the sample after it was recorded
  Slot* s = Find(block);
  if (kind == Kind::kUnseen) {
    if (s != nullptr) s->pending = s->park_pending = 0;
    return;
  }
  if (events_++ == 0 && phases_ == 0 && history_.span() == 0) epoch_start_ = now_us;
  if (kind == Kind::kHit) ++hits_;
  const uint32_t now = Tick(now_us);
  const double scale = std::ldexp(1.0, static_cast<int>(shift));
  if (s == nullptr) {
    epoch_.AddFirst(scale);
    Insert(block, now);
    return;
  }
  AddPending(*s, now, /*censored=*/false, &epoch_);
  s->last = now;
  s->pending = s->park_pending = 0;
}

uint32_t ReuseTracker::Drain() {
  uint32_t n = 0;
  EventRing::Event e;
  while (ring_.Pop(&e)) {
    Process(e.a >> 2, static_cast<Kind>(e.a & 3), e.b);
    ++n;
  }
  return n;
}

void ReuseTracker::NoteAbsent(uint64_t block, uint64_t now_us) {
  Slot* s = Find(block);
  if (s == nullptr) return;
  const uint32_t now = Tick(now_us);
  if (s->pending == 0) s->first = now;
  s->latest = now;
  ++s->pending;
}

void ReuseTracker::NoteParked(uint64_t block, uint64_t now_us) {
  Slot* s = Find(block);
  if (s == nullptr) return;
  s->park = Tick(now_us);
  s->park_pending = 1;
}

void ReuseTracker::VisitTracked(uint32_t n, uint64_t now_us,
                                absl::FunctionRef<bool(uint64_t, uint64_t)> fn) {
  const uint32_t now = Tick(now_us);
  for (uint32_t seen = 0; n > 0 && seen < table_size_; ++seen) {
    const Slot& s = table_[cursor_];
    if (s.key != 0) {
      if (!fn(s.key - 1, uint64_t{static_cast<uint32_t>(now - s.last)} * kTickUs)) return;
      --n;
    }
    cursor_ = (cursor_ + 1) & (table_size_ - 1);
  }
}

bool ReuseTracker::EndEpoch(uint64_t now_us, absl::FunctionRef<State(uint64_t)> state) {
  const double seconds = std::max(
      1e-3, static_cast<double>(now_us > epoch_start_ ? now_us - epoch_start_ : 0) * 1e-6);
  epoch_.AddSpan(seconds);
  epoch_start_ = now_us;
  const uint32_t now = Tick(now_us);
  const double scale = std::ldexp(1.0, static_cast<int>(shift()));
  // The strata, and the pending instants (a block resident now was read ahead: any access
  // of it may have gone unseen, its instants are dropped).
  MissCurve pending;
  double resident = 0, absent = 0;
  for (uint32_t i = 0; i < table_size_; ++i) {
    Slot& s = table_[i];
    if (s.key == 0) continue;
    const State st = state(s.key - 1);
    (st == State::kAbsent ? absent : resident) += scale;
    if (st == State::kResident && s.pending > 0) s.pending = 0;
    AddPending(s, now, /*censored=*/true, &pending);
  }
  epoch_.set_blocks(0, resident);
  epoch_.set_blocks(1, absent);
  pending.set_blocks(0, resident);
  pending.set_blocks(1, absent);
  history_.Scale(std::exp(-fade_ * seconds));
  history_.AddFrom(epoch_);
  epoch_.Clear();
  curve_ = history_;
  curve_.AddFrom(pending);
  // A phase change, for the record: the working set moved by a factor of two since the
  // last epoch. (The curve follows phases by itself: old instants fade.)
  const uint64_t ws = WorkingSet(curve_);
  const bool phase =
      std::max(ws, working_set_) >= 16 && (ws > 2 * working_set_ || working_set_ > 2 * ws);
  if (phase) ++phases_;
  working_set_ = ws;
  return phase;
}

}  // namespace umap::runtime
