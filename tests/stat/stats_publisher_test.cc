// The stats segment of a real runtime over a fault-injecting Env: the figures umap-stat
// shows follow what the runtime does, and a read, write or fdatasync stalled in the
// backend is visible while it lasts (the publisher never waits for the runtime).
#include "runtime/stats/stats_publisher.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "faultinject/fault_env.h"
#include "gtest/gtest.h"
#include "runtime/runtime.h"
#include "tests/runtime/test_file.h"
#include "tools/umap_stat_reader.h"

namespace umap::runtime {
namespace {

using ::umap::faultinject::Fault;
using ::umap::faultinject::FaultEnv;
using ::umap::faultinject::Op;

constexpr size_t kBlock = 4096;
constexpr size_t kSize = 64 * kBlock;

class StatsPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RuntimeOptions o;
    o.cache_bytes = 32 * kBlock;
    o.block_size = kBlock;
    o.env = &env_;
    o.prefetch_bytes = 0;  // one fault, one read: offsets are exact
    o.stats_period_ms = 20;
    o.journal_dir = dir_.File("journal");
    auto rt = Runtime::Create(o);
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    ASSERT_NE(rt_->stats_publisher(), nullptr);
    file_ = dir_.File("f");
    fd_ = ::umaptest::MakePatternFile(file_, kSize);
    ASSERT_GE(fd_, 0);
    auto p = rt_->Map(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    ASSERT_TRUE(p.ok()) << p.status();
    p_ = static_cast<char*>(*p);
  }
  void TearDown() override {
    env_.ClearAll();
    rt_.reset();
    ::close(fd_);
  }

  // A fresh copy of the segment, published now.
  tools::StatsSnapshot Snap() {
    rt_->stats_publisher()->PublishNow();
    auto s = tools::ReadSegment(rt_->stats_publisher()->path(), ::getpid());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : tools::StatsSnapshot{};
  }

  // Snapshots until pred holds (at most 2 s): a fault's handler updates the figures just
  // after it woke the faulting thread.
  template <typename Pred>
  tools::StatsSnapshot SnapUntil(Pred pred) {
    tools::StatsSnapshot s = Snap();
    for (int i = 0; i < 200 && s.layout != nullptr && !pred(*s.layout); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      s = Snap();
    }
    return s;
  }

