// The reuse tracker and its miss curve: miss-ratio curves against an exact LRU simulation,
// the fixed-size sample, aging, and that the tracker allocates nothing per access.
#include "runtime/reuse_tracker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <new>
#include <random>
#include <vector>

#include "runtime/miss_curve.h"

// Every allocation of this test binary is counted (replaceable global operator new). GCC
// sees the replacement's free() against the library's operator new where it inlines both.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static std::atomic<uint64_t> g_allocations{0};
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

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

double ExactMissRatio(const std::vector<int64_t>& d, uint64_t c) {
  uint64_t misses = 0;
  for (int64_t x : d) misses += (x < 0 || static_cast<uint64_t>(x) >= c) ? 1 : 0;
  return static_cast<double>(misses) / static_cast<double>(d.size());
}

// A mix of a hot set, a warm set and a cold tail, so the curve has shape.
std::vector<uint64_t> MixedTrace(size_t n, uint64_t blocks, uint32_t seed) {
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
      t.push_back(rng() % blocks);
    }
  }
  return t;
}

// Feeds the trace as if every access faulted (a fully observed stream), access i at 100 us
// times i (10k accesses per second), draining before the ring can fill as the sizer does.
void Feed(ReuseTracker& tr, const std::vector<uint64_t>& trace, uint64_t* tick) {
  uint32_t queued = 0;
  for (uint64_t b : trace) {
    *tick += 100;
    if (!tr.Sampled(b)) continue;
    tr.Record(b, ReuseTracker::Kind::kMiss, *tick);
    if (++queued == 512) {
      tr.Drain();
      queued = 0;
    }
  }
  tr.Drain();
}

double EstimatedMissRatio(const MissCurve& m, uint64_t c) {
  return m.MissesAt(static_cast<double>(c)) / m.total_rate();
}

TEST(MissCurve, OneReuseTimeIsACliff) {
  // 1000 accesses per second, every block reused after exactly 2 s: 2000 blocks in use.
  MissCurve m;
  m.Add(2.0, 1000);
  m.AddSpan(1.0);
  EXPECT_DOUBLE_EQ(m.total_rate(), 1000);
  EXPECT_NEAR(m.MissesAt(1800), 1000, 150) << "short of the set: nearly all miss";
  EXPECT_NEAR(m.MissesAt(2200), 0, 1) << "the set fits";
  const double ws = static_cast<double>(m.CapacityFor(10));
  EXPECT_NEAR(ws, 2000, 200);
}

TEST(MissCurve, HotSetFitsFirst) {
  // Per second: 10k accesses to 100 hot blocks (each reused after 10 ms), 100 accesses to a
  // cold set of 10k blocks (reused after 100 s), 5 first accesses.
  MissCurve m;
  m.Add(0.01, 10000);
  m.Add(100, 100);
  m.AddFirst(5);
  m.AddSpan(1);
  EXPECT_NEAR(m.MissesAt(150), 105, 10) << "the hot set fits in 150 blocks";
  EXPECT_GT(m.MissesAt(50), 4000) << "half of it does not";
  EXPECT_LT(m.CapacityFor(200), 200u);
  EXPECT_EQ(m.CapacityFor(4), UINT64_MAX) << "first accesses miss at any size";
  EXPECT_NEAR(m.MissesAt(1e6), 5, 0.5);
}

TEST(ReuseTracker, SmallMappingIsTrackedWhole) {
  // Fewer blocks than the sample's size: every block is tracked.
  const uint64_t blocks = 2000;
  ReuseTracker tr(blocks, 1);
  ASSERT_TRUE(tr.ok());
  const std::vector<uint64_t> trace = MixedTrace(400000, blocks, 7);
  uint64_t tick = 0;
  Feed(tr, trace, &tick);
  EXPECT_EQ(tr.shift(), 0u);
  EXPECT_EQ(tr.dropped(), 0u);
  tr.EndEpoch(tick);
  const std::vector<int64_t> exact = ExactDistances(trace);
  double sum = 0;
  for (uint64_t c : {10u, 31u, 100u, 250u, 500u, 1000u, 1500u}) {
    const double err = std::fabs(EstimatedMissRatio(tr.curve(), c) - ExactMissRatio(exact, c));
    EXPECT_LT(err, 0.02) << "capacity " << c;
    sum += err;
  }
  EXPECT_LT(sum / 7, 0.01) << "mean absolute error of the miss ratio";
  RecordProperty("mean_abs_error_x1e4", static_cast<int>(sum / 7 * 1e4));
}

