// ReuseTracker: the reuse history of one mapping, from a spatially hashed sample of its
// blocks (the sampling of SHARDS, Waldspurger et al., FAST'15, fixed-size variant), and the
// miss curve it predicts (miss_curve.h), for lazy sizing (docs/design.md "Cache sizing").
//
// Sampling: block b is sampled when the top `shift` bits of hash(b) are zero: a fixed
// fraction 2^-shift of the blocks is followed, and the others cost one multiply and a
// compare. When more than `max_tracked` blocks have been sampled, `shift` grows by one and
// the blocks that leave the sample are forgotten, so the memory is fixed whatever the file
// size. A sampled block stands for 2^shift blocks.
//
// What is measured: footprints, not stack distances. A stack distance (how many distinct
// blocks were touched between two accesses) needs the order of every access, and a cache in
// user space never sees its hits. The footprint (how many distinct blocks a window of t
// seconds touches, miss_curve.h) can be measured from the accesses a cache does see: it is
// the sum over blocks of the chance that a block's next access comes within t of a random
// instant. So the tracker takes instants, chosen independently of the accesses, at which a
// sampled block's next access is sure to be seen, and times the wait from each instant to
// that access:
//   - a block that is not resident: any access to it faults. Every visit of the sizer to
//     such a block is an instant (visits come round evenly, so instants spread evenly over
//     the blocks and over time), and one access resolves all its pending instants;
//   - a resident block: it is parked (CacheSizer: its pages dropped, its data kept) so that
//     its next access faults once (a sampled hit); the parking is one instant.
// The two strata (instants taken while resident, and while not) are counted apart and each
// stands for its blocks, since they are sampled at different rates. A block that became
// resident unseen (read ahead) loses its pending instants: lost, not wrong. Instants still
// pending when the curve is built count as censored waits of their current age (and stay
// pending), so reuse times longer than any epoch are seen as they come.
//
// History: every instant weighs exp(-ln 2 * age / kHalfLife), its age counted from when
// it was taken: a wait resolved after w seconds enters with exp(-ln 2 * w / kHalfLife),
// and the history decays by the same law as time passes (each epoch, ReuseTracker::
// EndEpoch must be called every second or so), so that old instants fade whether they
// resolved or are still pending, and long waits stay visible. So the curve follows the
// workload's phases within a few half-lives; a working set that moved by a factor of two
// between epochs is counted as a phase change.
//
// Two halves:
//   - fault path (any thread, inside a signal handler too): Sampled() and Record(), which
//     pushes a 16-byte event into a bounded ring (event_ring.h): no allocation, no lock, no
//     system call; a full ring drops the event (counted).
//   - the sizer's thread: Drain(), NoteAbsent(), NoteParked(), VisitTracked(), EndEpoch().
//
// Memory: 96 bytes per tracked block (hash table at half load 64, rebuild scratch 32), a
// 24 KiB ring and three 15 KiB curves: 453 KiB per mapping at the default 4096 tracked
// blocks, less for mappings smaller than that; allocated at construction, touched as used.
#ifndef UMAP_RUNTIME_SIZING_REUSE_TRACKER_H_
#define UMAP_RUNTIME_SIZING_REUSE_TRACKER_H_

#include <atomic>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "runtime/cache/zeroed_array.h"
#include "runtime/sizing/miss_curve.h"
#include "runtime/stats/event_ring.h"

namespace umap::runtime {

class ReuseTracker {
 public:
  // kMiss, kHit: an access seen (a miss, or a parked block's fault); kUnseen: the block
  // became resident without a fault (read ahead), so later accesses may go unseen.
  enum class Kind : uint8_t { kMiss = 0, kHit = 1, kUnseen = 2 };
  // A block's state when the curve is built.
  enum class State { kResident, kParked, kAbsent };
  static constexpr uint32_t kDefaultTracked = 4096;
  static constexpr uint32_t kRingEvents = 1024;
  static constexpr double kHalfLife = 5.0;  // seconds

  // `blocks`: the mapping's size (the sample never needs more entries than that); `salt`
  // decorrelates the samples of different mappings.
  ReuseTracker(uint64_t blocks, uint64_t salt, uint32_t max_tracked = kDefaultTracked);
  ReuseTracker(const ReuseTracker&) = delete;
  ReuseTracker& operator=(const ReuseTracker&) = delete;
  bool ok() const { return table_.ok() && scratch_.ok(); }

