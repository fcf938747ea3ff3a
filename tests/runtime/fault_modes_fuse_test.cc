// The runtime's fault and write-back paths on a real descriptor that misbehaves
// (umap-faultfuse, faultinject/fuse/), in both fault modes:
//   signal   (the default) a random miss is one pread by the faulting thread itself, on the
//            mapping's O_DIRECT handle; it has no deadline (as an mmap fault has none);
//   handler  a miss is queued and read by an io_uring channel, with io_timeout_ms and
//            io_retries.
// Reads: an error is SIGBUS in the faulting thread; a stall times out and is retried in
// handler mode, and holds the thread in signal mode; short and interrupted reads still
// deliver the whole block; a direct read refused with EINVAL, or a direct handle that cannot
// be opened, falls back to the page cache. Write-back (atomic policy, data journal): a
// failed, torn or stalled apply, or a failed fdatasync, makes umsync return its errno with
// the data kept, and the next umsync writes the block again. Expectations are exact: the
// signal, the errno, the stats, and the requests the file system saw.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/posix_error.h"
#include "runtime/runtime.h"
#include "tests/faultinject/fault_fuse_fixture.h"
#include "tests/runtime/signal_probe.h"
#include "tests/testing/status_matchers.h"

namespace umap::runtime {
namespace {

using ::umap::faultinject::FaultFuse;
using ::umaptest::PatternAt;
using ::umaptest::ProbeRead;
using Clock = std::chrono::steady_clock;

constexpr size_t kBlock = 4096;
constexpr uint64_t kBlocks = 64;
constexpr size_t kSize = kBlocks * kBlock;

std::vector<FaultFuse::Request> Requests(FaultFuse& fs, const std::string& op) {
  auto h = fs.History("data");
  EXPECT_TRUE(h.ok()) << h.status();
  std::vector<FaultFuse::Request> out;
  for (FaultFuse::Request& r : h.value_or(std::vector<FaultFuse::Request>{})) {
    if (r.op == op) out.push_back(std::move(r));
  }
  return out;
}

class FaultModeFuseTest : public ::umaptest::FaultFuseTest,
                          public ::testing::WithParamInterface<umap_fault_mode> {
 protected:
  bool signal_mode() const { return GetParam() == UMAP_FAULT_SIGNAL; }

  // Maps the 64-block data file (readable, or writable with an atomic data journal).
  // Read-ahead is off, so each miss is one request.
  void Map(bool writable, unsigned timeout_ms = 100, unsigned retries = 1,
           bool defer_file_sync = false) {
    MakeFile("data", kSize);
    RuntimeOptions o;
    o.cache_bytes = 2 * kSize;
    o.block_size = kBlock;
    o.fault_mode = GetParam();
    o.io_engine = UMAP_IO_URING;
    o.io_timeout_ms = timeout_ms;
    o.io_retries = retries;
    o.prefetch_bytes = 0;
    if (writable) o.journal_dir = dir_.File("journal");
    o.defer_file_sync = defer_file_sync;
    auto rt = Runtime::Create(o);
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = *std::move(rt);
    fd_ = ::open(fs_->Path("data").c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
    auto p = rt_->Map(nullptr, kSize, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd_, 0);
    ASSERT_TRUE(p.ok()) << p.status();
    base_ = static_cast<char*>(*p);
    ASSERT_OK(fs_->ClearHistory());
  }
  void TearDown() override {
    if (fs_ != nullptr) {
      fs_->Clear().IgnoreError();
      fs_->Release().IgnoreError();
    }
    rt_.reset();
    if (fd_ >= 0) ::close(fd_);
    ::umaptest::FaultFuseTest::TearDown();
  }
  std::string Block(uint64_t b) const { return std::string(base_ + b * kBlock, kBlock); }
  std::string BackingBlock(uint64_t b) { return Backing("data").substr(b * kBlock, kBlock); }
  bool direct_io() {
    umap_mapping_stats ms;
    EXPECT_TRUE(rt_->MappingStats(base_, &ms));
    return ms.direct_io != 0;
  }

  std::unique_ptr<Runtime> rt_;
  int fd_ = -1;
  char* base_ = nullptr;
};

TEST_P(FaultModeFuseTest, AFailedReadRaisesSigbusInTheFaultingThreadOnly) {
  Map(/*writable=*/false);
  ASSERT_TRUE(direct_io());
  ASSERT_OK(
      fs_->Arm(absl::StrCat("read path=data at=", 5 * kBlock, " count=0 error=EIO")).status());
  EXPECT_EQ(ProbeRead(base_ + 5 * kBlock + 10), SIGBUS);
  const umap_stats s = rt_->Stats();
  EXPECT_EQ(s.sigbus_raised, 1u);
  EXPECT_EQ(s.io_errors, 1u);
  EXPECT_EQ(s.io_read_failures, signal_mode() ? 0u : 1u);  // a channel's read, or inline
  EXPECT_EQ(s.io_timeouts, 0u);
  std::vector<FaultFuse::Request> reads = Requests(*fs_, "read");
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].offset, 5 * kBlock);
  EXPECT_EQ(reads[0].len, kBlock);
  EXPECT_TRUE(reads[0].direct);
  EXPECT_EQ(reads[0].result, -EIO);
  EXPECT_EQ(Block(6), PatternAt(6 * kBlock, kBlock)) << "other blocks still read";
}

// Handler mode: the read times out (100 ms), is retried once, and the thread gets SIGBUS;
// both attempts are still held by the server, neither could be taken back.
TEST_P(FaultModeFuseTest, AHungReadTimesOutInHandlerModeAndHoldsTheThreadInSignalMode) {
  Map(/*writable=*/false, /*timeout_ms=*/100, /*retries=*/1);
  ASSERT_OK(
      fs_->Arm(absl::StrCat("read path=data at=", 9 * kBlock, " count=0 stall=forever")).status());
  if (!signal_mode()) {
    EXPECT_EQ(ProbeRead(base_ + 9 * kBlock), SIGBUS);
    const umap_stats s = rt_->Stats();
    EXPECT_EQ(s.io_timeouts, 2u);
    EXPECT_EQ(s.io_retries, 1u);
    EXPECT_EQ(s.io_read_failures, 1u);
    EXPECT_EQ(s.sigbus_raised, 1u);
    EXPECT_EQ(Requests(*fs_, "read").size(), 2u);
    EXPECT_EQ(fs_->Stat("stalled").value(), 2);
    ASSERT_OK(fs_->Clear());
    EXPECT_EQ(fs_->Release().value(), 2);
    return;
  }
  // Signal mode: an inline read has no deadline; the thread waits for the server, as an
  // mmap fault does, and then gets the right bytes.
  std::atomic<bool> done{false};
  std::string got;
  std::thread reader([&] {
    got = Block(9);
    done = true;
  });
  ASSERT_OK(fs_->WaitStalled(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // 5 deadlines
  EXPECT_FALSE(done.load());
  EXPECT_EQ(rt_->Stats().io_timeouts, 0u);
  EXPECT_EQ(fs_->Release().value(), 1);
  reader.join();
  EXPECT_EQ(got, PatternAt(9 * kBlock, kBlock));
  EXPECT_EQ(Requests(*fs_, "read").size(), 1u);
  EXPECT_EQ(rt_->Stats().sigbus_raised, 0u);
}

TEST_P(FaultModeFuseTest, AStallShorterThanTheDeadlineOnlyDelaysTheFault) {
  Map(/*writable=*/false, /*timeout_ms=*/2000, /*retries=*/0);
  ASSERT_OK(fs_->Arm(absl::StrCat("read path=data at=", 4 * kBlock, " stall=200")).status());
  const Clock::time_point t = Clock::now();
  EXPECT_EQ(Block(4), PatternAt(4 * kBlock, kBlock));
  EXPECT_GE(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count(), 200);
  EXPECT_EQ(rt_->Stats().io_timeouts, 0u);
  EXPECT_EQ(Requests(*fs_, "read").size(), 1u);
}

// The server answers 1000 of 4096 bytes: both modes read the other 3096 at once, from byte
// 1000 on (File::ReadAt in signal mode, the channel's completion in handler mode).
TEST_P(FaultModeFuseTest, AShortReadStillDeliversTheWholeBlock) {
  Map(/*writable=*/false);
  ASSERT_OK(fs_->Arm(absl::StrCat("read path=data at=", 7 * kBlock, " short=1000")).status());
  EXPECT_EQ(Block(7), PatternAt(7 * kBlock, kBlock));
  std::vector<FaultFuse::Request> reads = Requests(*fs_, "read");
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_EQ(reads[0].offset, 7 * kBlock);
  EXPECT_EQ(reads[0].result, 1000);
  EXPECT_EQ(reads[1].offset, 7 * kBlock + 1000);
  EXPECT_EQ(reads[1].len, kBlock - 1000);
  EXPECT_EQ(reads[1].result, static_cast<int64_t>(kBlock - 1000));
  EXPECT_EQ(rt_->Stats().io_errors, 0u);
}

TEST_P(FaultModeFuseTest, AnInterruptedReadIsReadAgain) {
  Map(/*writable=*/false);
  ASSERT_OK(fs_->Arm(absl::StrCat("read path=data at=", 3 * kBlock, " error=EINTR")).status());
  EXPECT_EQ(Block(3), PatternAt(3 * kBlock, kBlock));
  std::vector<FaultFuse::Request> reads = Requests(*fs_, "read");
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_EQ(reads[0].result, -EINTR);
  EXPECT_EQ(reads[1].result, static_cast<int64_t>(kBlock));
  EXPECT_EQ(rt_->Stats().sigbus_raised, 0u);
}

TEST_P(FaultModeFuseTest, ADirectReadRefusedWithEinvalFallsBackToThePageCache) {
  Map(/*writable=*/false);
  ASSERT_TRUE(direct_io());
  ASSERT_OK(fs_->Arm("read path=data direct=1 count=0 error=EINVAL").status());
  EXPECT_EQ(Block(11), PatternAt(11 * kBlock, kBlock));
  EXPECT_FALSE(direct_io());
  EXPECT_EQ(Block(12), PatternAt(12 * kBlock, kBlock));
  std::vector<FaultFuse::Request> reads = Requests(*fs_, "read");
  ASSERT_GE(reads.size(), 2u);
  EXPECT_TRUE(reads[0].direct);
  EXPECT_EQ(reads[0].result, -EINVAL);
  for (size_t i = 1; i < reads.size(); ++i) EXPECT_FALSE(reads[i].direct) << i;
  EXPECT_EQ(rt_->Stats().sigbus_raised, 0u);
}

TEST_P(FaultModeFuseTest, ADirectHandleThatCannotBeOpenedLeavesPageCacheReads) {
  ASSERT_OK(fs_->Arm("open path=data direct=1 error=EINVAL").status());
  Map(/*writable=*/false);
  EXPECT_FALSE(direct_io());
  EXPECT_EQ(Block(2), PatternAt(2 * kBlock, kBlock));
  for (const FaultFuse::Request& r : Requests(*fs_, "read")) EXPECT_FALSE(r.direct);
}

// --- Write-back: the apply of an atomic umsync, through the WriteEngine on io_uring. ---

TEST_P(FaultModeFuseTest, AFailedApplyMakesUmsyncReturnTheErrnoAndTheNextOneAppliesIt) {
  Map(/*writable=*/true);
  std::memset(base_ + 3 * kBlock, 'w', kBlock);
  ASSERT_OK(fs_->Arm("write path=data error=ENOSPC").status());
  absl::Status s = rt_->Sync(base_, kSize);
  EXPECT_EQ(ErrnoFromStatus(s), ENOSPC) << s;
  EXPECT_EQ(BackingBlock(3), PatternAt(3 * kBlock, kBlock));
  ASSERT_OK(rt_->Sync(base_, kSize));
  EXPECT_EQ(BackingBlock(3), std::string(kBlock, 'w'));
  // The failed write, then one: the transaction that stayed committed, applied again (the
  // block is not journaled a second time).
  std::vector<FaultFuse::Request> writes = Requests(*fs_, "write");
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0].offset, 3 * kBlock);
  EXPECT_EQ(writes[0].result, -ENOSPC);
  EXPECT_EQ(writes[1].offset, 3 * kBlock);
  EXPECT_EQ(writes[1].result, static_cast<int64_t>(kBlock));
}

// The apply's write hangs past io_timeout_ms: umsync waits for it (its buffer is in use),
// then returns ETIMEDOUT; the transaction stays committed and the next umsync applies it.
TEST_P(FaultModeFuseTest, AnApplyWriteStalledPastItsDeadlineMakesUmsyncReturnEtimedout) {
  Map(/*writable=*/true, /*timeout_ms=*/100);
  std::memset(base_ + 5 * kBlock, 'e', kBlock);
  ASSERT_OK(fs_->Arm("write path=data stall=forever").status());
  std::atomic<bool> returned{false};
  absl::Status s;
  std::thread syncer([&] {
    s = rt_->Sync(base_, kSize);
    returned = true;
  });
  ASSERT_OK(fs_->WaitStalled(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(rt_->Stats().io_write_timeouts, 1u);
  EXPECT_EQ(fs_->Release("", EIO).value(), 1);  // the server gives up on it: nothing lands
  syncer.join();
  EXPECT_EQ(ErrnoFromStatus(s), ETIMEDOUT) << s;
  EXPECT_EQ(BackingBlock(5), PatternAt(5 * kBlock, kBlock));
  ASSERT_OK(rt_->Sync(base_, kSize));
  EXPECT_EQ(BackingBlock(5), std::string(kBlock, 'e'));
}

// defer_file_sync: the umsync returns while the applier's write to the file hangs; the
// applier writes each run of adjacent blocks as one plain request (no io_uring on FUSE),
// then fdatasyncs; uunmap waits for it.
TEST_P(FaultModeFuseTest, DeferredFileSyncReturnsBeforeTheFileWriteWhichComesInRuns) {
  Map(/*writable=*/true, /*timeout_ms=*/100, /*retries=*/1, /*defer_file_sync=*/true);
  std::memset(base_ + 3 * kBlock, 'd', 2 * kBlock);
  std::memset(base_ + 10 * kBlock, 'f', kBlock);
  ASSERT_OK(fs_->Arm("write path=data stall=forever").status());
  ASSERT_OK(rt_->Sync(base_, kSize));
  ASSERT_OK(fs_->WaitStalled(1));
  EXPECT_EQ(BackingBlock(3), PatternAt(3 * kBlock, kBlock)) << "not written yet";
  ASSERT_OK(fs_->Clear());
  EXPECT_EQ(fs_->Release().value(), 1);
  ASSERT_OK(rt_->Unmap(base_, kSize));
  base_ = nullptr;
  EXPECT_EQ(BackingBlock(3), std::string(kBlock, 'd'));
  EXPECT_EQ(BackingBlock(4), std::string(kBlock, 'd'));
  EXPECT_EQ(BackingBlock(10), std::string(kBlock, 'f'));
  std::vector<std::string> order;
  auto h = fs_->History("data");
  ASSERT_TRUE(h.ok()) << h.status();
  for (const FaultFuse::Request& r : *h) {
    if (r.op == "write") order.push_back(absl::StrCat("write ", r.offset / kBlock, "+", r.len / kBlock));
    if (r.op == "fsync") order.push_back("fsync");
  }
  ASSERT_FALSE(order.empty());
  EXPECT_EQ(order.back(), "fsync");
  EXPECT_EQ(std::count(order.begin(), order.end(), "write 3+2"), 1) << absl::StrJoin(order, ", ");
  EXPECT_EQ(std::count(order.begin(), order.end(), "write 10+1"), 1) << absl::StrJoin(order, ", ");
}

TEST_P(FaultModeFuseTest, ATornApplyIsReportedAndRewrittenWholeByTheNextUmsync) {
  Map(/*writable=*/true);
  std::memset(base_ + 8 * kBlock, 't', kBlock);
  ASSERT_OK(fs_->Arm("write path=data tear=100").status());
  absl::Status s = rt_->Sync(base_, kSize);
  EXPECT_EQ(ErrnoFromStatus(s), EIO) << s;
  EXPECT_EQ(BackingBlock(8), std::string(100, 't') + PatternAt(8 * kBlock + 100, kBlock - 100));
  ASSERT_OK(rt_->Sync(base_, kSize));
  EXPECT_EQ(BackingBlock(8), std::string(kBlock, 't'));
}

TEST_P(FaultModeFuseTest, AFailedFdatasyncIsReportedAndTheBlockIsWrittenAgain) {
  Map(/*writable=*/true);
  std::memset(base_ + 2 * kBlock, 's', kBlock);
  ASSERT_OK(fs_->Arm("fsync path=data error=EIO").status());
  absl::Status s = rt_->Sync(base_, kSize);
  EXPECT_EQ(ErrnoFromStatus(s), EIO) << s;
  ASSERT_OK(rt_->Sync(base_, kSize));
  // Never trust a second fdatasync after a failed one: the block goes out again before the
  // one the umsync is acknowledged on.
  auto h = fs_->History("data");
  ASSERT_TRUE(h.ok());
  std::vector<std::string> order;
  for (const FaultFuse::Request& r : *h) {
    if (r.op == "write" && r.offset == 2 * kBlock) order.push_back("write");
    if (r.op == "fsync") order.push_back(absl::StrCat("fsync=", *r.result));
  }
  // On FUSE the retry first sends an fdatasync alone (a write-behind client retries what it
  // holds only then: WriteBack::BoundUnsyncedWrites), then the block, then the fdatasync
  // the umsync's acknowledgement rests on.
  EXPECT_EQ(order, (std::vector<std::string>{"write", absl::StrCat("fsync=", -EIO), "fsync=0",
                                             "write", "fsync=0"}));
  EXPECT_EQ(BackingBlock(2), std::string(kBlock, 's'));
}

// umsync returns 0 only after the file's fdatasync reached the file system, after the
// block's write: the request order at the server says so.
TEST_P(FaultModeFuseTest, AnAcknowledgedUmsyncEndsWithOneFdatasyncAfterItsWrites) {
  Map(/*writable=*/true);
  std::memset(base_ + 1 * kBlock, 'a', kBlock);
  std::memset(base_ + 9 * kBlock, 'b', kBlock);
  ASSERT_OK(rt_->Sync(base_, kSize));
  auto h = fs_->History("data");
  ASSERT_TRUE(h.ok());
  std::vector<std::string> order;
  for (const FaultFuse::Request& r : *h) {
    if (r.op == "write" || r.op == "fsync") order.push_back(r.op);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"write", "write", "fsync"}));
}

INSTANTIATE_TEST_SUITE_P(FaultModes, FaultModeFuseTest,
                         ::testing::Values(UMAP_FAULT_SIGNAL, UMAP_FAULT_HANDLER),
                         [](const auto& info) {
                           return info.param == UMAP_FAULT_SIGNAL ? "signal" : "handler";
                         });

}  // namespace
}  // namespace umap::runtime
