// The reuse tracker and its miss curve: miss-ratio curves against an exact LRU simulation,
// the fixed-size sample, aging, and that the tracker allocates nothing per access.
#include "runtime/sizing/reuse_tracker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <new>
#include <random>
#include <vector>

#include "runtime/sizing/miss_curve.h"

// The tracker runs on this test's thread: its allocation count is the tracker's.
#include "tests/testing/counting_new.h"

namespace umap::runtime {
namespace {

// Exact LRU stack distances of a trace (Fenwick tree over access times): for each access,
// the number of distinct blocks touched since the previous access to the same block, or -1.
std::vector<int64_t> ExactDistances(const std::vector<uint64_t>& trace) {
  std::vector<int64_t> out;
  std::vector<int> bit(trace.size() + 1, 0);
  auto add = [&](size_t i, int v) {
    for (++i; i <= trace.size(); i += i & -i) bit[i] += v;
  };
  auto prefix = [&](size_t i) {  // sum over [0, i)
    int s = 0;
    for (; i > 0; i -= i & -i) s += bit[i];
    return s;
  };
  std::map<uint64_t, size_t> last;
  for (size_t t = 0; t < trace.size(); ++t) {
    auto it = last.find(trace[t]);
    if (it == last.end()) {
      out.push_back(-1);
    } else {
      out.push_back(prefix(t) - prefix(it->second + 1));
      add(it->second, -1);
    }
    add(t, 1);
    last[trace[t]] = t;
  }
  return out;
}

// The miss ratio of an LRU cache of c blocks over the second half of the trace (the first
// half warms it up).
double ExactMissRatio(const std::vector<int64_t>& d, uint64_t c) {
  uint64_t misses = 0;
  for (size_t i = d.size() / 2; i < d.size(); ++i) {
    misses += (d[i] < 0 || static_cast<uint64_t>(d[i]) >= c) ? 1 : 0;
  }
  return static_cast<double>(misses) / static_cast<double>(d.size() - d.size() / 2);
}

// A mix of a hot set (1/64 of `blocks`, half the accesses), a warm set (1/8, 35%) and a
// stream of blocks seen about once (15%, over 64 times as many; without `stream`, a cold
// set of all `blocks`), so the curve has shape and the trace is the same from start to end.
std::vector<uint64_t> MixedTrace(size_t n, uint64_t blocks, uint32_t seed,
                                 bool stream = true) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> t;
  t.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng() % 100;
    if (r < 50) {
      t.push_back(rng() % (blocks / 64));
    } else if (r < 85) {
      t.push_back(rng() % (blocks / 8));
    } else {
      t.push_back(stream ? blocks + rng() % (64 * blocks) : rng() % blocks);
    }
  }
  return t;
}

ReuseTracker::State Absent(uint64_t) { return ReuseTracker::State::kAbsent; }

// Feeds the trace as if no block were resident (every access faults and is seen), access i
// at 100 us times i (10k accesses per second). Every 1000 accesses (0.1 s) every tracked
// block gets an instant, as the sizer's visits give; every 0.5 s an epoch ends.
void Feed(ReuseTracker& tr, const std::vector<uint64_t>& trace, uint64_t* tick) {
  uint32_t queued = 0, n = 0;
  for (uint64_t b : trace) {
    *tick += 100;
    if (tr.Sampled(b)) {
      tr.Record(b, ReuseTracker::Kind::kMiss, *tick);
      ++queued;
    }
    if (queued >= 512 || ++n % 1000 == 0) {
      tr.Drain();
      queued = 0;
    }
    if (n % 1000 == 0) {
      tr.VisitTracked(tr.tracked(), *tick,
                      [&](uint64_t block, uint64_t) {
                        tr.NoteAbsent(block, *tick);
                        return true;
                      });
    }
    if (n % 5000 == 0) tr.EndEpoch(*tick, Absent);
  }
  tr.Drain();
}

double EstimatedMissRatio(const MissCurve& m, uint64_t c) {
  return m.MissesAt(static_cast<double>(c)) / m.total_rate();
}

TEST(MissCurve, UniformAccessGivesAStraightLine) {
  // 1000 blocks each touched at random, once a second on average: a block's next access
  // from a random instant comes after an exponential wait of mean 1 s.
  MissCurve m;
  std::mt19937_64 rng(1);
  std::exponential_distribution<double> wait(1.0);
  for (int i = 0; i < 200000; ++i) m.AddWaits(1, wait(rng), 0, 1, 1, 0, false);
  m.set_blocks(1, 1000);
  m.AddSpan(1);
  EXPECT_NEAR(m.total_rate(), 1000, 80);
  EXPECT_NEAR(m.Footprint(1.0), 632, 10);  // 1000 (1 - 1/e)
  for (double c : {100.0, 500.0, 900.0}) {
    EXPECT_NEAR(m.MissesAt(c), 1000 * (1 - c / 1000), 30) << c;
  }
  EXPECT_NEAR(static_cast<double>(m.CapacityFor(500)), 500, 30);
}

