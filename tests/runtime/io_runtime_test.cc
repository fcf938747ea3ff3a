// The I/O channels seen through the runtime: a sequential scan is read in merged reads with
// read-ahead and bypasses the page cache; per-mapping figures; a stalled backend makes the
// faulting thread's read time out, retry and end in SIGBUS; write-backs never have two
// writes of one block in flight.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "faultinject/fault_env.h"
#include "runtime/runtime.h"
#include "tests/runtime/signal_probe.h"
#include "tests/runtime/test_file.h"

namespace umap::runtime {
namespace {

using ::umaptest::MakePatternFile;
using ::umaptest::PatternByte;
using ::umaptest::ProbeRead;
using ::umaptest::TempDir;

constexpr size_t kBlock = 4096;

std::unique_ptr<Runtime> MakeRuntime(RuntimeOptions o) {
  auto rt = Runtime::Create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  return rt.ok() ? *std::move(rt) : nullptr;
}

TEST(IoRuntimeTest, ASequentialScanIsReadInMergedReadsAheadOfTheReader) {
  TempDir dir;
  constexpr size_t kSize = 2048 * kBlock;  // 8 MiB, twice the cache
  int fd = MakePatternFile(dir.File("f"), kSize, O_RDONLY);
  ASSERT_GE(fd, 0);
  RuntimeOptions o;
  o.cache_bytes = 1024 * kBlock;
  o.io_max_bytes = 32 * kBlock;
  o.prefetch_bytes = 64 * kBlock;
  auto rt = MakeRuntime(o);
  ASSERT_NE(rt, nullptr);
  auto p = rt->Map(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  const char* base = static_cast<const char*>(*p);
  for (size_t off = 0; off < kSize; off += 512) {
    ASSERT_EQ(base[off], PatternByte(off)) << "offset " << off;
  }
  // The reader is woken by the install, before the completion updates the counters (and
  // read-ahead may still be landing): wait until they settle.
  umap_stats s = rt->Stats();
  umap_mapping_stats ms;
  for (int i = 0; i < 500; ++i) {
    s = rt->Stats();
    ASSERT_TRUE(rt->MappingStats(base, &ms));
    if (s.blocks_read >= 2048 && ms.bytes_read == s.io_bytes && ms.reads == s.io_reads) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s.io_read_failures, 0u);
  EXPECT_GE(s.blocks_read, 2048u);
  // Read-ahead and merging: far fewer reads than blocks, and most blocks never faulted.
  EXPECT_LT(s.io_reads * 4, s.blocks_read) << s.io_reads << " reads for " << s.blocks_read;
  EXPECT_GT(s.prefetched_blocks, 1024u);
  EXPECT_LT(s.faults_missing, 512u);
  uint64_t big = 0;
  for (int k = 3; k < UMAP_IO_SIZE_BUCKETS; ++k) big += s.io_size_hist[k];
  EXPECT_GT(big, 0u) << "no read of 32 KiB or more";
  EXPECT_EQ(ms.bytes_read, s.io_bytes);
  EXPECT_EQ(ms.reads, s.io_reads);
  ASSERT_TRUE(rt->Unmap(*p, kSize).ok());
  ::close(fd);
}

// Sixteen readers scanning one mapping each keep their own stream. The reads interleave
// (one block of each region in turn, the order sixteen scanning threads produce), so with
// fewer stream slots than streams every miss would replace another region's stream, none
// would be found again, and nothing would be read ahead (it was so with 8 slots).
TEST(IoRuntimeTest, SixteenInterleavedScansEachKeepTheirReadAhead) {
  TempDir dir;
  constexpr size_t kRegions = 16, kRegionBlocks = 128;
  constexpr size_t kSize = kRegions * kRegionBlocks * kBlock;  // 8 MiB, twice the cache
  int fd = MakePatternFile(dir.File("f"), kSize, O_RDONLY);
  ASSERT_GE(fd, 0);
  RuntimeOptions o;
  o.cache_bytes = 1024 * kBlock;
  o.prefetch_bytes = 32 * kBlock;
  auto rt = MakeRuntime(o);
  ASSERT_NE(rt, nullptr);
  auto p = rt->Map(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  const char* base = static_cast<const char*>(*p);
  for (size_t i = 0; i < kRegionBlocks; ++i) {
    for (size_t r = 0; r < kRegions; ++r) {
      const size_t off = (r * kRegionBlocks + i) * kBlock + 8 * i;
      ASSERT_EQ(base[off], PatternByte(off)) << "offset " << off;
    }
  }
  const umap_stats s = rt->Stats();
  EXPECT_EQ(s.io_read_failures, 0u);
  // Each region misses a few times while its window grows, then read-ahead keeps ahead.
  EXPECT_LT(s.faults_missing, kRegions * kRegionBlocks / 4)
      << s.faults_missing << " misses, " << s.prefetched_blocks << " blocks read ahead";
  EXPECT_GT(s.prefetched_blocks, kRegions * kRegionBlocks / 2);
  ASSERT_TRUE(rt->Unmap(*p, kSize).ok());
  ::close(fd);
}

// Signal mode: a stream's second miss is read with its first read-ahead window in one read
// by the faulting thread (no round trip through the channels); the window's blocks are then
// resident, and the next miss past them continues the stream through the channels.
TEST(IoRuntimeTest, AStreamStartIsReadWithItsFirstWindowByTheFaultingThread) {
  TempDir dir;
  constexpr size_t kSize = 256 * kBlock;
  int fd = MakePatternFile(dir.File("f"), kSize, O_RDWR);
  ASSERT_GE(fd, 0);
  RuntimeOptions o;
  o.cache_bytes = 512 * kBlock;
  o.prefetch_bytes = 64 * kBlock;
  o.fault_mode = UMAP_FAULT_SIGNAL;
  o.journal_mode = UMAP_JOURNAL_OFF;
  auto rt = MakeRuntime(o);
  ASSERT_NE(rt, nullptr);
  auto p = rt->Map(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  char* base = static_cast<char*>(*p);
  ASSERT_EQ(base[100 * kBlock], PatternByte(100 * kBlock));  // a random miss: one block
  umap_stats s = rt->Stats();
  EXPECT_EQ(s.faults_missing, 1u);
  EXPECT_EQ(s.io_inline_reads, 1u);
  EXPECT_EQ(s.blocks_read, 1u);
  base[101 * kBlock + 7] = 'w';  // the stream's start, a write: 101 and 102..109 in one read
  s = rt->Stats();
  EXPECT_EQ(s.faults_missing, 2u);
  EXPECT_EQ(s.io_inline_reads, 2u);
  EXPECT_EQ(s.io_reads, 2u);
  EXPECT_EQ(s.blocks_read, 10u);
  EXPECT_EQ(s.prefetched_blocks, 8u);
  EXPECT_EQ(s.faults_wp, 0u) << "the faulting block is installed writable";
  for (size_t b = 102; b < 110; ++b) {
    for (size_t off = b * kBlock; off < (b + 1) * kBlock; off += 256) {
      ASSERT_EQ(base[off], PatternByte(off)) << "offset " << off;
    }
  }
  EXPECT_EQ(rt->Stats().faults_missing, 2u) << "the window was resident";
  EXPECT_EQ(base[101 * kBlock + 7], 'w');
  EXPECT_EQ(base[101 * kBlock + 8], PatternByte(101 * kBlock + 8));
  base[103 * kBlock] = 'x';  // read-ahead blocks are clean: the first write faults
  EXPECT_EQ(rt->Stats().faults_wp, 1u);
  // Past the window the stream goes on through the channels, with read-ahead.
  ASSERT_EQ(base[110 * kBlock], PatternByte(110 * kBlock));
  for (int i = 0; i < 500 && rt->Stats().prefetched_blocks <= 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(rt->Stats().prefetched_blocks, 8u);
  ASSERT_TRUE(rt->Sync(base, kSize).ok());
  char got[2];
  ASSERT_EQ(::pread(fd, got, 1, 101 * kBlock + 7), 1);
  ASSERT_EQ(::pread(fd, got + 1, 1, 103 * kBlock), 1);
  EXPECT_EQ(got[0], 'w');
  EXPECT_EQ(got[1], 'x');
  ASSERT_TRUE(rt->Unmap(*p, kSize).ok());
  ::close(fd);
}

// Eviction batches: 1/64 of the cache for a miss (a batch's victims leave early, which costs
// hits when the working set is about the cache's size), 1/8 for read-ahead (a scan re-reads
// nothing), at most a large scratch set's worth.
TEST(IoRuntimeTest, ReadAheadEvictsInLargerBatchesThanAMiss) {
  RuntimeOptions o;
  o.journal_mode = UMAP_JOURNAL_OFF;
  o.lazy_sizing = false;
  for (size_t blocks : {size_t{2048}, size_t{64}, size_t{65536}}) {
    o.cache_bytes = blocks * kBlock;
    auto rt = MakeRuntime(o);
    ASSERT_NE(rt, nullptr);
    const int limit = static_cast<int>(rt->pool().limit());  // the cache, less a little
    ASSERT_GT(limit, static_cast<int>(blocks) * 7 / 8) << blocks;
    EXPECT_EQ(rt->EvictBatchSize(/*bulk=*/false),
              std::clamp(limit / 64, 1, EvictionScratch::kLargeBatch))
        << blocks;
    EXPECT_EQ(rt->EvictBatchSize(/*bulk=*/true),
              std::clamp(limit / 8, 1, EvictionScratch::kLargeBatch))
        << blocks;
    if (blocks == 2048) {  // an 8 MiB cache: 30 a miss, 240 for read-ahead
      EXPECT_GE(rt->EvictBatchSize(/*bulk=*/true), 8 * rt->EvictBatchSize(/*bulk=*/false));
    }
  }
}

// Read-around: where random misses keep starting runs (here pairs: a block, then the next),
// a random miss reads its run with it; where they stop doing so, it reads its block alone.
// The decision comes from probes (one random miss in eight reads its block alone and
// watches for the run), so the mapping turns read-around off again when the pattern changes.
TEST(IoRuntimeTest, RandomMissesReadAroundThemselvesOnlyWhileTheyStartRuns) {
  TempDir dir;
  constexpr size_t kBlocks = 8192;
  int fd = MakePatternFile(dir.File("f"), kBlocks * kBlock, O_RDONLY);
  ASSERT_GE(fd, 0);
  RuntimeOptions o;
  o.cache_bytes = kBlocks * kBlock;  // no eviction
  o.prefetch_bytes = 64 * kBlock;
  o.fault_mode = UMAP_FAULT_SIGNAL;
  o.journal_mode = UMAP_JOURNAL_OFF;
  auto rt = MakeRuntime(o);
  ASSERT_NE(rt, nullptr);
  auto p = rt->Map(nullptr, kBlocks * kBlock, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  const char* base = static_cast<const char*>(*p);
  auto read = [&](size_t block) {
    const size_t off = block * kBlock + 17;
    ASSERT_EQ(base[off], PatternByte(off)) << "block " << block;
  };
  // Pairs 64 blocks apart (far beyond a read-around's 9 blocks).
  auto pairs = [&](size_t first, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      read(first + 64 * i);
      read(first + 64 * i + 1);
    }
  };
  pairs(0, 50);
  umap_stats before = rt->Stats();
  pairs(50 * 64, 50);
  umap_stats after = rt->Stats();
  const uint64_t faults = after.faults_missing - before.faults_missing;
  // Each pair faults once (read around) or, if its first miss is a probe, twice.
  EXPECT_GE(faults, 50u);
  EXPECT_LE(faults, 50u + 50u / 8 + 1) << "the pairs' second blocks were not read around";
  EXPECT_GE(after.blocks_read - before.blocks_read, 8u * (50u - 50u / 8 - 1));
  // Now single blocks 12 apart, never their neighbours: read-around stops paying and
  // stops. (The first of them still read around until enough probes have seen it.)
  auto singles = [&](size_t first, size_t n) {
    for (size_t i = 0; i < n; ++i) read(first + 12 * i);
  };
  singles(4096, 200);
  before = rt->Stats();
  singles(4096 + 12 * 200, 100);
  after = rt->Stats();
  EXPECT_EQ(after.faults_missing - before.faults_missing, 100u);
  EXPECT_EQ(after.blocks_read - before.blocks_read, 100u) << "single misses still read around";
  ASSERT_TRUE(rt->Unmap(*p, kBlocks * kBlock).ok());
  ::close(fd);
}

// The run stops at end of file: the last block's bytes past it read as zeros, the pages
// wholly past it raise SIGBUS, as with mmap.
TEST(IoRuntimeTest, AnInlineRunEndsAtEndOfFile) {
  TempDir dir;
  constexpr size_t kSize = 12 * kBlock + 100;
  int fd = MakePatternFile(dir.File("f"), kSize, O_RDONLY);
  ASSERT_GE(fd, 0);
  RuntimeOptions o;
  o.cache_bytes = 512 * kBlock;
  o.block_size = 2 * kBlock;  // the last block: 100 bytes in its first page, none in its second
  o.prefetch_bytes = 64 * kBlock;
  o.fault_mode = UMAP_FAULT_SIGNAL;
  auto rt = MakeRuntime(o);
  ASSERT_NE(rt, nullptr);
  auto p = rt->Map(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  const char* base = static_cast<const char*>(*p);
  ASSERT_EQ(base[0], PatternByte(0));
  ASSERT_EQ(base[2 * kBlock], PatternByte(2 * kBlock));  // blocks 1..6 (the end) in one read
  umap_stats s = rt->Stats();
  EXPECT_EQ(s.io_reads, 2u);
  EXPECT_EQ(s.blocks_read, 7u);
  EXPECT_EQ(s.faults_missing, 2u);
  for (size_t off = 2 * kBlock; off < kSize; off += 64) {
    ASSERT_EQ(base[off], PatternByte(off)) << "offset " << off;
  }
  EXPECT_EQ(base[kSize - 1], PatternByte(kSize - 1));
  EXPECT_EQ(base[kSize], 0);
  EXPECT_EQ(base[13 * kBlock - 1], 0);
  EXPECT_EQ(ProbeRead(base + 13 * kBlock), SIGBUS);
  EXPECT_EQ(rt->Stats().faults_missing, 2u);
  ASSERT_TRUE(rt->Unmap(*p, kSize).ok());
  ::close(fd);
}

TEST(IoRuntimeTest, PerMappingFiguresCountEachFilesBytes) {
  TempDir dir;
  int a = MakePatternFile(dir.File("a"), 64 * kBlock, O_RDONLY);
  int b = MakePatternFile(dir.File("b"), 64 * kBlock, O_RDONLY);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  RuntimeOptions o;
  o.cache_bytes = 512 * kBlock;
  o.prefetch_bytes = 0;
  o.io_direct = false;
  auto rt = MakeRuntime(o);
  ASSERT_NE(rt, nullptr);
  auto pa = rt->Map(nullptr, 64 * kBlock, PROT_READ, MAP_SHARED, a, 0);
  auto pb = rt->Map(nullptr, 64 * kBlock, PROT_READ, MAP_SHARED, b, 0);
  ASSERT_TRUE(pa.ok() && pb.ok());
  const char* ca = static_cast<const char*>(*pa);
  const char* cache_block = static_cast<const char*>(*pb);
  for (size_t i = 0; i < 64; i += 4) ASSERT_EQ(ca[i * kBlock], PatternByte(i * kBlock));
  for (size_t i = 0; i < 64; ++i) ASSERT_EQ(cache_block[i * kBlock], PatternByte(i * kBlock));
  // The last reader is woken before its completion updates the counters: let them settle.
  umap_mapping_stats sa, sb;
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(rt->MappingStats(ca + 100, &sa));
    ASSERT_TRUE(rt->MappingStats(cache_block, &sb));
    if (sa.bytes_read >= 16 * kBlock && sb.bytes_read >= 64 * kBlock) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(sa.bytes_read, 16 * kBlock);  // every 4th block, read-ahead off
  EXPECT_EQ(sb.bytes_read, 64 * kBlock);
  EXPECT_EQ(sa.direct_io, 0);
  EXPECT_FALSE(rt->MappingStats(ca + 64 * kBlock + 100 * kBlock * 1000, &sa));
  ASSERT_TRUE(rt->Unmap(*pa, 64 * kBlock).ok());
  ASSERT_TRUE(rt->Unmap(*pb, 64 * kBlock).ok());
  ::close(a);
  ::close(b);
}

class IoRuntimeEngineTest : public ::testing::TestWithParam<umap_io_engine> {};

// The backend hangs: the read of the faulting thread times out (io_timeout_ms), is retried
// (io_retries), then the thread gets SIGBUS with the reason logged, instead of hanging.
TEST_P(IoRuntimeEngineTest, AHungReadEndsInSigbusAfterItsRetries) {
  TempDir dir;
  int fd = MakePatternFile(dir.File("f"), 64 * kBlock, O_RDONLY);
  ASSERT_GE(fd, 0);
  faultinject::FaultEnv env(Env::Default());
  RuntimeOptions o;
  o.cache_bytes = 64 * kBlock;
  o.env = &env;
  o.io_engine = GetParam();
  o.io_timeout_ms = 50;
  o.io_retries = 1;
  o.prefetch_bytes = 0;
  auto rt = MakeRuntime(o);
  ASSERT_NE(rt, nullptr);
  auto p = rt->Map(nullptr, 64 * kBlock, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  const char* base = static_cast<const char*>(*p);
  ASSERT_EQ(base[0], PatternByte(0));
  ASSERT_TRUE(env.FailOneIn(faultinject::Op::kRead, 1, 1,
                            faultinject::Fault::Stall(absl::InfiniteDuration()))
                  .ok());
  EXPECT_EQ(ProbeRead(base + 9 * kBlock), SIGBUS);
  umap_stats s = rt->Stats();
  EXPECT_EQ(s.io_timeouts, 2u);
  EXPECT_EQ(s.io_retries, 1u);
  EXPECT_EQ(s.io_read_failures, 1u);
  EXPECT_EQ(s.sigbus_raised, 1u);
  env.ClearAll();
  env.ReleaseStalls();
  // The backend is back: other blocks read normally.
  EXPECT_EQ(base[20 * kBlock], PatternByte(20 * kBlock));
  ASSERT_TRUE(rt->Unmap(*p, 64 * kBlock).ok());
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(Engines, IoRuntimeEngineTest,
                         ::testing::Values(UMAP_IO_URING, UMAP_IO_POSIX), [](const auto& info) {
                           return info.param == UMAP_IO_URING ? "uring" : "posix";
                         });

// An Env whose files record, per block, how many writes are in progress, and remember the
// worst overlap seen. WriteAt sleeps a little to widen the window a second write of the same
// block would need. No descriptor, so every byte goes through it.
class OverlapEnv : public EnvWrapper {
 public:
  explicit OverlapEnv(Env* target) : EnvWrapper(target) {}
  absl::StatusOr<std::unique_ptr<File>> AdoptFd(int fd, OpenMode mode) override {
    auto f = target()->AdoptFd(fd, mode);
    if (!f.ok()) return f.status();
    return std::unique_ptr<File>(new Tracked(this, *std::move(f)));
  }
  int max_overlap() const { return max_overlap_.load(); }
  uint64_t writes() const { return writes_.load(); }

 private:
  class Tracked : public File {
   public:
    Tracked(OverlapEnv* env, std::unique_ptr<File> f) : env_(env), f_(std::move(f)) {}
    absl::StatusOr<size_t> ReadAt(uint64_t off, absl::Span<char> dst) override {
      return f_->ReadAt(off, dst);
    }
    absl::Status WriteAt(uint64_t off, absl::Span<const char> src) override {
      const uint64_t first = off / kBlock, end = (off + src.size() + kBlock - 1) / kBlock;
      env_->Enter(first, end);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      absl::Status s = f_->WriteAt(off, src);
      env_->Leave(first, end);
      return s;
    }
    absl::Status Sync() override { return f_->Sync(); }
    absl::StatusOr<uint64_t> Size() override { return f_->Size(); }
    absl::StatusOr<FileIdentity> Identify() override { return f_->Identify(); }
    const std::string& name() const override { return f_->name(); }

   private:
    OverlapEnv* env_;
    std::unique_ptr<File> f_;
  };
  void Enter(uint64_t first, uint64_t end) {
    absl::MutexLock l(&mu_);
    writes_.fetch_add(1);
    for (uint64_t b = first; b < end; ++b) {
      int n = ++inflight_[b];
      if (n > max_overlap_.load()) max_overlap_.store(n);
    }
  }
  void Leave(uint64_t first, uint64_t end) {
    absl::MutexLock l(&mu_);
    for (uint64_t b = first; b < end; ++b) --inflight_[b];
  }
  absl::Mutex mu_;
  std::map<uint64_t, int> inflight_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> max_overlap_{0};
  std::atomic<uint64_t> writes_{0};
};

// The detector itself can fail: two threads writing one block at the same time are seen.
TEST(OverlapEnvTest, SeesTwoConcurrentWritesOfOneBlock) {
  TempDir dir;
  int fd = MakePatternFile(dir.File("f"), 4 * kBlock, O_RDWR);
  ASSERT_GE(fd, 0);
  OverlapEnv env(Env::Default());
  auto f = env.AdoptFd(fd, OpenMode::kReadWrite);
  ASSERT_TRUE(f.ok());
  const std::string bytes(16, 'x');
  for (int attempt = 0; attempt < 100 && env.max_overlap() < 2; ++attempt) {
    std::atomic<int> ready{0};
    auto writer = [&] {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      ASSERT_TRUE((*f)->WriteAt(kBlock + 8, bytes).ok());
    };
    std::thread a(writer), b(writer);
    a.join();
    b.join();
  }
  EXPECT_EQ(env.max_overlap(), 2);
  ::close(fd);
}

struct WriteMode {
  const char* name;
  umap_policy policy;
  umap_journal_mode journal;
};

class NoOverlappingWritesTest : public ::testing::TestWithParam<WriteMode> {};

// Writers, umsyncs and evictions (cache far smaller than the dirty set) at once: one block
// never has two writes in flight, and the file ends up with the last bytes written.
TEST_P(NoOverlappingWritesTest, NoBlockEverHasTwoWritesInFlight) {
  TempDir dir;
  constexpr size_t kBlocks = 256;
  int fd = MakePatternFile(dir.File("f"), kBlocks * kBlock, O_RDWR);
  ASSERT_GE(fd, 0);
  OverlapEnv env(Env::Default());
  RuntimeOptions o;
  o.cache_bytes = 48 * kBlock;
  o.env = &env;
  o.policy = GetParam().policy;
  o.journal_mode = GetParam().journal;
  o.journal_dir = dir.File("journal");
  o.writeback_threads = 2;
  auto rt = MakeRuntime(o);
  ASSERT_NE(rt, nullptr);
  auto p = rt->Map(nullptr, kBlocks * kBlock, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  char* base = static_cast<char*>(*p);
  std::vector<std::atomic<uint32_t>> last(kBlocks);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      for (uint32_t i = 1; i <= 300; ++i) {
        // Each thread owns the blocks b % 3 == t, so "last" is exact per block.
        uint64_t b = (rng() % (kBlocks / 3)) * 3 + t;
        uint32_t v = (static_cast<uint32_t>(t) << 24) | i;
        std::memcpy(base + b * kBlock, &v, sizeof(v));
        last[b].store(v);
        if (i % 50 == 0) {
          absl::Status st = rt->Sync(base, kBlocks * kBlock);
          ASSERT_TRUE(st.ok()) << st;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(rt->Unmap(base, kBlocks * kBlock).ok());
  EXPECT_GT(env.writes(), 100u) << "the workload did not write back enough to tell";
  EXPECT_EQ(env.max_overlap(), 1) << "two writes of one block were in flight together";
  for (uint64_t b = 0; b < kBlocks; ++b) {
    uint32_t got;
    ASSERT_EQ(::pread(fd, &got, sizeof(got), static_cast<off_t>(b * kBlock)),
              static_cast<ssize_t>(sizeof(got)));
    if (last[b].load() != 0) {
      EXPECT_EQ(got, last[b].load()) << "block " << b;
    }
  }
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, NoOverlappingWritesTest,
    ::testing::Values(WriteMode{"atomic", UMAP_POLICY_ATOMIC, UMAP_JOURNAL_DATA},
                      WriteMode{"relaxed", UMAP_POLICY_RELAXED, UMAP_JOURNAL_DATA},
                      WriteMode{"journal_off", UMAP_POLICY_RELAXED, UMAP_JOURNAL_OFF}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace umap::runtime
