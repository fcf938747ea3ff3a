// RuntimeOptions::defer_file_sync: umsync returns once its transaction is committed to the
// journal; the sink's applier thread writes it to the file and fdatasyncs later. What that
// may and may not change, with a power cut of both disks (FaultEnv for the data file,
// FaultFs for the journal: everything not synced is lost):
//   - umsync returns while the file's fdatasync hangs, and after an acknowledged umsync the
//     file alone may lack the blocks (the deferral is real: with it off the file has them);
//     the journal brings them back at the next map;
//   - uunmap leaves the file synced (nothing of it left to replay);
//   - a file sync that fails at uunmap fails the uunmap and keeps the mapping; the retry
//     syncs it;
//   - once the applier's write has failed, the next umsyncs fail with the file's error (the
//     transaction kept) instead of being acknowledged while only the journal holds them;
//     when the disk heals, uunmap writes everything, in order;
//   - while the applier's write hangs, the committed backlog stays bounded: a umsync beyond
//     it waits, and goes on once the write returns.
// The stateful property (durability_property_test) runs half its cases with the deferral.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "base/posix_error.h"
#include "faultinject/fault_env.h"
#include "faultinject/fault_fs.h"
#include "runtime/runtime.h"
#include "runtime/writeback/journal_write_back.h"
#include "tests/runtime/test_file.h"

namespace umap::runtime {
namespace {

using ::umap::faultinject::DropMode;
using ::umap::faultinject::Fault;
using ::umap::faultinject::FaultEnv;
using ::umap::faultinject::FaultFs;
using ::umap::faultinject::FileClass;
using ::umap::faultinject::FsFault;
using ::umap::faultinject::FsOp;
using ::umap::faultinject::FsDropOptions;
using ::umap::faultinject::Op;
using ::umaptest::MakePatternFile;
using ::umaptest::PatternByte;

constexpr size_t kBlock = 4096;
constexpr size_t kBlocks = 16;
constexpr uint64_t kBlockWritten = 3;
constexpr char kNew = 'X';

struct Case {
  const char* name;
  umap_policy policy;
};

class DeferFileSyncTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const int fd = MakePatternFile(path_, kBlocks * kBlock);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }

  std::unique_ptr<Runtime> Start(bool defer) {
    RuntimeOptions o;
    o.cache_bytes = 32 * kBlock;
    o.lazy_sizing = false;
    o.block_size = kBlock;
    o.stats_period_ms = 0;
    o.env = &env_;
    o.journal_fs = fs_;
    o.journal_dir = dir_.File("journal");
    o.policy = GetParam().policy;
    o.journal_mode = UMAP_JOURNAL_DATA;
    o.defer_file_sync = defer;
    auto rt = Runtime::Create(o);
    EXPECT_TRUE(rt.ok()) << rt.status();
    return rt.ok() ? std::move(*rt) : nullptr;
  }