TEST(MissCurve, LoopIsACliff) {
  // 1000 blocks read in a loop once a second: the wait from a random instant is uniform
  // over a second. LRU misses everything below 1000 blocks and nothing above.
  MissCurve m;
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> wait(0, 1);
  for (int i = 0; i < 200000; ++i) m.AddWaits(0, wait(rng), 0, 1, 1, 0, false);
  m.set_blocks(0, 1000);
  m.AddSpan(1);
  EXPECT_NEAR(m.MissesAt(500), 1000, 60);
  EXPECT_NEAR(m.MissesAt(900), 1000, 60);
  EXPECT_LT(m.MissesAt(1001), 1);
  EXPECT_NEAR(static_cast<double>(m.CapacityFor(10)), 1000, 20);
}

TEST(MissCurve, GridInstantsSpreadOverTheBuckets) {
  // Instants every 10 ms over a 2 s silence: waits 5 ms, 15 ms, ... 1.995 s, 200 of them.
  MissCurve a, b;
  a.AddWaits(1, 0.005, 0.01, 200, 1, 0.3, false);
  for (int m = 0; m < 200; ++m) b.AddWaits(1, 0.005 + 0.01 * m, 0, 1, 1, 0.3, false);
  a.set_blocks(1, 10);
  b.set_blocks(1, 10);
  a.AddSpan(1);
  b.AddSpan(1);
  EXPECT_NEAR(a.waits(), b.waits(), 1e-9);
  for (double t : {0.001, 0.01, 0.1, 0.5, 1.0, 3.0}) {
    EXPECT_NEAR(a.Footprint(t), b.Footprint(t), 1e-9) << t;
  }
}

TEST(MissCurve, CensoredWaitsAndFirstAccesses) {
  // Half the instants saw their block come back after 10 ms, the other half waited 0.5 s
  // and were still waiting when the epoch ended; 5 first accesses per second.
  MissCurve m;
  m.AddWaits(1, 0.01, 0, 500, 1, 0, false);
  m.AddWaits(1, 0.5, 0, 500, 1, 0, true);
  m.set_blocks(1, 1000);
  m.AddFirst(5);
  m.AddSpan(1);
  EXPECT_NEAR(m.Footprint(0.1), 500 + 0.5, 5) << "the quick half and the first accesses";
  EXPECT_NEAR(m.MissesAt(600), 5, 1) << "the quick half fits, the first accesses miss";
  EXPECT_EQ(m.CapacityFor(4), UINT64_MAX) << "first accesses miss at any size";
}

TEST(ReuseTracker, SmallMappingIsTrackedWhole) {
  // Fewer blocks than the sample's size: every block is tracked, no sampling error, only
  // the model's.
  const uint64_t blocks = 2000;
  const std::vector<uint64_t> trace = MixedTrace(400000, blocks, 7, /*stream=*/false);
  ReuseTracker tr(blocks, 1);
  ASSERT_TRUE(tr.ok());
  uint64_t tick = 0;
  Feed(tr, trace, &tick);
  EXPECT_EQ(tr.shift(), 0u);
  EXPECT_EQ(tr.dropped(), 0u);
  tr.EndEpoch(tick, Absent);
  const std::vector<int64_t> exact = ExactDistances(trace);
  double sum = 0;
  for (uint64_t c : {31u, 100u, 250u, 500u, 1000u, 1500u}) {
    const double err = std::fabs(EstimatedMissRatio(tr.curve(), c) - ExactMissRatio(exact, c));
    EXPECT_LT(err, 0.05) << "capacity " << c;
    sum += err;
  }
  EXPECT_LT(sum / 6, 0.02) << "mean absolute error of the miss ratio";
  RecordProperty("mean_abs_error_x1e4", static_cast<int>(sum / 6 * 1e4));
}

TEST(ReuseTracker, FixedSizeSampleFollowsALargeFile) {
  // Hot and warm sets of 4096 and 32768 blocks and a stream over 16M, 4096 tracked: the
  // sample shrinks to a fraction and the curve stays close to the exact one.
  const uint64_t blocks = 1 << 18;
  const std::vector<uint64_t> trace = MixedTrace(500000, blocks, 11);
  ReuseTracker tr(uint64_t{1} << 30, 2);
  uint64_t tick = 0;
  Feed(tr, trace, &tick);
  EXPECT_GE(tr.shift(), 4u) << "the sample shrank to stay within its size";
  EXPECT_LE(tr.tracked(), tr.max_tracked());
  tr.EndEpoch(tick, Absent);
  const std::vector<int64_t> exact = ExactDistances(trace);
  double sum = 0;
  int n = 0;
  for (uint64_t c = 1024; c <= blocks; c += 8192) {
    const double err = std::fabs(EstimatedMissRatio(tr.curve(), c) - ExactMissRatio(exact, c));
    EXPECT_LT(err, 0.08) << "capacity " << c;
    sum += err;
    ++n;
  }
  EXPECT_LT(sum / n, 0.04) << "mean absolute error of the miss ratio";
  RecordProperty("mean_abs_error_x1e4", static_cast<int>(sum / n * 1e4));
  RecordProperty("sample_shift", static_cast<int>(tr.shift()));
}