  // CLOCK_MONOTONIC in microseconds (vDSO: cheap, async-signal-safe).
  static uint64_t Now();

  // --- fault path ---
  bool Sampled(uint64_t block) const {
    return IsSampled(Hash(block), shift_.load(std::memory_order_relaxed));
  }
  // REQUIRES: Sampled(block).
  void Record(uint64_t block, Kind kind, uint64_t now) {
    ring_.Push({block << 2 | static_cast<uint64_t>(kind), now});
  }

  // --- the sizer's thread ---
  // Processes the queued events; returns how many.
  uint32_t Drain();
  // An instant for `block` (tracked), which is not resident at `now`.
  void NoteAbsent(uint64_t block, uint64_t now);
  // `block` (tracked) was parked at `now`: an instant.
  void NoteParked(uint64_t block, uint64_t now);
  // Up to n tracked blocks, from where the last call stopped: fn(block, microseconds since
  // its last seen access). fn returns false to stop before that block (the next call
  // starts with it).
  void VisitTracked(uint32_t n, uint64_t now, absl::FunctionRef<bool(uint64_t, uint64_t)> fn);
  // Ends an epoch at `now` (every second or so); `state(block)` tells each tracked block's
  // state. Returns true at a phase change.
  bool EndEpoch(uint64_t now, absl::FunctionRef<State(uint64_t)> state);

  // The recent history's curve, with the pending instants as censored waits.
  const MissCurve& curve() const { return curve_; }
  // Its working set: the smallest capacity whose misses exceed the first accesses by at
  // most 1% of all accesses (blocks).
  uint64_t working_set() const { return working_set_; }
  uint32_t shift() const { return shift_.load(std::memory_order_relaxed); }
  uint32_t tracked() const { return tracked_; }
  uint32_t max_tracked() const { return max_tracked_; }
  uint64_t events() const { return events_; }
  uint64_t hits() const { return hits_; }
  uint64_t phases() const { return phases_; }
  uint64_t dropped() const { return ring_.dropped(); }
  size_t memory_bytes() const;

 private:
  // Times in a slot are ticks of 100 us, wrapping (intervals under 5 days are exact).
  static constexpr uint64_t kTickUs = 100;
  struct Slot {
    uint64_t key;       // block + 1; 0: empty
    uint32_t last;      // the last seen access
    uint32_t park;      // the parking instant, if park_pending
    uint32_t first;     // the first and last pending not-resident instants: `pending` of
    uint32_t latest;    // them, spread evenly between these two
    uint32_t pending;
    uint32_t park_pending;
  };
  static_assert(sizeof(Slot) == 32);

  static uint32_t Tick(uint64_t us) { return static_cast<uint32_t>(us / kTickUs); }
  uint64_t Hash(uint64_t block) const;
  static bool IsSampled(uint64_t h, uint32_t shift) {
    return shift == 0 || (h >> (64 - shift)) == 0;
  }
  Slot* Find(uint64_t block);
  void Insert(uint64_t block, uint32_t now);
  void Process(uint64_t block, Kind kind, uint64_t now);
  // The waits of s's pending instants, resolved at `now` (or censored there), into `to`.
  void AddPending(const Slot& s, uint32_t now, bool censored, MissCurve* to);
  // Halves the sample: shift + 1, forgetting the blocks that leave it.
  void RaiseShift();

  const uint64_t salt_;
  const uint32_t max_tracked_;
  const uint32_t table_size_;  // power of two >= 2 * max_tracked_
  std::atomic<uint32_t> shift_{0};
  EventRing ring_;
  // The sizer's thread only.
  ZeroedArray<Slot> table_;
  ZeroedArray<Slot> scratch_;
  uint32_t tracked_ = 0;
  uint32_t cursor_ = 0;  // VisitTracked's position in table_
  uint64_t epoch_start_ = 0;
  const double fade_;  // ln 2 / kHalfLife
  uint64_t events_ = 0, hits_ = 0, phases_ = 0;
  uint64_t working_set_ = 0;
  MissCurve epoch_;    // waits resolved in this epoch
  MissCurve history_;  // the epochs', decayed
  MissCurve curve_;    // history plus the pending instants
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_SIZING_REUSE_TRACKER_H_
