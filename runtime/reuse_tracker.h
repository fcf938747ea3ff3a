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
// What is measured: reuse times, not stack distances. A stack distance (how many distinct
// blocks were touched between two accesses) needs the order of every access, and a cache in
// user space never sees its hits. A reuse time can be measured from the accesses it does
// see: every miss faults, and a sampled resident block can be parked (CacheSizer: its pages
// dropped, its data kept) so that its next access faults too. The wait from a parking to
// that access is exactly a waiting time for the block's next access (it could not have been
// touched unseen); for a miss the wait is counted from the block's parking if it was parked,
// else from its last seen access. The accesses between a block's last seen access and its
// parking went unseen: a parked hit, parked u after the last seen access, stands for
// 1 + u / m accesses (at most kMaxWeight), all reused after about its wait, where m is the
// block's mean wait (of all its waits so far, then of about the last eight; the mean, not
// the last wait, whose inverse has no finite expectation). The reuse times feed a MissCurve
// (miss_curve.h), which maps them to stack distances and to the misses of any capacity.
//
// History: each epoch's reuse times are folded into a history that decays by kDecay per
// epoch; when an epoch's working set differs from the history's by a factor of two, the
// history restarts from the epoch (a phase change).
//
// Two halves:
//   - fault path (any thread, inside a signal handler too): Sampled() and Record(), which
//     pushes a 16-byte event into a bounded ring (event_ring.h): no allocation, no lock, no
//     system call; a full ring drops the event (counted).
//   - the sizer's thread: Drain(), NoteParked(), EndEpoch().
//
// Memory: 96 bytes per tracked block (hash table at half load 64, rebuild scratch 32), a
// 24 KiB ring and two 2 KiB curves: 412 KiB per mapping at the default 4096 tracked
// blocks, less for mappings smaller than that; allocated at construction, touched as used.
#ifndef UMAP_RUNTIME_REUSE_TRACKER_H_
#define UMAP_RUNTIME_REUSE_TRACKER_H_

#include <atomic>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "runtime/event_ring.h"
#include "runtime/miss_curve.h"
#include "runtime/zeroed_array.h"

namespace umap::runtime {

class ReuseTracker {
 public:
  enum class Kind : uint8_t { kMiss = 0, kHit = 1 };
  static constexpr uint32_t kDefaultTracked = 4096;
  static constexpr uint32_t kRingEvents = 1024;
  static constexpr double kMaxWeight = 1e6;
  static constexpr double kDecay = 0.8;  // history kept per epoch: half-life about 3 epochs

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
    ring_.Push({block << 1 | static_cast<uint64_t>(kind), now});
  }

  // --- the sizer's thread ---
  // Processes the queued events; returns how many.
  uint32_t Drain();
  // `block` (tracked) was parked at `now`: its next access is seen.
  void NoteParked(uint64_t block, uint64_t now);
  // Up to n tracked blocks, from where the last call stopped, with the microseconds since
  // each one's last seen access.
  void VisitTracked(uint32_t n, uint64_t now, absl::FunctionRef<void(uint64_t, uint64_t)> fn);
  // Ends an epoch at `now`. Returns true at a phase change.
  bool EndEpoch(uint64_t now);

  // The recent history's curve.
  const MissCurve& curve() const { return history_; }
  // The history's working set: the smallest capacity whose misses exceed the first
  // accesses by at most 1% of all accesses (blocks).
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
  // flags: kParked, and the number of waits in the mean (up to kWindow) from kCountShift.
  static constexpr uint32_t kParked = 1;
  static constexpr uint32_t kCountShift = 8;
  static constexpr uint32_t kWindow = 8;
  struct Slot {
    uint64_t key;   // block + 1; 0: empty
    uint64_t last;  // time of the last seen access
    uint64_t park;  // time of the parking since then (flags & kParked)
    uint32_t mean;  // mean wait (us, saturating); 0: none yet
    uint32_t flags;
  };
  static_assert(sizeof(Slot) == 32);

  uint64_t Hash(uint64_t block) const;
  static bool IsSampled(uint64_t h, uint32_t shift) {
    return shift == 0 || (h >> (64 - shift)) == 0;
  }
  Slot* Find(uint64_t block);
  void Insert(uint64_t block, uint64_t now);
  void Process(uint64_t block, Kind kind, uint64_t now);
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
  uint64_t events_ = 0, hits_ = 0, phases_ = 0;
  uint64_t working_set_ = 0;
  MissCurve epoch_;
  MissCurve history_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_REUSE_TRACKER_H_
