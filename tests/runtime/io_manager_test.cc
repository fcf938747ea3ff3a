// IoManager on real files: merged reads give exactly the right bytes for random, sequential
// and strided patterns across threads and files, on both engines; deadlines retry and then
// fail with ETIMEDOUT; a descriptor-less file (FaultEnv) goes through File::ReadAt.
#include "runtime/io/io_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/posix_error.h"
#include "faultinject/fault_env.h"
#include "tests/runtime/fake_io_client.h"
#include "tests/runtime/test_file.h"

namespace umap::runtime::io {
namespace {

using umaptest::MakePatternFile;
using umaptest::PatternByte;
using umaptest::TempDir;

constexpr size_t kBlock = 4096;

// Options for `channels` channels of either engine (io_uring rings or posix threads).
IoOptions ChannelOptions(Engine engine, unsigned channels, unsigned depth, uint32_t cache_blocks) {
  IoOptions o;
  o.engine = engine;
  o.channels = channels;
  o.uring_channels = channels;
  o.depth = depth;
  o.cache_blocks = cache_blocks;
  return o;
}

struct Case {
  Engine engine;
  const char* pattern;
};

class IoManagerBytesTest : public ::testing::TestWithParam<Case> {};

// Two files, four submitting threads, each with its own blocks in the chosen pattern; every
// block must arrive once with its own bytes.
TEST_P(IoManagerBytesTest, MergedReadsDeliverExactlyTheRightBytes) {
  TempDir dir;
  constexpr uint64_t kBlocks = 2048;  // 8 MiB per file
  IoOptions o = ChannelOptions(GetParam().engine, 2, 8, 2 * kBlocks);
  o.max_io_bytes = 64 * kBlock;
  auto m = IoManager::Create(o, Env::Default());
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<std::unique_ptr<FakeMapping>> files;
  for (int f = 0; f < 2; ++f) {
    const std::string path = dir.File(absl::StrCat("f", f));
    int fd = MakePatternFile(path, kBlocks * kBlock);
    ASSERT_GE(fd, 0);
    auto file = Env::Default()->AdoptFd(fd, OpenMode::kReadOnly);
    ::close(fd);
    ASSERT_TRUE(file.ok());
    files.push_back(std::make_unique<FakeMapping>(*std::move(file), kBlocks, kBlocks * kBlock));
    files.back()->Attach(m->get());
  }
  const std::string pattern = GetParam().pattern;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> mine;
      for (uint64_t b = static_cast<uint64_t>(t); b < kBlocks; b += 4) mine.push_back(b);
      if (pattern == "sequential") {
        mine.clear();
        for (uint64_t b = t * kBlocks / 4; b < (t + 1) * kBlocks / 4; ++b) mine.push_back(b);
      } else if (pattern == "random") {
        std::shuffle(mine.begin(), mine.end(), std::mt19937_64(t));
      }  // strided: every 4th block
      for (uint64_t b : mine) {
        for (int f = 0; f < 2; ++f) {
          files[f]->Fill(m->get(), b, static_cast<uint32_t>(f * kBlocks + b));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t merged = 0;
  for (auto& f : files) {
    f->WaitDone(kBlocks);
    for (uint64_t b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(f->done(b), 1) << "block " << b;
      ASSERT_TRUE(f->BlockHasItsBytes(b)) << "block " << b;
    }
    for (const absl::Status& s : f->statuses()) ASSERT_TRUE(s.ok()) << s;
    for (const io::Run& r : f->runs()) merged += r.count > 1;
  }
  IoCounters& c = (*m)->counters();
  EXPECT_EQ(c.blocks.load(), 2 * kBlocks);
  EXPECT_EQ(c.errors.load(), 0u);
  if (pattern == "sequential") {
    EXPECT_GT(merged, 0u) << "adjacent misses were never merged";
  }
  for (auto& f : files) (*m)->RemoveQueue(f->queue());
}

// SetReadCap: a channel's slots past the cap's share take only short reads, so the read
// buffers touched stay near the cap however many reads are in flight at once; without a cap
// every slot takes a whole merged read. 16 runs of 512 KiB queued at once on one channel of
// depth 16: one pass of the channel issues all of them.
TEST(IoManagerReadCap, SlotsPastTheCapTakeOnlyShortReadsSoTheBuffersStayNearIt) {
  constexpr uint64_t kRunBlocks = 128, kRuns = 16, kBlocks = 2 * kRuns * kRunBlocks;
  for (const bool capped : {false, true}) {
    SCOPED_TRACE(capped ? "read cap 1 MiB" : "no read cap");
    TempDir dir;
    IoOptions o = ChannelOptions(Engine::kUring, 1, 16, kBlocks);
    o.max_io_bytes = kRunBlocks * kBlock;
    auto m = IoManager::Create(o, Env::Default());
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_EQ((*m)->engine(), Engine::kUring);
    if (capped) (*m)->SetReadCap(size_t{1} << 20);
    EXPECT_EQ((*m)->large_read_slots(), capped ? 2u : 16u);
    const int fd = MakePatternFile(dir.File("f"), kBlocks * kBlock);
    ASSERT_GE(fd, 0);
    auto file = Env::Default()->AdoptFd(fd, OpenMode::kReadOnly);
    ::close(fd);
    ASSERT_TRUE(file.ok());
    FakeMapping f(*std::move(file), kBlocks, kBlocks * kBlock);
    f.Attach(m->get());
    uint32_t cb = 0;
    for (uint64_t r = 0; r < kRuns; ++r) {  // runs with a gap between them: never merged
      for (uint64_t b = 0; b < kRunBlocks; ++b) f.Fill(m->get(), 2 * r * kRunBlocks + b, cb++, false);
    }
    (*m)->Kick();
    f.WaitDone(kRuns * kRunBlocks);
    for (uint64_t r = 0; r < kRuns; ++r) {
      for (uint64_t b = 0; b < kRunBlocks; ++b) {
        ASSERT_TRUE(f.BlockHasItsBytes(2 * r * kRunBlocks + b)) << "run " << r << " block " << b;
      }
    }
    const size_t resident = (*m)->ResidentBufferBytes();
    if (capped) {
      // 2 slots of 512 KiB, 14 of 64 KiB: 1.875 MiB.
      EXPECT_LE(resident, 2 * o.max_io_bytes + 14 * IoManager::kShortReadBytes);
    } else {
      EXPECT_GE(resident, 8 * o.max_io_bytes) << "16 whole runs were in flight at once";
    }
    (*m)->RemoveQueue(f.queue());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Engines, IoManagerBytesTest,
    ::testing::Values(Case{Engine::kUring, "random"}, Case{Engine::kUring, "sequential"},
                      Case{Engine::kUring, "strided"}, Case{Engine::kPosix, "random"},
                      Case{Engine::kPosix, "sequential"}, Case{Engine::kPosix, "strided"}),
    [](const auto& info) {
      return absl::StrCat(info.param.engine == Engine::kUring ? "uring_" : "posix_",
                          info.param.pattern);
    });

// Merging is visible: blocks queued before a channel looks are read as one request.
TEST(IoManagerTest, AdjacentQueuedMissesBecomeOneRead) {
  TempDir dir;
  constexpr uint64_t kBlocks = 64;
  const std::string path = dir.File("f");
  int fd = MakePatternFile(path, kBlocks * kBlock);
  auto file = Env::Default()->AdoptFd(fd, OpenMode::kReadOnly);
  ::close(fd);
  ASSERT_TRUE(file.ok());
  FakeMapping f(*std::move(file), kBlocks, kBlocks * kBlock);
  IoOptions o;
  o.engine = Engine::kUring;
  o.uring_channels = 1;
  o.depth = 4;
  o.max_io_bytes = 16 * kBlock;
  o.cache_blocks = kBlocks;
  auto m = IoManager::Create(o, Env::Default());
  ASSERT_TRUE(m.ok()) << m.status();
  // Drive the channel by hand: queue 40 blocks in scrambled order, then pump once.
  (*m)->DriveChannelsExternally(true);
  f.Attach(m->get());
  std::vector<uint64_t> order;
  for (uint64_t b = 0; b < 40; ++b) order.push_back(b);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  for (uint64_t b : order) f.Fill(m->get(), b, static_cast<uint32_t>(b));
  while (f.done(39) == 0 || [&] { for (uint64_t b = 0; b < 40; ++b) if (!f.done(b)) return true; return false; }()) {
    (*m)->PumpChannel(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (uint64_t b = 0; b < 40; ++b) EXPECT_TRUE(f.BlockHasItsBytes(b)) << b;
  // 40 blocks in at most 16-block reads: greedy merging around each FIFO head may leave a
  // short run or two, but never anything close to 40 single-block reads.
  uint32_t total = 0, full = 0;
  for (const io::Run& r : f.runs()) {
    EXPECT_LE(r.count, 16u);
    total += r.count;
    full += r.count == 16;
  }
  EXPECT_EQ(total, 40u);
  EXPECT_LE(f.runs().size(), 5u);
  EXPECT_GE(full, 1u);
  EXPECT_EQ((*m)->counters().size_hist[4].load(), full);  // 64 KiB = 4 KiB << 4
  (*m)->DriveChannelsExternally(false);
  (*m)->RemoveQueue(f.queue());
}

class IoManagerTimeoutTest : public ::testing::TestWithParam<Engine> {};

// A 16-block pattern file opened through `env` whose reads stall until released: every read
// (`every_read`) or only the next one. Null (with a failure recorded) if it cannot be set up.
std::unique_ptr<FakeMapping> OpenStalling(const TempDir& dir, faultinject::FaultEnv& env,
                                          bool every_read) {
  const std::string path = dir.File("f");
  int fd = MakePatternFile(path, 16 * kBlock);
  ::close(fd);
  auto file = env.OpenFile(path, OpenMode::kReadOnly);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  const auto stall = faultinject::Fault::Stall(absl::InfiniteDuration());
  absl::Status armed = every_read ? env.FailOneIn(faultinject::Op::kRead, 1, 1, stall)
                                  : env.FailNext(faultinject::Op::kRead, 1, stall);
  EXPECT_TRUE(armed.ok()) << armed;
  if (!armed.ok()) return nullptr;
  return std::make_unique<FakeMapping>(*std::move(file), 16, 16 * kBlock);
}

// A backend that stalls every read: each attempt times out, is retried with backoff, and
// after the retry budget the fill fails with ETIMEDOUT, counted and reported.
TEST_P(IoManagerTimeoutTest, StalledReadsAreRetriedThenFailWithEtimedout) {
  TempDir dir;
  faultinject::FaultEnv env(Env::Default());
  std::unique_ptr<FakeMapping> fm = OpenStalling(dir, env, /*every_read=*/true);
  ASSERT_NE(fm, nullptr);
  FakeMapping& f = *fm;
  IoOptions o = ChannelOptions(GetParam(), 1, 4, 16);
  o.timeout_us = 50'000;
  o.retries = 2;
  auto m = IoManager::Create(o, Env::Default());
  ASSERT_TRUE(m.ok()) << m.status();
  f.Attach(m->get());
  f.Fill(m->get(), 3, 3);
  f.WaitDone(1);
  auto st = f.statuses();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(ErrnoFromStatus(st[0]), ETIMEDOUT) << st[0];
  EXPECT_NE(st[0].message().find("timed out 3 times"), std::string::npos) << st[0];
  IoCounters& c = (*m)->counters();
  EXPECT_EQ(c.timeouts.load(), 3u);
  EXPECT_EQ(c.retries.load(), 2u);
  EXPECT_EQ(c.errors.load(), 1u);
  // The stalled calls return (and are dropped) once released.
  env.ClearAll();
  env.ReleaseStalls();
  (*m)->RemoveQueue(f.queue());
}

// One stall, then the backend recovers: the retry delivers the right bytes.
TEST_P(IoManagerTimeoutTest, ARetryAfterOneStallDeliversTheBytes) {
  TempDir dir;
  faultinject::FaultEnv env(Env::Default());
  std::unique_ptr<FakeMapping> fm = OpenStalling(dir, env, /*every_read=*/false);
  ASSERT_NE(fm, nullptr);
  FakeMapping& f = *fm;
  // Two channels: the stalled helper keeps its thread; another one retries.
  IoOptions o = ChannelOptions(GetParam(), 2, 2, 16);
  o.timeout_us = 50'000;
  o.retries = 2;
  auto m = IoManager::Create(o, Env::Default());
  ASSERT_TRUE(m.ok()) << m.status();
  f.Attach(m->get());
  f.Fill(m->get(), 5, 5);
  f.WaitDone(1);
  ASSERT_EQ(f.statuses().size(), 1u);
  EXPECT_TRUE(f.statuses()[0].ok()) << f.statuses()[0];
  EXPECT_TRUE(f.BlockHasItsBytes(5));
  EXPECT_EQ((*m)->counters().timeouts.load(), 1u);
  EXPECT_EQ((*m)->counters().retries.load(), 1u);
  env.ReleaseStalls();
  (*m)->RemoveQueue(f.queue());
}

// A backend whose reads are interrupted after part of the bytes arrived (EINTR, as an NFS
// "intr" mount or a FUSE request hit by a signal gives): each such read is retried, never
// failed, and every block arrives with its own bytes.
TEST_P(IoManagerTimeoutTest, InterruptedReadsAreRetriedNotFailed) {
  TempDir dir;
  faultinject::FaultEnv env(Env::Default());
  const std::string path = dir.File("f");
  ::close(MakePatternFile(path, 64 * kBlock));
  auto file = env.OpenFile(path, OpenMode::kReadOnly);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE(env.FailOneIn(faultinject::Op::kRead, 2, 7, faultinject::Fault::ShortRead(EINTR)).ok());
  FakeMapping f(*std::move(file), 64, 64 * kBlock);
  auto m = IoManager::Create(ChannelOptions(GetParam(), 2, 4, 64), Env::Default());
  ASSERT_TRUE(m.ok()) << m.status();
  f.Attach(m->get());
  for (uint64_t b = 0; b < 64; b += 2) f.Fill(m->get(), b, static_cast<uint32_t>(b));
  f.WaitDone(32);
  for (const absl::Status& st : f.statuses()) EXPECT_TRUE(st.ok()) << st;
  for (uint64_t b = 0; b < 64; b += 2) EXPECT_TRUE(f.BlockHasItsBytes(b)) << "block " << b;
  EXPECT_GT(env.fired(faultinject::FaultKind::kShortRead), 0u);
  EXPECT_EQ((*m)->counters().interrupted.load(), env.fired(faultinject::FaultKind::kShortRead));
  EXPECT_EQ((*m)->counters().errors.load(), 0u);
  (*m)->RemoveQueue(f.queue());
}

// A FaultEnv file made with through_ring is read on the ring like a plain file (no
// synchronous reads), and the faults armed on it reach the ring's results: an interrupted
// read is retried, a failed one fails its fill, and every other block arrives.
TEST(IoManagerRingFaultTest, FaultsReachReadsOnTheRing) {
  TempDir dir;
  faultinject::FaultEnv::Options eo;
  eo.through_ring = true;
  faultinject::FaultEnv env(Env::Default(), eo);
  const std::string path = dir.File("f");
  ::close(MakePatternFile(path, 64 * kBlock));
  auto file = env.OpenFile(path, OpenMode::kReadOnly);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->SupportsRing());
  FakeMapping f(*std::move(file), 64, 64 * kBlock);
  auto m = IoManager::Create(ChannelOptions(Engine::kUring, 2, 4, 64), Env::Default());
  ASSERT_TRUE(m.ok()) << m.status();
  f.Attach(m->get());
  ASSERT_TRUE(env.FailNext(faultinject::Op::kRead, 1, faultinject::Fault::Error(EIO)).ok());
  f.Fill(m->get(), 5, 5);
  f.WaitDone(1);
  ASSERT_EQ(f.statuses().size(), 1u);
  EXPECT_EQ(ErrnoFromStatus(f.statuses()[0]), EIO) << f.statuses()[0];
  ASSERT_TRUE(
      env.FailOneIn(faultinject::Op::kRead, 2, 7, faultinject::Fault::ShortRead(EINTR)).ok());
  for (uint64_t b = 10; b < 64; b += 2) f.Fill(m->get(), b, static_cast<uint32_t>(b));
  f.WaitDone(1 + 27);
  for (size_t i = 1; i < f.statuses().size(); ++i) EXPECT_TRUE(f.statuses()[i].ok());
  for (uint64_t b = 10; b < 64; b += 2) EXPECT_TRUE(f.BlockHasItsBytes(b)) << "block " << b;
  EXPECT_GT(env.fired(faultinject::FaultKind::kShortRead), 0u);
  EXPECT_EQ((*m)->counters().interrupted.load(), env.fired(faultinject::FaultKind::kShortRead));
  EXPECT_GE(env.ring_results(), 28u) << "read through ReadAt, not the ring";
  (*m)->RemoveQueue(f.queue());
}

INSTANTIATE_TEST_SUITE_P(Engines, IoManagerTimeoutTest,
                         ::testing::Values(Engine::kUring, Engine::kPosix),
                         [](const auto& info) {
                           return info.param == Engine::kUring ? "uring" : "posix";
                         });

TEST(IoManagerTest, RemovingAQueueCancelsItsQueuedFills) {
  TempDir dir;
  faultinject::FaultEnv env(Env::Default());
  // Every read stalls until released: the first fills sit in flight, the rest queued.
  std::unique_ptr<FakeMapping> fm = OpenStalling(dir, env, /*every_read=*/true);
  ASSERT_NE(fm, nullptr);
  FakeMapping& f = *fm;
  IoOptions o;
  o.engine = Engine::kPosix;
  o.channels = 1;
  o.depth = 1;
  o.cache_blocks = 16;
  auto m = IoManager::Create(o, Env::Default());
  ASSERT_TRUE(m.ok());
  f.Attach(m->get());
  for (uint64_t b = 0; b < 16; b += 2) f.Fill(m->get(), b, static_cast<uint32_t>(b));
  ASSERT_TRUE(env.WaitForStalled(1, absl::Seconds(10)));
  std::thread remover([&] { (*m)->RemoveQueue(f.queue()); });
  f.WaitDone(7);  // the 7 queued ones are cancelled at once
  int cancelled = 0;
  for (const absl::Status& s : f.statuses()) cancelled += absl::IsCancelled(s);
  EXPECT_EQ(cancelled, 7);
  env.ClearAll();
  env.ReleaseStalls();  // the one in flight completes; removal then returns
  remover.join();
  EXPECT_EQ(f.statuses().size(), 8u);
}

TEST(IoManagerTest, RejectsBadOptionsByName) {
  IoOptions o;
  o.cache_blocks = 16;
  o.max_io_bytes = 5000;
  auto m = IoManager::Create(o, Env::Default());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("io_max_bytes"), std::string::npos);
  o.max_io_bytes = 65536;
  o.depth = 0;
  m = IoManager::Create(o, Env::Default());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("io_depth"), std::string::npos);
}

}  // namespace
}  // namespace umap::runtime::io
