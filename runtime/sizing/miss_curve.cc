#include "runtime/sizing/miss_curve.h"

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

void MissCurve::AddWaits(int stratum, double first, double spacing, uint64_t count,
                         double weight, double fade, bool censored) {
  if (count == 0) return;
  std::array<double, kBuckets>& h =
      censored ? strata_[stratum].censored : strata_[stratum].seen;
  prepared_ = false;
  if (count == 1 || !(spacing > 0)) {
    h[BucketOf(first)] += weight * std::exp(-fade * first) * static_cast<double>(count);
    return;
  }
  // first + m * spacing for m = 0 .. count-1, spread over the buckets they fall in; instant m
  // weighs weight * exp(-fade * (first + m * spacing)): a geometric series per bucket.
  const double ratio = std::exp(-fade * spacing);
  uint64_t done = 0;
  for (int k = BucketOf(first); k < kBuckets && done < count; ++k) {
    uint64_t upto = count;
    if (k < kBuckets - 1) {
      const double below = std::ceil((Low(k + 1) - first) / spacing);  // m with a smaller wait
      upto = below <= 0 ? 0 : std::min<uint64_t>(count, static_cast<uint64_t>(below));
    }
    if (upto <= done) continue;
    // sum over m in [done, upto) of ratio^m
    const double n = static_cast<double>(upto - done);
    const double head = std::pow(ratio, static_cast<double>(done));
    const double series = ratio < 1 ? head * -std::expm1(n * std::log(ratio)) / (1 - ratio)
                                    : head * n;
    h[k] += weight * std::exp(-fade * first) * series;
    done = upto;
  }
}

void MissCurve::Scale(double keep) {
  for (Stratum& st : strata_) {
    for (double& x : st.seen) x *= keep;
    for (double& x : st.censored) x *= keep;
  }
  first_ *= keep;
  span_ *= keep;
  prepared_ = false;
}

void MissCurve::AddFrom(const MissCurve& o) {
  for (int s = 0; s < kStrata; ++s) {
    for (int k = 0; k < kBuckets; ++k) {
      strata_[s].seen[k] += o.strata_[s].seen[k];
      strata_[s].censored[k] += o.strata_[s].censored[k];
    }
    if (o.blocks_[s] > 0) blocks_[s] = o.blocks_[s];  // the newest population
  }
  first_ += o.first_;
  span_ += o.span_;
  prepared_ = false;
}

void MissCurve::Clear() {
  *this = MissCurve();
}

double MissCurve::waits() const {
  double n = 0;
  for (const Stratum& st : strata_) {
    for (int k = 0; k < kBuckets; ++k) n += st.seen[k] + st.censored[k];
  }
  return n;
}

void MissCurve::Survival(const Stratum& st, double* s) const {
  // At risk at the start of bucket k: every wait that ended (or was censored) in k or
  // later. A censored wait leaves the risk set at the end of its bucket.
  double at_risk = 0;
  for (int k = 0; k < kBuckets; ++k) at_risk += st.seen[k] + st.censored[k];
  s[0] = 1;
  for (int k = 0; k < kBuckets; ++k) {
    s[k + 1] = at_risk > 0 ? s[k] * (1 - st.seen[k] / at_risk) : s[k];
    at_risk -= st.seen[k] + st.censored[k];
  }
}

void MissCurve::Prepare() const {
  if (prepared_) return;
  prepared_ = true;
  // The measured footprint at the bucket edges: sum over strata of blocks x (1 - survival).
  double surv[kStrata][kBuckets + 1];
  for (int s = 0; s < kStrata; ++s) Survival(strata_[s], surv[s]);
  hull_n_ = 0;
  auto push = [&](double t, double fp) {
    // Upper hull: drop points under the chord from the one before to the new one.
    while (hull_n_ >= 2) {
      const double t0 = hull_t_[hull_n_ - 2], f0 = hull_fp_[hull_n_ - 2];
      const double t1 = hull_t_[hull_n_ - 1], f1 = hull_fp_[hull_n_ - 1];
      if ((f1 - f0) * (t - t0) > (fp - f0) * (t1 - t0)) break;
      --hull_n_;
    }
    hull_t_[hull_n_] = t;
    hull_fp_[hull_n_] = fp;
    ++hull_n_;
  };
  // The shortest waits are few, and a chord from the origin to a point resting on a handful
  // of them would be as steep as it is noisy: the hull starts where 1/512 of the waits of
  // each stratum with blocks lie below.
  double seen[kStrata] = {0, 0}, below[kStrata] = {0, 0};
  for (int s = 0; s < kStrata; ++s) {
    for (int k = 0; k < kBuckets; ++k) seen[s] += strata_[s].seen[k];
  }
  push(0, 0);
  for (int k = 1; k <= kBuckets; ++k) {
    double fp = 0;
    bool enough = true;
    for (int s = 0; s < kStrata; ++s) {
      below[s] += strata_[s].seen[k - 1];
      fp += blocks_[s] * (1 - surv[s][k]);
      if (blocks_[s] > 0 && seen[s] > 0 && below[s] < seen[s] / 512) enough = false;
    }
    if (enough || k == kBuckets) push(Low(k), fp);
  }
}

int MissCurve::SegmentAt(double t) const {
  int lo = 0, hi = hull_n_ - 1;  // the answer is in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (hull_t_[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

double MissCurve::Slope(int i) const {
  if (i + 1 >= hull_n_) return 0;  // beyond the longest wait: nothing more is reused
  return (hull_fp_[i + 1] - hull_fp_[i]) / (hull_t_[i + 1] - hull_t_[i]);
}

double MissCurve::Footprint(double t) const {
  Prepare();
  const int i = SegmentAt(t);
  return hull_fp_[i] + Slope(i) * (t - hull_t_[i]) + first_rate() * t;
}

double MissCurve::MissRate(double t) const {
  Prepare();
  return Slope(SegmentAt(t)) + first_rate();
}

double MissCurve::MissesAt(double c) const {
  Prepare();
  if (c <= 0) return total_rate();
  const double first = first_rate();
  // The footprint (with first accesses) is increasing: the segment where it reaches c.
  for (int i = 0; i + 1 < hull_n_; ++i) {
    const double end = hull_fp_[i + 1] + first * hull_t_[i + 1];
    if (end >= c) return Slope(i) + first;
  }
  return first;
}

uint64_t MissCurve::CapacityFor(double misses) const {
  Prepare();
  if (total_rate() <= misses) return 0;
  const double first = first_rate();
  if (first > misses) return std::numeric_limits<uint64_t>::max();
  // Slopes fall along the hull: the first segment whose miss rate is low enough starts
  // at the capacity.
  for (int i = 0; i < hull_n_; ++i) {
    if (Slope(i) + first <= misses) {
      return static_cast<uint64_t>(std::ceil(hull_fp_[i] + first * hull_t_[i]));
    }
  }
  return static_cast<uint64_t>(std::ceil(hull_fp_[hull_n_ - 1]));
}

}  // namespace umap::runtime