TEST(ReuseTracker, FixedSizeSampleFollowsALargeFile) {
  // 2^20 blocks (4 GiB of 4 KiB blocks), 4096 tracked: the sample shrinks to a fraction and
  // the curve stays close to the exact one.
  const uint64_t blocks = 1 << 20;
  const std::vector<uint64_t> trace = MixedTrace(800000, blocks / 4, 11);
  ReuseTracker tr(blocks, 2);
  uint64_t tick = 0;
  Feed(tr, trace, &tick);
  EXPECT_GE(tr.shift(), 4u) << "the sample shrank to stay within its size";
  EXPECT_LE(tr.tracked(), tr.max_tracked());
  tr.EndEpoch(tick);
  const std::vector<int64_t> exact = ExactDistances(trace);
  double sum = 0;
  int n = 0;
  for (uint64_t c = 1024; c <= blocks / 4; c += 8192) {
    const double err = std::fabs(EstimatedMissRatio(tr.curve(), c) - ExactMissRatio(exact, c));
    EXPECT_LT(err, 0.02) << "capacity " << c;
    sum += err;
    ++n;
  }
  EXPECT_LT(sum / n, 0.01) << "mean absolute error of the miss ratio";
  RecordProperty("mean_abs_error_x1e4", static_cast<int>(sum / n * 1e4));
  RecordProperty("sample_shift", static_cast<int>(tr.shift()));
}

TEST(ReuseTracker, ParkedHitCountsFromTheParkingAndForTheUnseenHits) {
  ReuseTracker tr(64, 3);
  tr.Record(5, ReuseTracker::Kind::kMiss, 100000);
  tr.Record(5, ReuseTracker::Kind::kMiss, 200000);  // reused after 0.1 s
  tr.Drain();
  tr.NoteParked(5, 1000000);                        // unseen hits may have happened before
  tr.Record(5, ReuseTracker::Kind::kHit, 1020000);  // 20 ms after the parking
  tr.Drain();
  tr.EndEpoch(1020000);
  const MissCurve& c = tr.curve();
  // First access 1, the reuse 1; the block's mean wait is (0.1 + 0.02) / 2 = 60 ms, so the
  // parked hit stands for 1 + 800 / 60 accesses. All over 0.92 s.
  EXPECT_NEAR(c.weight(), 2 + 1 + 800.0 / 60, 1e-6);
  EXPECT_NEAR(c.span(), 0.92, 1e-9);
  EXPECT_NEAR(c.first_rate(), 1 / 0.92, 1e-9);
  EXPECT_EQ(tr.hits(), 1u);
}

TEST(ReuseTracker, PhaseChangeRestartsTheHistory) {
  const uint64_t blocks = 4096;
  ReuseTracker tr(blocks, 4);
  std::mt19937_64 rng(5);
  std::vector<uint64_t> big(100000), small(50000);
  for (auto& b : big) b = rng() % 2048;
  for (auto& b : small) b = rng() % 256;
  uint64_t tick = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    Feed(tr, big, &tick);
    EXPECT_FALSE(tr.EndEpoch(tick));
  }
  EXPECT_GT(tr.working_set(), 1500u);
  EXPECT_LE(tr.working_set(), 2100u);
  Feed(tr, small, &tick);
  EXPECT_TRUE(tr.EndEpoch(tick)) << "the working set fell by 8x";
  EXPECT_EQ(tr.phases(), 1u);
  EXPECT_LT(tr.working_set(), 300u);
  EXPECT_GE(tr.working_set(), 200u);
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
  const std::vector<uint64_t> trace = MixedTrace(300000, 1 << 18, 9);
  uint64_t tick = 0;
  const uint64_t before = g_allocations.load();
  Feed(tr, trace, &tick);
  tr.NoteParked(trace[0], tick);
  tr.EndEpoch(tick);
  tr.VisitTracked(100, tick, [](uint64_t, uint64_t) {});
  const uint64_t after = g_allocations.load();
  EXPECT_GT(tr.shift(), 0u) << "the sample shrank";
  EXPECT_EQ(after - before, 0u) << "allocations while recording " << trace.size()
                                << " accesses";
}

}  // namespace
}  // namespace umap::runtime