  char* Map(Runtime& rt) {
    const int fd = ::open(path_.c_str(), O_RDWR);
    EXPECT_GE(fd, 0);
    auto p = rt.Map(nullptr, kBlocks * kBlock, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? static_cast<char*>(*p) : nullptr;
  }

  // Writes the block and umsyncs it; the umsync must succeed.
  static void WriteAndSync(Runtime& rt, char* p) {
    std::memset(p + kBlockWritten * kBlock, kNew, kBlock);
    absl::Status s = rt.Sync(p + kBlockWritten * kBlock, kBlock);
    ASSERT_TRUE(s.ok()) << s;
  }

  // The written block as the data file holds it ('X', or the original pattern).
  bool FileHasNewBlock() const {
    const int fd = ::open(path_.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    std::string buf(kBlock, '\0');
    EXPECT_EQ(::pread(fd, buf.data(), kBlock, kBlockWritten * kBlock),
              static_cast<ssize_t>(kBlock));
    ::close(fd);
    if (buf == std::string(kBlock, kNew)) return true;
    for (size_t i = 0; i < kBlock; ++i) {
      EXPECT_EQ(buf[i], PatternByte(kBlockWritten * kBlock + i)) << "neither version at " << i;
    }
    return false;
  }

  // The data file's next write (kWrite) or fdatasync (kSync) hangs until ReleaseStalls or a
  // power cut.
  void StallNextDataFile(Op op) {
    ASSERT_TRUE(env_.FailNext(op, 1, Fault::Stall(absl::InfiniteDuration()).OnlyFor("data")).ok());
  }

  // A power cut of both disks: what was not synced is gone; the runtime dies with them.
  void PowerCut(std::unique_ptr<Runtime> rt) {
    env_.SimulatePowerCut();
    fs_->SimulatePowerCut();
    rt.reset();  // its final write-back fails on the frozen disks and writes nothing
    ASSERT_TRUE(env_.DropUnsyncedData(DropMode::kDropAll).ok());
    ASSERT_TRUE(fs_->DropUnsyncedData(FsDropOptions::DropAll()).ok());
    env_.Restart();
    fs_->Restart();
  }

  // The file as it is now (the whole mapping).
  std::string FileBytes() const {
    const int fd = ::open(path_.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    std::string buf(kBlocks * kBlock, '\0');
    EXPECT_EQ(::pread(fd, buf.data(), buf.size(), 0), static_cast<ssize_t>(buf.size()));
    ::close(fd);
    return buf;
  }

  ::umaptest::TempDir dir_;
  const std::string path_ = dir_.File("data");
  FaultEnv env_{Env::Default()};
  std::shared_ptr<FaultFs> fs_ = std::make_shared<FaultFs>(rocksdb::FileSystem::Default());
};

TEST_P(DeferFileSyncTest, AnAcknowledgedUmsyncSurvivesThroughTheJournal) {
  auto rt = Start(/*defer=*/true);
  ASSERT_NE(rt, nullptr);
  char* p = Map(*rt);
  ASSERT_NE(p, nullptr);
  // The file's fdatasync hangs: the umsync must not wait for it.
  StallNextDataFile(Op::kSync);
  WriteAndSync(*rt, p);
  ASSERT_TRUE(env_.WaitForStalled(1, absl::Seconds(30))) << "the applier syncs the file later";
  PowerCut(std::move(rt));
  EXPECT_FALSE(FileHasNewBlock()) << "the file's fdatasync was deferred: the cut lost it";
  // The next map replays the journal first.
  rt = Start(/*defer=*/true);
  ASSERT_NE(rt, nullptr);
  p = Map(*rt);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p[kBlockWritten * kBlock], kNew);
  EXPECT_EQ(p[(kBlockWritten + 1) * kBlock - 1], kNew);
  EXPECT_TRUE(FileHasNewBlock()) << "replayed into the file";
  ASSERT_TRUE(rt->Unmap(p, kBlocks * kBlock).ok());
}

TEST_P(DeferFileSyncTest, WithoutTheDeferralTheFileHasItAtOnce) {
  auto rt = Start(/*defer=*/false);
  ASSERT_NE(rt, nullptr);
  char* p = Map(*rt);
  ASSERT_NE(p, nullptr);
  WriteAndSync(*rt, p);
  PowerCut(std::move(rt));
  EXPECT_TRUE(FileHasNewBlock()) << "umsync fdatasync'ed the file";
}

TEST_P(DeferFileSyncTest, UunmapLeavesTheFileSynced) {
  auto rt = Start(/*defer=*/true);
  ASSERT_NE(rt, nullptr);
  char* p = Map(*rt);
  ASSERT_NE(p, nullptr);
  WriteAndSync(*rt, p);
  ASSERT_TRUE(rt->Unmap(p, kBlocks * kBlock).ok());
  PowerCut(std::move(rt));
  EXPECT_TRUE(FileHasNewBlock()) << "uunmap fdatasync'ed what umsync deferred";
}

TEST_P(DeferFileSyncTest, AFailedFileSyncAtUunmapKeepsTheMapping) {
  auto rt = Start(/*defer=*/true);
  ASSERT_NE(rt, nullptr);
  char* p = Map(*rt);
  ASSERT_NE(p, nullptr);
  // Every sync of the file fails, the applier's in the background and uunmap's.
  ASSERT_TRUE(env_.FailNext(Op::kSync, 1, Fault::Error(EIO).OnlyFor("data").Sticky()).ok());
  WriteAndSync(*rt, p);
  absl::Status s = rt->Unmap(p, kBlocks * kBlock);
  EXPECT_FALSE(s.ok()) << "the deferred fdatasync failed";
  EXPECT_EQ(p[kBlockWritten * kBlock], kNew) << "still mapped";
  env_.ClearAll();
  s = rt->Unmap(p, kBlocks * kBlock);
  ASSERT_TRUE(s.ok()) << s;
  PowerCut(std::move(rt));
  EXPECT_TRUE(FileHasNewBlock()) << "the retried uunmap synced it";
}

TEST_P(DeferFileSyncTest, AFailingFileFailsTheUmsyncsAfterItsFirstFailedWrite) {
  auto rt = Start(/*defer=*/true);
  ASSERT_NE(rt, nullptr);
  char* p = Map(*rt);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(env_.FailNext(Op::kWrite, 1, Fault::Error(ENOSPC).OnlyFor("data").Sticky()).ok());
  // Each umsync commits the whole mapping (64 KiB); the applier cannot write any of it.
  const size_t mapping = kBlocks * kBlock;
  const int fits = static_cast<int>(JournalWriteBack::kMaxBacklogBytes / mapping);
  absl::Status s;
  int round = 0;
  for (; round < 2 * fits && s.ok(); ++round) {
    if (round > 0) absl::SleepFor(absl::Milliseconds(100));  // the applier's round ends
    std::memset(p, 'a' + round % 26, mapping);
    s = rt->Sync(p, mapping);
    if (round == 0) {
      EXPECT_TRUE(s.ok()) << "committed; the file is written later: " << s;
    }
  }
  EXPECT_EQ(ErrnoFromStatus(s), ENOSPC) << s;
  EXPECT_LT(round, fits / 2) << "a failing file fails umsyncs long before the byte bound";
  const char last = p[0];
  EXPECT_EQ(p[mapping - 1], last);
  // The disk has room again: everything committed, and the last (failed) round, reach the
  // file, in order.
  env_.ClearAll();
  s = rt->Unmap(p, mapping);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(FileBytes(), std::string(mapping, last));
}

TEST_P(DeferFileSyncTest, TheBacklogIsBoundedWhileTheFileWriteHangs) {
  auto rt = Start(/*defer=*/true);
  ASSERT_NE(rt, nullptr);
  char* p = Map(*rt);
  ASSERT_NE(p, nullptr);
  // The applier's first write hangs: no round ends, so no error to return either.
  StallNextDataFile(Op::kWrite);
  const size_t mapping = kBlocks * kBlock;
  const int fits = static_cast<int>(JournalWriteBack::kMaxBacklogBytes / mapping);
  const int rounds = 2 * fits;
  std::atomic<int> done{0};
  std::atomic<bool> all_ok{true};
  std::thread writer([&] {
    for (int r = 0; r < rounds; ++r) {
      std::memset(p, 'a' + r % 26, mapping);
      if (!rt->Sync(p, mapping).ok()) all_ok = false;
      done = r + 1;
    }
  });
  // The umsyncs run until the backlog is full, then one waits for the applier.
  int before = -1;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while ((done != before || done == 0) && absl::Now() < deadline) {
    before = done;
    absl::SleepFor(absl::Milliseconds(500));
  }
  EXPECT_GE(before, fits - 1) << "the backlog holds what fits first";
  EXPECT_LE(before, fits + 2) << "then a umsync waits";
  env_.ReleaseStalls();
  writer.join();
  EXPECT_TRUE(all_ok) << "the write that hung succeeded once released";
  EXPECT_EQ(done, rounds);
  const char last = p[0];
  ASSERT_TRUE(rt->Unmap(p, mapping).ok());
  EXPECT_EQ(FileBytes(), std::string(mapping, last));
}

// Umsyncs committed while the applier was busy reach it as one batch; a block that several
// of them rewrote is written once, in its newest version (with O_DIRECT writes every
// version written is a device write), and the file ends with that version.
TEST_P(DeferFileSyncTest, ABatchWritesEachBlockOnceInItsNewestVersion) {
  auto rt = Start(/*defer=*/true);
  ASSERT_NE(rt, nullptr);
  char* p = Map(*rt);
  ASSERT_NE(p, nullptr);
  // The applier's first write hangs: the umsyncs after it queue up behind it.
  StallNextDataFile(Op::kWrite);
  std::memset(p, 'a', kBlock);
  ASSERT_TRUE(rt->Sync(p, kBlock).ok());
  ASSERT_TRUE(env_.WaitForStalled(1, absl::Seconds(30))) << "the applier writes the first";
  constexpr int kVersions = 10;
  for (int v = 1; v <= kVersions; ++v) {
    std::memset(p, 'a' + v, kBlock);
    absl::Status s = rt->Sync(p, kBlock);
    ASSERT_TRUE(s.ok()) << s;
  }
  const uint64_t writes_before = rt->Stats().io_writes;
  env_.ReleaseStalls();
  absl::Status s = rt->Unmap(p, kBlocks * kBlock);
  ASSERT_TRUE(s.ok()) << s;
  const uint64_t writes = rt->Stats().io_writes - writes_before;
  EXPECT_GE(writes, 1u);
  EXPECT_LE(writes, 2u) << "the stalled write, then the batch's one write of the block (not "
                        << kVersions << " versions)";
  EXPECT_EQ(FileBytes().substr(0, kBlock), std::string(kBlock, char('a' + kVersions)));
}

// The applier's fdatasync succeeded but marking its transactions applied in the journal
// failed (a WAL append error): nothing is left to write, and the round's error must not
// stay the applier's last word. A umsync with nothing new to commit waits for the next
// round; once the applier went idle on the failure no round came, and that umsync waited
// for ever (seen in the durability property: a heal's whole umsync hung).
TEST_P(DeferFileSyncTest, AFailedJournalMarkIsRetriedSoALaterUmsyncReturns) {
  auto rt = Start(/*defer=*/true);
  ASSERT_NE(rt, nullptr);
  char* p = Map(*rt);
  ASSERT_NE(p, nullptr);
  // The applier's first fdatasync hangs while 1.25 MiB of transactions is committed behind
  // it, more than one batch of marks (JournalWriteBack::kMarkBytes, 1 MiB): a later file
  // sync marks them in one journal write.
  StallNextDataFile(Op::kSync);
  const size_t mapping = kBlocks * kBlock;
  const int rounds = 20;
  ASSERT_LE(rounds * mapping, JournalWriteBack::kMaxBacklogBytes) << "no umsync may wait";
  for (int r = 0; r < rounds; ++r) {
    std::memset(p, 'a' + r % 26, mapping);
    absl::Status s = rt->Sync(p, mapping);
    ASSERT_TRUE(s.ok()) << "round " << r << ": " << s;
  }
  ASSERT_TRUE(env_.WaitForStalled(1, absl::Seconds(10))) << "the applier syncs the file";
  // Nobody commits now: the WAL appends from here on are the applier's marks, and they fail
  // until cleared. Its rounds write the transactions still queued (a round with no file
  // sync succeeds), and the last, an idle file sync, fails on its mark with nothing left to
  // write.
  ASSERT_TRUE(fs_->FailNext(FsOp::kAppend, 1,
                            FsFault::IOError().OnlyFor(FileClass::kWal).Sticky())
                  .ok());
  env_.ReleaseStalls();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (fs_->fired(FsOp::kAppend) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(fs_->fired(FsOp::kAppend), 1u) << "the applier marked its transactions";
  absl::SleepFor(absl::Milliseconds(500));  // its rounds have ended, the last with the error
  fs_->ClearAll();
  // A umsync with nothing dirty commits nothing, so it gives the applier nothing to write.
  std::atomic<bool> returned{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 100 && !returned; ++i) absl::SleepFor(absl::Milliseconds(100));
    if (!returned) {
      std::fprintf(stderr, "a umsync after the failed mark did not return in 10 s\n");
      std::abort();  // the test cannot end otherwise: the umsync waits for ever
    }
  });
  absl::Status s = rt->Sync(p, mapping);
  returned = true;
  watchdog.join();
  EXPECT_TRUE(s.ok()) << "the retried mark succeeds: " << s;
  const char last = p[0];
  ASSERT_TRUE(rt->Unmap(p, mapping).ok());
  EXPECT_EQ(FileBytes(), std::string(mapping, last));
}

INSTANTIATE_TEST_SUITE_P(Policies, DeferFileSyncTest,
                         ::testing::Values(Case{"atomic", UMAP_POLICY_ATOMIC},
                                           Case{"relaxed", UMAP_POLICY_RELAXED}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace umap::runtime
