#include "runtime/miss_curve.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace umap::runtime {

double MissCurve::Low(int i) { return kMinTime * std::exp2(static_cast<double>(i) / kPerOctave); }

int MissCurve::BucketOf(double seconds) {
  if (!(seconds > kMinTime)) return 0;
  const int i = static_cast<int>(std::floor(std::log2(seconds / kMinTime) * kPerOctave));
  return std::clamp(i, 0, kBuckets - 1);
}

void MissCurve::Add(double seconds, double weight) {
  if (weight > 0) w_[BucketOf(seconds)] += weight;
}

void MissCurve::Scale(double keep) {
  for (double& w : w_) w *= keep;
  first_ *= keep;
  span_ *= keep;
}

void MissCurve::AddFrom(const MissCurve& o) {
  for (int i = 0; i < kBuckets; ++i) w_[i] += o.w_[i];
  first_ += o.first_;
  span_ += o.span_;
}

void MissCurve::Clear() {
  w_.fill(0);
  first_ = 0;
  span_ = 0;
}

double MissCurve::weight() const {
  double s = first_;
  for (double w : w_) s += w;
  return s;
}

double MissCurve::total_rate() const { return span_ > 0 ? weight() / span_ : 0; }

void MissCurve::At(double t, double* capacity, double* misses) const {
  // tail = accesses whose reuse time exceeds the start of bucket i; P falls linearly across
  // a bucket, so its integral over the bucket is the mean of its ends times the width.
  const double total = weight();
  double tail = total;
  double area = 0;  // integral of the tail (accesses x seconds) from 0 to t
  area += std::min(t, Low(0)) * tail;  // below the first bucket nothing is reused
  for (int i = 0; i < kBuckets && t > Low(i); ++i) {
    const double lo = Low(i), hi = Low(i + 1);
    const double end = std::min(t, hi);
    const double tail_end = tail - w_[i] * (end - lo) / (hi - lo);
    area += (end - lo) * (tail + tail_end) / 2;
    tail = t < hi ? tail_end : tail - w_[i];
  }
  if (t > Low(kBuckets)) area += (t - Low(kBuckets)) * tail;
  const double scale = span_ > 0 ? 1 / span_ : 0;  // accesses -> accesses per second
  *capacity = area * scale;
  *misses = tail * scale;
}

double MissCurve::MissesAt(double c) const {
  if (span_ <= 0) return 0;
  if (c <= 0) return total_rate();
  // The capacity grows with t: bisect on log t between 10 us and about 300 years.
  double lo = std::log(1e-5), hi = std::log(1e10);
  double cap, miss;
  At(std::exp(hi), &cap, &miss);
  if (cap <= c) return miss;
  for (int k = 0; k < 64; ++k) {
    const double mid = (lo + hi) / 2;
    At(std::exp(mid), &cap, &miss);
    if (cap < c) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  At(std::exp(hi), &cap, &miss);
  return miss;
}

uint64_t MissCurve::CapacityFor(double misses) const {
  if (span_ <= 0 || total_rate() <= misses) return 0;
  if (first_rate() > misses) return std::numeric_limits<uint64_t>::max();
  // The misses fall as t grows: the shortest t that brings them down to `misses`.
  double lo = std::log(1e-5), hi = std::log(1e10);
  double cap, miss;
  for (int k = 0; k < 64; ++k) {
    const double mid = (lo + hi) / 2;
    At(std::exp(mid), &cap, &miss);
    if (miss > misses) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  At(std::exp(hi), &cap, &miss);
  return static_cast<uint64_t>(std::ceil(cap));
}

}  // namespace umap::runtime