  ::umaptest::TempDir dir_;
  FaultEnv env_{Env::Default()};
  std::unique_ptr<Runtime> rt_;
  std::string file_;
  int fd_ = -1;
  char* p_ = nullptr;
};

TEST_F(StatsPublisherTest, MappingFiguresFollowFaultsWritesAndUmsync) {
  for (int b = 0; b < 4; ++b) {
    volatile char c = p_[b * kBlock];  // four blocks read: clean, write-protected
    (void)c;
  }
  std::memset(p_ + kBlock, 'a', 3 * kBlock);  // three of them written: first-write faults
  tools::StatsSnapshot s =
      SnapUntil([](const StatsLayout& l) { return l.mappings[0].first_writes >= 3; });
  ASSERT_NE(s.layout, nullptr);
  const StatsLayout& l = *s.layout;
  EXPECT_STREQ(l.fault_mode, "signal");
  EXPECT_STREQ(l.uffd_access, ::getuid() == 0 ? "syscall" : "user-mode-only");
  EXPECT_STREQ(l.policy, "atomic");
  EXPECT_EQ(l.block_size, kBlock);
  ASSERT_EQ(l.mappings_total, 1u);
  ASSERT_EQ(l.mappings_listed, 1u);
  const StatsMapping& m = l.mappings[0];
  EXPECT_EQ(std::string(m.path), file_);
  EXPECT_EQ(m.writable, 1u);
  EXPECT_EQ(m.length, kSize);
  EXPECT_EQ(m.misses, 4u);  // each block read once from the file
  EXPECT_EQ(m.faults, m.hits + m.misses);
  EXPECT_EQ(m.first_writes, 3u);
  EXPECT_EQ(m.dirty_blocks, 3u);
  EXPECT_EQ(m.resident_bytes, 4 * kBlock);
  EXPECT_EQ(l.oldest_read.kind, kStatsIoNone);
  EXPECT_EQ(l.journal_open, 1u);
  EXPECT_EQ(std::string(l.journal_dir), dir_.File("journal"));

  ASSERT_TRUE(rt_->Sync(p_, kSize).ok());
  tools::StatsSnapshot after = Snap();
  EXPECT_EQ(after.layout->mappings[0].dirty_blocks, 0u);
  EXPECT_EQ(after.layout->mappings[0].umsyncs, 1u);
  EXPECT_EQ(after.layout->mappings[0].umsync_age_us, 0u);
  EXPECT_GE(after.layout->journal_commits, 1u);
}

TEST_F(StatsPublisherTest, AStalledReadIsShownWithItsFileOffsetAndGrowingAge) {
  ASSERT_TRUE(env_.FailNext(Op::kRead, 1, Fault::Stall(absl::InfiniteDuration())).ok());
  std::thread reader([&] {
    volatile char c = p_[5 * kBlock];  // blocks in the fault until the stall is released
    (void)c;
  });
  ASSERT_TRUE(env_.WaitForStalled(1, absl::Seconds(10)));
  tools::StatsSnapshot a = Snap();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  tools::StatsSnapshot b = Snap();
  env_.ReleaseStalls();
  reader.join();
  ASSERT_NE(a.layout, nullptr);
  ASSERT_NE(b.layout, nullptr);
  const StatsRequest& r = b.layout->oldest_read;
  EXPECT_EQ(r.kind, kStatsIoRead);
  EXPECT_EQ(std::string(r.path), file_);
  EXPECT_EQ(r.offset, 5 * kBlock);
  EXPECT_EQ(r.length, kBlock);
  EXPECT_EQ(r.attempt, 0u);
  EXPECT_GE(b.layout->reads_in_flight, 1u);
  EXPECT_GE(r.age_us, a.layout->oldest_read.age_us + 40'000) << "the age grows while stalled";
  // Released: nothing in flight any more.
  for (int i = 0; i < 100 && Snap().layout->oldest_read.kind != kStatsIoNone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(Snap().layout->oldest_read.kind, kStatsIoNone);
}

TEST_F(StatsPublisherTest, AStalledWriteBackAndAStalledFdatasyncAreShown) {
  std::memset(p_, 'w', kBlock);
  ASSERT_TRUE(env_.FailNext(Op::kWrite, 1, Fault::Stall(absl::InfiniteDuration())).ok());
  std::thread syncer([&] { EXPECT_TRUE(rt_->Sync(p_, kSize).ok()); });
  ASSERT_TRUE(env_.WaitForStalled(1, absl::Seconds(10)));
  tools::StatsSnapshot w = Snap();
  ASSERT_NE(w.layout, nullptr);
  EXPECT_EQ(w.layout->oldest_write.kind, kStatsIoWrite);
  EXPECT_EQ(std::string(w.layout->oldest_write.path), file_);
  EXPECT_EQ(w.layout->oldest_write.offset, 0u);
  EXPECT_GT(w.layout->mappings[0].umsync_age_us, 0u) << "the umsync is running";
  ASSERT_TRUE(env_.FailNext(Op::kSync, 1, Fault::Stall(absl::InfiniteDuration())).ok());
  env_.ReleaseStalls();
  // Now the fdatasync stalls: no request in flight, but the umsync's age keeps growing.
  ASSERT_TRUE(env_.WaitForStalled(1, absl::Seconds(10)));
  tools::StatsSnapshot f1 = Snap();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  tools::StatsSnapshot f2 = Snap();
  env_.ReleaseStalls();
  syncer.join();
  EXPECT_EQ(f2.layout->oldest_write.kind, kStatsIoNone);
  EXPECT_GE(f2.layout->mappings[0].umsync_age_us, f1.layout->mappings[0].umsync_age_us + 40'000);
  EXPECT_EQ(Snap().layout->mappings[0].umsync_age_us, 0u);
}

TEST_F(StatsPublisherTest, TheSegmentGoesAwayWithTheRuntime) {
  const std::string path = rt_->stats_publisher()->path();
  ASSERT_EQ(::access(path.c_str(), F_OK), 0);
  ASSERT_TRUE(rt_->Unmap(p_, kSize).ok());
  rt_.reset();
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

TEST_F(StatsPublisherTest, CacheSizingFiguresArePublished) {
  for (size_t off = 0; off < 8 * kBlock; off += kBlock) (void)static_cast<volatile char*>(p_)[off];
  const tools::StatsSnapshot s = SnapUntil([](const StatsLayout& l) {
    return l.mappings_listed == 1 && l.mappings[0].max_bytes > 0;
  });
  ASSERT_NE(s.layout, nullptr);
  const StatsLayout& l = *s.layout;
  const umap_stats st = rt_->Stats();
  EXPECT_EQ(l.lazy_sizing, 1u);
  EXPECT_EQ(l.cache_bytes_capacity, st.cache_capacity_bytes);
  EXPECT_GT(l.cache_bytes_ceiling, 0u);
  EXPECT_GT(l.memory_limit_bytes, 0u);
  EXPECT_NE(std::string(l.memory_source), "");
  EXPECT_EQ(l.mappings[0].max_bytes, st.cache_capacity_bytes) << "one mapping: all of it";
}

}  // namespace
}  // namespace umap::runtime
