// Backend failures reach the application the way the contract says: a failed read raises
// SIGBUS in the faulting thread (never a zero page), a failed write-back or fdatasync makes
// umsync/uunmap return the errno while the data stays dirty in cache, and a later call
// succeeds once the backend recovers. The backend faults come from faultinject::FaultEnv
// wrapped around the real POSIX Env, so the production write-back path runs; in the *_ring
// modes the files offer io_uring, so merged reads and writes run on the ring as with a
// plain file, and the faults reach them there.
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/posix_error.h"
#include "faultinject/fault_env.h"
#include "runtime/runtime.h"
#include "tests/runtime/signal_probe.h"
#include "tests/runtime/test_file.h"

namespace umap::runtime {
namespace {

using ::umap::faultinject::Fault;
using ::umap::faultinject::FaultEnv;
using ::umap::faultinject::Op;
using ::umaptest::MakePatternFile;
using ::umaptest::Pattern;
using ::umaptest::PatternByte;
using ::umaptest::ProbeRead;
using ::umaptest::ReadAll;

constexpr size_t kBlock = 4096;

#define ASSERT_TRUE_OK(expr)          \
  do {                                \
    absl::Status _s = (expr);         \
    ASSERT_TRUE(_s.ok()) << _s;       \
  } while (0)

struct Mode {
  const char* name;
  umap_policy policy;
  umap_journal_mode journal;
  // The file offers io_uring (FaultEnv::Options::through_ring): merged reads and writes go
  // through the ring as with a plain file, and the faults reach their results.
  bool ring = false;
};

faultinject::FaultEnv::Options EnvOptions(bool ring) {
  faultinject::FaultEnv::Options o;
  o.through_ring = ring;
  return o;
}

class RuntimeFaultTest : public ::testing::TestWithParam<Mode> {
 protected:
  // A 32-block cache over env_, in this test's mode.
  RuntimeOptions Options() {
    RuntimeOptions o;
    o.cache_bytes = 32 * kBlock;
    o.block_size = kBlock;
    o.env = &env_;
    o.policy = GetParam().policy;
    o.journal_mode = GetParam().journal;
    return o;
  }
  void SetUp() override {
    auto rt = Runtime::Create(Options());
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    fd_ = MakePatternFile(dir_.File("f"), kSize);
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

  static constexpr size_t kSize = 128 * kBlock;
  ::umaptest::TempDir dir_;
  FaultEnv env_{Env::Default(), EnvOptions(GetParam().ring)};
  std::unique_ptr<Runtime> rt_;
  int fd_ = -1;
  char* p_ = nullptr;
};

TEST_P(RuntimeFaultTest, FailedReadRaisesSigbusNotAZeroPage) {
  ASSERT_TRUE_OK(env_.FailNext(Op::kRead, 1, Fault::Error(EIO)));
  EXPECT_EQ(ProbeRead(p_ + 5 * kBlock), SIGBUS);
  EXPECT_EQ(rt_->Stats().io_errors, 1u);
  EXPECT_EQ(ProbeRead(p_ + 6 * kBlock), 0) << "other blocks still read";
  EXPECT_EQ(p_[6 * kBlock], PatternByte(6 * kBlock));
}

TEST_P(RuntimeFaultTest, FailedWriteBackMakesUmsyncReturnTheErrnoAndKeepsTheData) {
  std::memset(p_ + 3 * kBlock, 'w', kBlock);
  ASSERT_TRUE_OK(env_.FailNext(Op::kWrite, 1, Fault::Error(ENOSPC)));
  absl::Status s = rt_->Sync(p_, kSize);
  EXPECT_EQ(ErrnoFromStatus(s), ENOSPC) << s;
  EXPECT_EQ(ReadAll(dir_.File("f"))[3 * kBlock], PatternByte(3 * kBlock));
  // Space is back: the same data syncs, nothing was lost.
  ASSERT_TRUE(rt_->Sync(p_, kSize).ok());
  std::vector<char> want = Pattern(kSize);
  std::memset(want.data() + 3 * kBlock, 'w', kBlock);
  EXPECT_EQ(ReadAll(dir_.File("f")), want);
}

TEST_P(RuntimeFaultTest, FailedFdatasyncIsReportedAndTheNextSyncRewrites) {
  std::memset(p_, 's', 100);
  ASSERT_TRUE_OK(env_.FailNext(Op::kSync, 1, Fault::Error(EIO)));
  EXPECT_EQ(ErrnoFromStatus(rt_->Sync(p_, kSize)), EIO);
  // Not assumed durable: the next umsync writes the block to the file again (from the cache
  // when there is no journal, from the journal's committed image otherwise) and syncs.
  const uint64_t writes = rt_->Stats().io_write_bytes;
  ASSERT_TRUE(rt_->Sync(p_, kSize).ok());
  EXPECT_GE(rt_->Stats().io_write_bytes, writes + 100);
  EXPECT_EQ(ReadAll(dir_.File("f"))[99], 's');
}

TEST_P(RuntimeFaultTest, FailingEvictionWriteBacksAreRetriedAndNothingIsLost) {
  // Fail the first 5 writes to the file. Relaxed / journal off: they are write-backs of
  // evicted blocks, which the write-back thread keeps in their shadows and retries. Atomic:
  // evicted blocks are staged in the journal, so the failures hit umsync's apply; either
  // way umsync reports the failure while it lasts and nothing is lost.
  ASSERT_TRUE_OK(env_.FailNext(Op::kWrite, 5, Fault::Error(EIO)));
  std::vector<char> want = Pattern(kSize);
  for (size_t b = 0; b < kSize / kBlock; ++b) {  // 4x the cache, all dirty
    p_[b * kBlock + 7] = static_cast<char>(b);
    want[b * kBlock + 7] = static_cast<char>(b);
  }
  EXPECT_GT(rt_->Stats().dirty_evictions, 0u);
  absl::Status s;
  for (int i = 0; i < 100; ++i) {  // retries back off 100 ms; allow a few seconds
    s = rt_->Sync(p_, kSize);
    if (s.ok()) break;
    EXPECT_EQ(ErrnoFromStatus(s), EIO) << s;
    ::usleep(50000);
  }
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(env_.fired(faultinject::FaultKind::kError), 5u) << "every armed failure was met";
  // The write-backs ran on the ring (a *_ring mode that did not would test WriteAt twice).
  if (GetParam().ring) {
    EXPECT_GT(env_.ring_results(), 0u);
  }
  if (GetParam().policy == UMAP_POLICY_RELAXED || GetParam().journal == UMAP_JOURNAL_OFF) {
    // One error per failed write-back round. Through WriteAt each write is a round of its
    // own; on the ring one merged round may meet several failures (the first is reported).
    EXPECT_GE(rt_->Stats().io_errors, GetParam().ring ? 1u : 5u);
  }
  EXPECT_EQ(ReadAll(dir_.File("f")), want);
}

TEST_P(RuntimeFaultTest, UnmapThatCannotWriteBackKeepsTheMapping) {
  p_[42] = 'u';
  ASSERT_TRUE_OK(env_.FailNext(Op::kWrite, 1, Fault::Error(EIO)));
  EXPECT_EQ(ErrnoFromStatus(rt_->Unmap(p_, kSize)), EIO);
  EXPECT_EQ(p_[42], 'u') << "still mapped, still holding the data";
  ASSERT_TRUE(rt_->Unmap(p_, kSize).ok());
  EXPECT_EQ(ReadAll(dir_.File("f"))[42], 'u');
}

// A umsync that waits on the file (its fdatasync stalls) must not stop the cache from
// evicting the clean blocks of its range: programs that umsync often (every thread a umsync
// per hundred writes) are in a umsync most of the time, and each miss then waited for it.
// The block the umsync captured stays resident until its outcome is known: when the sync
// fails, the block becomes dirty again instead of being lost with its pages.
TEST_P(RuntimeFaultTest, CleanBlocksOfAUmsyncsRangeStayEvictableAndItsCapturedBlockStays) {
  const long page = ::sysconf(_SC_PAGESIZE);
  auto resident = [&](size_t block) {
    unsigned char v = 0;
    EXPECT_EQ(::mincore(p_ + block * kBlock, page, &v), 0);
    return (v & 1) != 0;
  };
  for (size_t b = 0; b < 32; ++b) ASSERT_EQ(p_[b * kBlock + 1], PatternByte(b * kBlock + 1));
  // Written by a thread that then faults two other blocks (a thread holds references to
  // the last two it faulted): no thread's reference keeps the block in the cache, only the
  // umsync's capture.
  std::thread([&] {
    std::memset(p_ + 3 * kBlock, 'w', kBlock);
    for (size_t b : {40, 41}) EXPECT_EQ(p_[b * kBlock], PatternByte(b * kBlock));
  }).join();
  ASSERT_TRUE_OK(env_.FailNext(Op::kSync, 1, Fault::Stall(absl::InfiniteDuration(), EIO)));
  absl::Status sync_status;
  std::thread syncer([&] { sync_status = rt_->Sync(p_, kSize); });
  ASSERT_TRUE(env_.WaitForStalled(1, absl::Seconds(30))) << "the umsync never reached fdatasync";
  // Misses on blocks 64..127 (twice the cache) while the umsync of the whole mapping waits.
  std::promise<void> read_done;
  std::thread reader([&] {
    for (size_t b = 64; b < 128; ++b) {
      if (p_[b * kBlock + 9] != PatternByte(b * kBlock + 9)) ADD_FAILURE() << "block " << b;
    }
    read_done.set_value();
  });
  const bool read_in_time =
      read_done.get_future().wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  EXPECT_TRUE(read_in_time) << "misses waited for the umsync of their range";
  EXPECT_EQ(env_.stalled(), 1) << "the umsync is still waiting";
  EXPECT_TRUE(resident(3)) << "the block the umsync captured was evicted before its outcome";
  EXPECT_GT(rt_->Stats().evictions, 0u);
  env_.ReleaseStalls();
  reader.join();
  syncer.join();
  EXPECT_EQ(ErrnoFromStatus(sync_status), EIO) << sync_status;
  // Nothing was lost: the next umsync writes (or, with a journal, applies) it.
  ASSERT_TRUE_OK(rt_->Sync(p_, kSize));
  EXPECT_EQ(ReadAll(dir_.File("f"))[3 * kBlock + 100], 'w');
}

// A umsync's capture write-protects the span of the blocks it captures with one ioctl, so a
// block dirtied after the capture passed it can end up dirty and protected. Its next write
// must make it writable again (not fault for ever) and stay dirty for the next umsync.
TEST_P(RuntimeFaultTest, ADirtyBlockProtectedByACaptureSpanIsWritableAgainAtItsNextWrite) {
  std::memset(p_ + 5 * kBlock, 'a', kBlock);  // dirty and writable
  ASSERT_EQ(rt_->uffd().WriteProtect(p_ + 5 * kBlock, kBlock, true), 0);
  std::promise<void> wrote;
  std::thread writer([&] {
    std::memset(p_ + 5 * kBlock + 10, 'b', 10);
    wrote.set_value();
  });
  const bool in_time =
      wrote.get_future().wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  EXPECT_TRUE(in_time) << "the write to a dirty, protected block kept faulting";
  if (!in_time) rt_->uffd().WriteProtect(p_ + 5 * kBlock, kBlock, false);  // let it finish
  writer.join();
  ASSERT_TRUE_OK(rt_->Sync(p_, kSize));
  const std::vector<char> file = ReadAll(dir_.File("f"));
  EXPECT_EQ(file[5 * kBlock], 'a');
  EXPECT_EQ(file[5 * kBlock + 15], 'b');
}

// A umsync whose dirty blocks exceed umsync_chunk_bytes holds one chunk of them at a time.
// Atomic policy: still one transaction, committed in several journal batches and applied by
// reading the images back from the journal; when its apply fails, the journal alone holds
// the images, and a miss on an evicted block of it reads them from there. Relaxed and no
// journal: one commit (or write) per chunk. In every mode nothing is lost and the retry
// writes everything.
TEST_P(RuntimeFaultTest, AUmsyncLargerThanItsChunkIsCapturedAChunkAtATimeAndLosesNothing) {
  RuntimeOptions o = Options();
  o.umsync_chunk_bytes = 3 * kBlock;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const int fd = MakePatternFile(dir_.File("chunked"), kSize);
  ASSERT_GE(fd, 0);
  auto mapped = (*rt)->Map(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  char* p = static_cast<char*>(*mapped);
  std::vector<char> want = Pattern(kSize);
  for (size_t b = 1; b < 40; b += 4) {  // 10 blocks: four chunks of three
    std::memset(p + b * kBlock, static_cast<char>('A' + b), kBlock);
    std::memset(want.data() + b * kBlock, static_cast<char>('A' + b), kBlock);
  }
  // An atomic umsync of more than a chunk lowers this fixed cache's limit while it runs
  // (Runtime::ReserveOutsideCache) and gives it back when it ends, failed or not.
  const uint64_t limit = (*rt)->Stats().cache_bytes_limit;
  // The first write to the file fails: that block is not in the file.
  ASSERT_TRUE_OK(env_.FailNext(Op::kWrite, 1, Fault::Error(EIO)));
  absl::Status s = (*rt)->Sync(p, kSize);
  EXPECT_EQ(ErrnoFromStatus(s), EIO) << s;
  if (GetParam().policy == UMAP_POLICY_ATOMIC) {
    // One transaction (three chunks staged, the last committed with them), which the
    // journal keeps: its apply failed.
    journal::Journal::Stats js;
    bool open = false;
    std::string jdir;
    ASSERT_TRUE((*rt)->TryJournalStats(&js, &open, &jdir));
    ASSERT_TRUE(open);
    EXPECT_EQ(js.commits, 1u);
    EXPECT_EQ(js.unapplied_txns, 1u);
  }
  // Every block leaves the cache (64 other blocks read through a 32-block cache); the
  // written ones read back as written, wherever they are now.
  for (size_t b = 64; b < 128; ++b) ASSERT_EQ(ProbeRead(p + b * kBlock), 0);
  for (size_t b = 1; b < 40; b += 4) {
    ASSERT_EQ(ProbeRead(p + b * kBlock), 0) << "block " << b;
    EXPECT_EQ(std::memcmp(p + b * kBlock, want.data() + b * kBlock, kBlock), 0) << "block " << b;
  }
  EXPECT_EQ((*rt)->Stats().cache_bytes_limit, limit);
  ASSERT_TRUE_OK((*rt)->Sync(p, kSize));
  EXPECT_EQ(ReadAll(dir_.File("chunked")), want);
  EXPECT_EQ((*rt)->Stats().cache_bytes_limit, limit);
  ASSERT_TRUE_OK((*rt)->Unmap(p, kSize));
  ::close(fd);
}

// Blocks larger than the 1 MiB the apply reads a streamed transaction back in: each is
// read and written whole. (The first write of each block fails once, so the transaction
// stays in the journal and the retry applies it from there.)
TEST_P(RuntimeFaultTest, AStreamedUmsyncOfBlocksLargerThanItsReadBackBufferIsWrittenWhole) {
  constexpr size_t kBig = 2 << 20, kBigSize = 16 * kBig;
  RuntimeOptions o = Options();
  o.block_size = kBig;
  o.cache_bytes = 12 * kBig;
  o.io_max_bytes = kBig;
  o.umsync_chunk_bytes = kBig;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const int fd = MakePatternFile(dir_.File("big"), kBigSize);
  ASSERT_GE(fd, 0);
  auto mapped = (*rt)->Map(nullptr, kBigSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  char* p = static_cast<char*>(*mapped);
  std::vector<char> want = Pattern(kBigSize);
  for (size_t b : {1, 2, 5}) {
    std::memset(p + b * kBig, static_cast<char>('a' + b), kBig);
    std::memset(want.data() + b * kBig, static_cast<char>('a' + b), kBig);
  }
  ASSERT_TRUE_OK(env_.FailNext(Op::kWrite, 1, Fault::Error(EIO)));
  EXPECT_EQ(ErrnoFromStatus((*rt)->Sync(p, kBigSize)), EIO);
  ASSERT_TRUE_OK((*rt)->Sync(p, kBigSize));
  EXPECT_EQ(ReadAll(dir_.File("big")), want);
  ASSERT_TRUE_OK((*rt)->Unmap(p, kBigSize));
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, RuntimeFaultTest,
    ::testing::Values(Mode{"journal_off", UMAP_POLICY_RELAXED, UMAP_JOURNAL_OFF},
                      Mode{"relaxed_data", UMAP_POLICY_RELAXED, UMAP_JOURNAL_DATA},
                      Mode{"atomic_data", UMAP_POLICY_ATOMIC, UMAP_JOURNAL_DATA},
                      Mode{"relaxed_data_ring", UMAP_POLICY_RELAXED, UMAP_JOURNAL_DATA, true},
                      Mode{"atomic_data_ring", UMAP_POLICY_ATOMIC, UMAP_JOURNAL_DATA, true}),
    [](const ::testing::TestParamInfo<Mode>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace umap::runtime
