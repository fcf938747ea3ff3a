// MissCurve: the miss rate of an LRU cache as a function of its capacity, from the reuse
// times of the accesses (the average-eviction-time model: Hu et al., "Kinetic Modeling of
// Data Eviction in Cache", USENIX ATC'16; StatStack, Eklov & Hagersten, ISPASS'10).
//
// Let P(t) be the fraction of accesses whose reuse time (time since the same block's
// previous access) exceeds t, first accesses counting as infinite, and L the access rate.
// An LRU cache of c blocks evicts a block about T(c) after its last access, where
//   c = L * integral_0^T(c) P(t) dt
// (the blocks touched within T, on average), and its misses per second are L * P(T(c)).
// So reuse times map to stack distances without seeing every access: what a cache in user
// space can measure (reuse_tracker.h).
//
// Reuse times are kept in log-spaced buckets (8 per power of two, from 100 us to 5 days)
// with their weights (accesses), P is linear inside a bucket; `seconds` is the span the
// weights were counted over, so L = weights / seconds.
//
// Memory: about 2.2 KiB. Not thread-safe: one owner (the cache sizer).
#ifndef UMAP_RUNTIME_MISS_CURVE_H_
#define UMAP_RUNTIME_MISS_CURVE_H_

#include <array>
#include <cstdint>

namespace umap::runtime {

class MissCurve {
 public:
  static constexpr double kMinTime = 1e-4;  // seconds
  static constexpr int kPerOctave = 8;
  static constexpr int kOctaves = 32;
  static constexpr int kBuckets = kOctaves * kPerOctave;

  // An access `weight` times over, reused after `seconds`.
  void Add(double seconds, double weight);
  // A first access (its block was not seen before): a miss at any capacity.
  void AddFirst(double weight) { first_ += weight; }
  // The weights were counted over `seconds` more.
  void AddSpan(double seconds) { span_ += seconds; }
  // Keeps a fraction `keep` of everything (the span too: the rates stay).
  void Scale(double keep);
  void AddFrom(const MissCurve& o);
  void Clear();

  double span() const { return span_; }
  double weight() const;                 // accesses counted, first ones included
  double total_rate() const;             // accesses per second
  double first_rate() const { return span_ > 0 ? first_ / span_ : 0; }
  // Misses per second of an LRU cache of `c` blocks.
  double MissesAt(double c) const;
  // The smallest capacity whose misses per second are at most `misses` (UINT64_MAX when
  // the first accesses alone are more).
  uint64_t CapacityFor(double misses) const;

 private:
  static double Low(int i);  // bucket i holds reuse times [Low(i), Low(i + 1))
  static int BucketOf(double seconds);
  // Capacity (blocks) and misses per second for eviction time `t`.
  void At(double t, double* capacity, double* misses) const;

  std::array<double, kBuckets> w_{};
  double first_ = 0;
  double span_ = 0;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_MISS_CURVE_H_
