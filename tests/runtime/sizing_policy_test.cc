// The capacity controller, the split among mappings and among processes: pure logic,
// simulated time.
#include "runtime/sizing/sizing_policy.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "runtime/sizing/capacity_split.h"
#include "runtime/sizing/cgroup_board.h"
#include "runtime/stats/stats_segment.h"
#include "tests/testing/temp_dir.h"

namespace umap::runtime {
namespace {

constexpr uint64_t kSec = 1'000'000;

SizingPolicy::Options Opts() {
  SizingPolicy::Options o;
  o.floor_blocks = 100;
  o.min_step_blocks = 50;
  return o;
}

TEST(SizingPolicy, CeilingIsTheTightestOfCapBudgetAndPressure) {
  SizingPolicy p(Opts());
  auto out = p.Step({0, 500, 10000, 3000, 0, false});
  EXPECT_EQ(out.ceiling, 3000u);
  EXPECT_EQ(out.limit, 500u) << "growth is the fault path's, not the policy's";
  out = p.Step({1, 5000, 10000, 3000, 0, false});
  EXPECT_EQ(out.limit, 3000u) << "a budget below the limit lowers it";
  out = p.Step({2, 500, 400, 3000, 0, false});
  EXPECT_EQ(out.ceiling, 400u);
  out = p.Step({3, 500, 10000, 0, 0, false});
  EXPECT_EQ(out.ceiling, SizingPolicy::kMinBlocks) << "the pool keeps a few blocks";
}

TEST(SizingPolicy, PressureShrinksToTheVirtualCapacityThenBySteps) {
  SizingPolicy p(Opts());
  auto out = p.Step({0, 4000, 10000, 10000, 1000, true});
  EXPECT_TRUE(out.pressure_acted);
  EXPECT_EQ(out.limit, 1000u);
  EXPECT_EQ(out.ceiling, 1000u);
  // Within the PSI window: the same event.
  out = p.Step({kSec, 1000, 10000, 10000, 1000, true});
  EXPECT_FALSE(out.pressure_acted);
  // Already at the virtual capacity: one eighth down.
  out = p.Step({3 * kSec, 1000, 10000, 10000, 1000, true});
  EXPECT_EQ(out.limit, 875u);
  // Never below the floor.
  out = p.Step({6 * kSec, 120, 10000, 10000, 10, true});
  EXPECT_EQ(out.limit, 100u);
  out = p.Step({9 * kSec, 100, 10000, 10000, 10, true});
  EXPECT_EQ(out.limit, 100u);
}

TEST(SizingPolicy, CeilingRisesAfterQuietHolds) {
  SizingPolicy p(Opts());
  p.Step({0, 4000, 10000, 10000, 1000, true});
  EXPECT_EQ(p.pressure_ceiling(), 1000u);
  EXPECT_EQ(p.Step({3 * kSec, 1000, 10000, 10000, 0, false}).ceiling, 1000u);
  EXPECT_EQ(p.Step({4 * kSec, 1000, 10000, 10000, 0, false}).ceiling, 1125u);
  EXPECT_EQ(p.Step({8 * kSec, 1125, 10000, 10000, 0, false}).ceiling, 1265u);
  // Rises until it no longer binds.
  uint64_t t = 8 * kSec;
  for (int i = 0; i < 40; ++i) p.Step({t += 4 * kSec, 1000, 10000, 10000, 0, false});
  EXPECT_EQ(p.pressure_ceiling(), SizingPolicy::kUnbounded);
}

// A cgroup whose reclaim stalls (PSI fires) whenever the cache holds more than `knee`
// blocks, and a workload that always wants more (every tick it grows up to the ceiling).
// Pressure takes the cache to its virtual capacity (3000 here, as good by the miss curve);
// the controller then probes upward ever more rarely: after the first minutes, pressure
// is rare, the limit changes direction rarely, and never drops below the virtual capacity.
TEST(SizingPolicy, SettlesInsteadOfOscillating) {
  SizingPolicy p(Opts());
  const uint32_t knee = 6000;
  uint32_t limit = 100;
  int reversals = 0, pressure_late = 0;
  int dir = 0;
  uint32_t lowest_late = ~0u;
  for (uint64_t t = 0; t < 1200 * kSec; t += kSec / 10) {
    const bool pressure = limit > knee;
    const auto out = p.Step({t, limit, 100000, 50000, 3000, pressure});
    uint32_t next = out.limit;
    if (!pressure) next = std::min(out.ceiling, next + 200);  // the fault path grows
    const int d = next > limit ? 1 : next < limit ? -1 : 0;
    if (t > 600 * kSec) {
      if (d != 0 && dir != 0 && d != dir) ++reversals;
      pressure_late += out.pressure_acted ? 1 : 0;
      lowest_late = std::min(lowest_late, next);
    }
    if (d != 0) dir = d;
    limit = next;
  }
  EXPECT_LE(pressure_late, 3) << "pressure events in the last 10 minutes";
  EXPECT_LE(reversals, 6) << "direction changes in the last 10 minutes";
  EXPECT_GE(lowest_late, 3000u) << "never below the virtual capacity";
  EXPECT_LE(limit, knee + knee / 4);
  EXPECT_EQ(p.hold_us(), 64 * kSec) << "probing backed off";
}

TEST(SizingPolicy, BackoffIsForgottenOncePressureIsGone) {
  SizingPolicy p(Opts());
  uint64_t t = 0;
  for (int i = 0; i < 6; ++i) {
    p.Step({t, 2000, 100000, 50000, 500, true});
    t += p.hold_us() + kSec;  // just after a rise: backs off
    p.Step({t, 2000, 100000, 50000, 500, false});
  }
  EXPECT_EQ(p.hold_us(), 64 * kSec);
  // Quiet until the ceiling no longer binds; then pressure starts afresh.
  for (int i = 0; i < 100 && p.pressure_ceiling() != SizingPolicy::kUnbounded; ++i) {
    t += 64 * kSec;
    p.Step({t, 2000, 100000, 50000, 500, false});
  }
  ASSERT_EQ(p.pressure_ceiling(), SizingPolicy::kUnbounded);
  p.Step({t + kSec, 2000, 100000, 50000, 500, true});
  EXPECT_EQ(p.hold_us(), 4 * kSec);
}

std::vector<double> Linear(double from, uint32_t steps, double slope) {
  std::vector<double> v;
  for (uint32_t j = 0; j <= steps; ++j) v.push_back(std::max(0.0, from - slope * j));
  return v;
}

TEST(SplitCapacity, GoesToTheSteepestCurveNotTheFirstComer) {
  const std::vector<double> flat = Linear(1000, 16, 1);    // a scan: little to gain
  const std::vector<double> steep = Linear(1000, 16, 60);  // reuse: much to gain
  std::vector<SplitClaim> claims = {{flat, 16}, {steep, 16}};
  const std::vector<uint32_t> got = SplitCapacity(claims, 16, 1);
  EXPECT_EQ(got[0], 1u);
  EXPECT_EQ(got[1], 15u);
}

TEST(SplitCapacity, LooksAheadPastACliff) {
  // A working set that helps only once it fits whole (8 quanta) beats a gentle slope.
  std::vector<double> cliff(17, 1000);
  for (int j = 8; j <= 16; ++j) cliff[j] = 0;
  const std::vector<double> gentle = Linear(1000, 16, 40);
  std::vector<SplitClaim> claims = {{gentle, 16}, {cliff, 16}};
  const std::vector<uint32_t> got = SplitCapacity(claims, 12, 0);
  EXPECT_EQ(got[1], 8u);
  EXPECT_EQ(got[0], 4u);
}

TEST(SplitCapacity, NobodyGainsLeavesQuantaUnassigned) {
  const std::vector<double> flat(9, 100);
  std::vector<SplitClaim> claims = {{flat, 8}, {flat, 8}};
  const std::vector<uint32_t> got = SplitCapacity(claims, 16, 2);
  EXPECT_EQ(got[0] + got[1], 4u);
}

TEST(CgroupBoard, MaxMinShareGivesSmallDemandsInFullAndSplitsTheRestAndTheSurplus) {
  const std::vector<uint64_t> d = {10, 100, 100};
  EXPECT_EQ(CgroupBoard::MaxMinShare(d, 0, 90), 10u);
  EXPECT_EQ(CgroupBoard::MaxMinShare(d, 1, 90), 40u);
  EXPECT_EQ(CgroupBoard::MaxMinShare(d, 2, 90), 40u);
  // Room the demands leave is split equally: 1000 - 210 = 790, a third each.
  EXPECT_EQ(CgroupBoard::MaxMinShare(d, 0, 1000), 10u + 263u);
  EXPECT_EQ(CgroupBoard::MaxMinShare(d, 1, 1000), 100u + 263u);
  uint64_t total = 0;
  for (size_t i = 0; i < d.size(); ++i) total += CgroupBoard::MaxMinShare(d, i, 1000);
  EXPECT_LE(total, 1000u);
  // Alone, a runtime may take all of the room whatever it asks.
  const std::vector<uint64_t> one = {10};
  EXPECT_EQ(CgroupBoard::MaxMinShare(one, 0, 1000), 1000u);
}

TEST(CgroupBoard, LateComerConvergesToAnEqualShare) {
  umaptest::TempDir dir;
  uint64_t now = StatsSegment::MonotonicMicros();
  auto a = CgroupBoard::Join("/test/cg", dir.path());
  auto b = CgroupBoard::Join("/test/cg", dir.path());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->path(), (*b)->path());
  // a holds nearly everything; both keep asking for one more step of 10.
  const uint64_t room = 1000;
  uint64_t ha = 950, hb = 50;
  for (int round = 0; round < 100; ++round) {
    now += 100'000;
    const auto va = (*a)->Publish(ha, ha + 10, now, [&](uint64_t) { return room; });
    const auto vb = (*b)->Publish(hb, hb + 10, now, [&](uint64_t) { return room; });
    EXPECT_EQ(va.runtimes, 2u);
    ha = std::min(ha + 10, va.share);  // grows by a step when allowed, gives back at once
    hb = std::min(hb + 10, vb.share);
  }
  EXPECT_NEAR(static_cast<double>(ha), 500, 20);
  EXPECT_NEAR(static_cast<double>(hb), 500, 20);
}

TEST(CgroupBoard, TheLastMemberToLeaveRemovesTheFileAndAKilledOneDoesNotKeepIt) {
  umaptest::TempDir dir;
  auto a = CgroupBoard::Join("/test/cg3", dir.path());
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string path = (*a)->path();
  // A member that is killed: it never leaves, its slot stays until stale.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto k = CgroupBoard::Join("/test/cg3", dir.path());
    ::_exit(k.ok() ? 0 : 1);  // no destructor: as a SIGKILL would leave it
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto b = CgroupBoard::Join("/test/cg3", dir.path());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->path(), path);
  EXPECT_EQ((*b)->Publish(0, 0, StatsSegment::MonotonicMicros(), [](uint64_t) { return 0; })
                .runtimes,
            3u)
      << "the killed member's slot is live until stale";
  a->reset();
  EXPECT_EQ(::access(path.c_str(), F_OK), 0) << "b is still on the board";
  b->reset();
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "the last member out removed " << path;
  // The last member killed: the next Join of this user, of any cgroup, removes the board.
  std::string abandoned;
  {
    auto named = CgroupBoard::Join("/test/cg4", dir.path());
    ASSERT_TRUE(named.ok()) << named.status();
    abandoned = (*named)->path();
  }
  const pid_t last = ::fork();
  ASSERT_GE(last, 0);
  if (last == 0) {
    auto k = CgroupBoard::Join("/test/cg4", dir.path());
    ::_exit(k.ok() ? 0 : 1);
  }
  ASSERT_EQ(::waitpid(last, &status, 0), last);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(::access(abandoned.c_str(), F_OK), 0) << "its last member never left";
  auto other = CgroupBoard::Join("/test/cg5", dir.path());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(::access(abandoned.c_str(), F_OK), 0) << "removed by the next Join";
  EXPECT_EQ(::access((*other)->path().c_str(), F_OK), 0);
  other->reset();
  // A later job starts a new board under the same name.
  auto c = CgroupBoard::Join("/test/cg3", dir.path());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->Publish(0, 0, StatsSegment::MonotonicMicros(), [](uint64_t) { return 0; })
                .runtimes,
            1u);
}

TEST(CgroupBoard, StaleSlotsAreIgnoredAndReclaimed) {
  umaptest::TempDir dir;
  const uint64_t now = StatsSegment::MonotonicMicros();
  auto a = CgroupBoard::Join("/test/cg2", dir.path());
  ASSERT_TRUE(a.ok());
  (*a)->Publish(500, 500, now, [](uint64_t) { return 1000; });
  auto b = CgroupBoard::Join("/test/cg2", dir.path());
  ASSERT_TRUE(b.ok());
  // a has not published for more than kStaleUs: b sees itself alone.
  const auto v = (*b)->Publish(10, 2000, now + CgroupBoard::kStaleUs + 1,
                               [](uint64_t) { return 1000; });
  EXPECT_EQ(v.runtimes, 1u);
  EXPECT_EQ(v.share, 1000u);
}

}  // namespace
}  // namespace umap::runtime
