// MissCurve: the miss rate of an LRU cache as a function of its capacity, from the
// footprint of the access stream (Xiang et al., "HOTL: a higher order theory of locality",
// ASPLOS'13; the same relation underlies the characteristic-time models of LRU).
//
// The footprint fp(t) is the number of distinct blocks touched in a window of t seconds,
// averaged over windows. An LRU cache of c blocks keeps a block about T(c) after its last
// access, where fp(T(c)) = c, and misses fp'(T(c)) times per second (the rate at which a
// window of that length meets blocks it did not hold). fp is measured block by block: for
// block b, the chance that a window of length t touches it is the chance that its next
// access comes within t of a random instant, F_b(t); so fp(t) = sum_b F_b(t) + (first
// accesses per second) * t. F is estimated from "armed" blocks, whose every access is seen
// (reuse_tracker.h): at each instant of a fixed grid while a block is armed, its wait for
// the next access is a sample, or a censored one if it is still waiting when the epoch
// ends. The waits of each stratum of blocks (resident ones, which must be parked to be
// armed, and the others) give a Kaplan-Meier estimate of that stratum's F, scaled by the
// stratum's blocks: instants spread evenly over the blocks and over time, as the average
// over windows requires.
//
// Nothing here assumes independent references: loops give the cliff LRU has for them.
//
// Waits are kept in log-spaced buckets (8 per power of two, from 1 us to 2^37 us, about 38
// hours). The wait from a random instant has a non-increasing density, so the footprint
// is concave: the curve is the least concave majorant of the measured footprint at the
// bucket edges (the Grenander estimate), whose slopes are the miss rates. That is what
// makes the rate at short windows, where few waits fall, well defined (the steepest chord).
// Memory: about 15 KiB.
// Not thread-safe: one owner (the reuse tracker).
#ifndef UMAP_RUNTIME_SIZING_MISS_CURVE_H_
#define UMAP_RUNTIME_SIZING_MISS_CURVE_H_

#include <array>
#include <cstdint>

namespace umap::runtime {

class MissCurve {
 public:
  static constexpr int kStrata = 2;  // 0: blocks armed while resident (parked); 1: the others
  static constexpr double kMinTime = 1e-6;  // seconds
  static constexpr int kPerOctave = 8;
  static constexpr int kOctaves = 37;
  static constexpr int kBuckets = kOctaves * kPerOctave;

  // Waits measured from `count` instants `spacing` seconds apart while a block of `stratum`
  // was armed: the latest instant's wait was `first` seconds, the others' longer by
  // multiples of `spacing`. `censored`: the block had still not been accessed. An instant
  // counts `weight` (a sampled block stands for several) times exp(-fade * its wait): its
  // age now, so that the curve weighs instants by how recent they are (see Scale).
  void AddWaits(int stratum, double first, double spacing, uint64_t count, double weight,
                double fade, bool censored);  // A block seen for the first time.
  void AddFirst(double weight) { first_ += weight; }
  // The first accesses were counted over `seconds` more.
  void AddSpan(double seconds) { span_ += seconds; }
  // The blocks of each stratum (the population the waits stand for).
  void set_blocks(int stratum, double blocks) { blocks_[stratum] = blocks; }
  // Keeps a fraction `keep` of the waits and first accesses (the rates stay): called with
  // exp(-fade * elapsed), it ages everything as AddWaits weighs it.
  void Scale(double keep);
  void AddFrom(const MissCurve& o);
  void Clear();

  double span() const { return span_; }
  double waits() const;  // waits and censored waits counted
  double first_rate() const { return span_ > 0 ? first_ / span_ : 0; }
  double blocks() const { return blocks_[0] + blocks_[1]; }
  // Distinct blocks touched in a window of t seconds.
  double Footprint(double t) const;
  // Misses per second of the cache whose blocks live t seconds: fp'(t).
  double MissRate(double t) const;
  double total_rate() const { return MissRate(0); }  // accesses per second
  // Misses per second of an LRU cache of `c` blocks.
  double MissesAt(double c) const;
  // The smallest capacity whose misses per second are at most `misses` (UINT64_MAX when
  // the first accesses alone are more).
  uint64_t CapacityFor(double misses) const;

 private:
  struct Stratum {
    std::array<double, kBuckets> seen{};      // waits that ended in bucket k
    std::array<double, kBuckets> censored{};  // censored in bucket k
  };
  static double Low(int i);  // bucket i holds waits [Low(i), Low(i + 1))
  static int BucketOf(double seconds);
  // Kaplan-Meier survival at the bucket edges: s[k] = P(wait >= Low(k)), s[kBuckets] last.
  void Survival(const Stratum& st, double* s) const;
  // Rebuilds the hull after a change (lazily).
  void Prepare() const;
  // The hull segment holding t: hull_t_[i] <= t < hull_t_[i + 1] (the last one beyond).
  int SegmentAt(double t) const;
  double Slope(int i) const;

  Stratum strata_[kStrata];
  double blocks_[kStrata] = {0, 0};
  double first_ = 0;
  double span_ = 0;
  mutable bool prepared_ = false;
  // The least concave majorant of the footprint without first accesses: points (t, fp),
  // t = 0 first.
  mutable int hull_n_ = 0;
  mutable std::array<double, kBuckets + 2> hull_t_;
  mutable std::array<double, kBuckets + 2> hull_fp_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_SIZING_MISS_CURVE_H_