TEST(ReuseTracker, WaitsRunFromTheInstantsAndLapseWhenUnseen) {
  ReuseTracker tr(64, 3);
  for (uint64_t b = 5; b <= 7; ++b) tr.Record(b, ReuseTracker::Kind::kMiss, 100000);
  tr.Drain();
  tr.NoteParked(5, 1000000);                        // resident: parked at 1.0 s
  tr.NoteAbsent(6, 1000000);                        // not resident: instants at 1.0 s,
  tr.NoteAbsent(6, 1100000);                        // 1.1 s
  tr.NoteAbsent(7, 1000000);
  tr.Record(5, ReuseTracker::Kind::kHit, 1020000);  // waited 20 ms from its parking
  tr.Record(7, ReuseTracker::Kind::kUnseen, 0);     // read ahead: its instant is lost
  tr.Drain();
  tr.Record(7, ReuseTracker::Kind::kMiss, 1030000);  // no instant pending: no wait
  tr.Drain();
  // Block 6 still waits at 1.5 s: two censored waits (0.5 s and 0.4 s).
  tr.EndEpoch(1500000, [](uint64_t b) {
    return b == 6 ? ReuseTracker::State::kAbsent : ReuseTracker::State::kResident;
  });
  const MissCurve& c = tr.curve();
  // Each instant weighs exp(-ln 2 * age / 5 s): 20 ms, 0.5 s and 0.4 s old.
  const double k = std::log(2.0) / ReuseTracker::kHalfLife;
  EXPECT_NEAR(c.waits(), std::exp(-k * 0.02) + std::exp(-k * 0.5) + std::exp(-k * 0.4), 1e-3);
  EXPECT_DOUBLE_EQ(c.blocks(), 3);
  EXPECT_NEAR(c.first_rate(), 3 / 1.4, 1e-9);
  EXPECT_EQ(tr.hits(), 1u);
  // The resident stratum's one wait is 20 ms: with 2 of its 3 blocks, a window of 30 ms
  // touches them... as far as one wait can tell.
  EXPECT_GT(c.Footprint(0.03), 1.9);
}

TEST(ReuseTracker, WorkingSetFollowsAPhaseChange) {
  // 2048 blocks reused for 20 s, then 256 of them: within a few half-lives the working set
  // is the new one.
  ReuseTracker tr(4096, 4);
  std::mt19937_64 rng(5);
  std::vector<uint64_t> big(200000), small(200000);
  for (auto& b : big) b = rng() % 2048;
  for (auto& b : small) b = rng() % 256;
  uint64_t tick = 0;
  Feed(tr, big, &tick);
  EXPECT_GT(tr.working_set(), 1500u);
  EXPECT_LE(tr.working_set(), 2300u);
  Feed(tr, small, &tick);
  EXPECT_LT(tr.working_set(), 400u);
  EXPECT_GE(tr.working_set(), 200u);
  EXPECT_GE(tr.phases(), 1u);
}

TEST(ReuseTracker, FullRingDropsAndCounts) {
  ReuseTracker tr(1 << 20, 7);
  uint64_t pushed = 0;
  for (uint64_t b = 0; pushed < ReuseTracker::kRingEvents + 10; ++b) {
    if (!tr.Sampled(b)) continue;
    tr.Record(b, ReuseTracker::Kind::kMiss, 0);
    ++pushed;
  }
  EXPECT_EQ(tr.dropped(), 10u);
  EXPECT_EQ(tr.Drain(), ReuseTracker::kRingEvents);
}

TEST(ReuseTracker, AllocatesNothingPerAccess) {
  // Everything is allocated when the tracker is made; recording (the fault path), draining
  // and ending epochs (the sizer), with the sample shrinking, allocate nothing.
  ReuseTracker tr(1 << 20, 8, /*max_tracked=*/256);
  const std::vector<uint64_t> trace = MixedTrace(300000, 1 << 14, 9);
  uint64_t tick = 0;
  const uint64_t before = umaptest::ThreadAllocations();
  Feed(tr, trace, &tick);
  tr.NoteParked(trace[0], tick);
  tr.EndEpoch(tick, Absent);
  EXPECT_GT(tr.curve().total_rate(), 0);
  const uint64_t after = umaptest::ThreadAllocations();
  EXPECT_GT(tr.shift(), 0u) << "the sample shrank";
  EXPECT_EQ(after - before, 0u) << "allocations while recording " << trace.size()
                                << " accesses";
}

}  // namespace
}  // namespace umap::runtime
