// umap-faultfuse itself, through plain system calls on its mount: bytes pass through both
// ways, and each rule does exactly what fuse_rule.h says (the errno, the byte count, what
// reaches the backing file, when a stall ends, which request of several is taken), as the
// history and counters of the daemon confirm. Where the kernel's FUSE client shapes what
// the caller sees (page cache, interrupts, io_uring), the test pins that down too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/faultinject/fault_fuse_fixture.h"
#include "tests/testing/status_matchers.h"

namespace umaptest {
namespace {

using ::umap::faultinject::FaultFuse;
using Clock = std::chrono::steady_clock;

constexpr size_t kBlock = 4096;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Only the data requests of `path` (history entries of opens and flushes dropped).
std::vector<FaultFuse::Request> DataRequests(FaultFuse& fs, const std::string& path) {
  auto h = fs.History(path);
  EXPECT_TRUE(h.ok()) << h.status();
  std::vector<FaultFuse::Request> out;
  if (!h.ok()) return out;
  for (FaultFuse::Request& r : *h) {
    if (r.op == "read" || r.op == "write" || r.op == "fsync") out.push_back(std::move(r));
  }
  return out;
}

class FaultFuseFsTest : public FaultFuseTest {};

TEST_F(FaultFuseFsTest, BytesPassThroughBothWaysAndTheInodeIsTheBackingFiles) {
  MakeFile("f", 16 * kBlock);
  const int fd = Open("f", O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0);
  AlignedBuffer buf(4 * kBlock);
  ASSERT_EQ(::pread(fd, buf.data(), 4 * kBlock, 2 * kBlock), static_cast<ssize_t>(4 * kBlock));
  EXPECT_EQ(buf.str(4 * kBlock), PatternAt(2 * kBlock, 4 * kBlock));
  std::memset(buf.data(), 'w', kBlock);
  ASSERT_EQ(::pwrite(fd, buf.data(), kBlock, 5 * kBlock), static_cast<ssize_t>(kBlock));
  const std::string backing = Backing("f");
  EXPECT_EQ(backing.substr(5 * kBlock, kBlock), std::string(kBlock, 'w'));
  EXPECT_EQ(backing.substr(0, 5 * kBlock), PatternAt(0, 5 * kBlock));
  struct stat on_mount, on_backing;
  ASSERT_EQ(::fstat(fd, &on_mount), 0);
  ASSERT_EQ(::stat(fs_->BackingPath("f").c_str(), &on_backing), 0);
  EXPECT_EQ(on_mount.st_ino, on_backing.st_ino);
  EXPECT_EQ(on_mount.st_size, static_cast<off_t>(16 * kBlock));
  // One request per call on an O_DIRECT handle, of exactly the caller's size.
  std::vector<FaultFuse::Request> io = DataRequests(*fs_, "f");
  ASSERT_EQ(io.size(), 2u);
  EXPECT_EQ(io[0].op, "read");
  EXPECT_EQ(io[0].offset, 2 * kBlock);
  EXPECT_EQ(io[0].len, 4 * kBlock);
  EXPECT_EQ(io[0].result, static_cast<int64_t>(4 * kBlock));
  EXPECT_TRUE(io[0].direct);
  EXPECT_EQ(io[1].op, "write");
  EXPECT_EQ(io[1].result, static_cast<int64_t>(kBlock));
  ::close(fd);
}

TEST_F(FaultFuseFsTest, AnInjectedReadErrorIsThatErrnoOnceThenReadsSucceed) {
  MakeFile("f", 4 * kBlock);
  const int fd = Open("f", O_RDONLY | O_DIRECT);
  ASSERT_GE(fd, 0);
  ASSERT_OK(fs_->Arm("read path=f error=ENOTCONN").status());
  AlignedBuffer buf(kBlock);
  EXPECT_EQ(::pread(fd, buf.data(), kBlock, 0), -1);
  EXPECT_EQ(errno, ENOTCONN);
  ASSERT_EQ(::pread(fd, buf.data(), kBlock, 0), static_cast<ssize_t>(kBlock));
  EXPECT_EQ(buf.str(kBlock), PatternAt(0, kBlock));
  std::vector<FaultFuse::Request> io = DataRequests(*fs_, "f");
  ASSERT_EQ(io.size(), 2u);
  EXPECT_EQ(io[0].result, -ENOTCONN);
  EXPECT_EQ(io[1].result, static_cast<int64_t>(kBlock));
  EXPECT_EQ(fs_->Stat("fired").value(), 1);
  ::close(fd);
}

TEST_F(FaultFuseFsTest, AShortReadReturnsExactlyThatManyBytes) {
  MakeFile("f", 4 * kBlock);
  const int fd = Open("f", O_RDONLY | O_DIRECT);
  ASSERT_GE(fd, 0);
  ASSERT_OK(fs_->Arm("read path=f short=1000").status());
  AlignedBuffer buf(2 * kBlock);
  ASSERT_EQ(::pread(fd, buf.data(), 2 * kBlock, kBlock), 1000);
  EXPECT_EQ(buf.str(1000), PatternAt(kBlock, 1000));
  ::close(fd);
}

TEST_F(FaultFuseFsTest, AShortWriteWritesOnlyItsPrefix) {
  MakeFile("f", 4 * kBlock);
  const int fd = Open("f", O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0);
  ASSERT_OK(fs_->Arm("write path=f short=3000").status());
  AlignedBuffer buf(2 * kBlock);
  std::memset(buf.data(), 'n', 2 * kBlock);
  ASSERT_EQ(::pwrite(fd, buf.data(), 2 * kBlock, kBlock), 3000);
  const std::string b = Backing("f");
  EXPECT_EQ(b.substr(kBlock, 3000), std::string(3000, 'n'));
  EXPECT_EQ(b.substr(kBlock + 3000), PatternAt(kBlock + 3000, 3 * kBlock - 3000));
  ::close(fd);
}

TEST_F(FaultFuseFsTest, ATornWriteLandsItsPrefixThenFails) {
  MakeFile("f", 4 * kBlock);
  const int fd = Open("f", O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0);
  ASSERT_OK(fs_->Arm("write path=f tear=512 error=ENOSPC").status());
  AlignedBuffer buf(kBlock);
  std::memset(buf.data(), 't', kBlock);
  EXPECT_EQ(::pwrite(fd, buf.data(), kBlock, 2 * kBlock), -1);
  EXPECT_EQ(errno, ENOSPC);
  const std::string b = Backing("f");
  EXPECT_EQ(b.substr(2 * kBlock, 512), std::string(512, 't'));
  EXPECT_EQ(b.substr(2 * kBlock + 512, kBlock - 512), PatternAt(2 * kBlock + 512, kBlock - 512));
  ::close(fd);
}

TEST_F(FaultFuseFsTest, SkipAndCountTakeExactlyTheChosenRequests) {
  MakeFile("f", 8 * kBlock);
  const int fd = Open("f", O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0);
  ASSERT_OK(fs_->Arm("write path=f skip=2 count=2 error=EIO").status());
  AlignedBuffer buf(kBlock);
  std::vector<int> errs;
  for (int i = 0; i < 6; ++i) {
    errs.push_back(
        ::pwrite(fd, buf.data(), kBlock, i * kBlock) == static_cast<ssize_t>(kBlock) ? 0 : errno);
  }
  EXPECT_EQ(errs, (std::vector<int>{0, 0, EIO, EIO, 0, 0}));
  ::close(fd);
}

TEST_F(FaultFuseFsTest, AtTakesOnlyRequestsThatCoverTheOffsetAndPathOnlyThatFile) {
  MakeFile("f", 8 * kBlock);
  MakeFile("g", 8 * kBlock);
  const int f = Open("f", O_RDONLY | O_DIRECT);
  const int g = Open("g", O_RDONLY | O_DIRECT);
  ASSERT_GE(f, 0);
  ASSERT_GE(g, 0);
  ASSERT_OK(
      fs_->Arm(absl::StrCat("read path=f at=", 3 * kBlock + 100, " count=0 error=EIO")).status());
  AlignedBuffer buf(2 * kBlock);
  EXPECT_EQ(::pread(f, buf.data(), kBlock, 2 * kBlock), static_cast<ssize_t>(kBlock));
  EXPECT_EQ(::pread(f, buf.data(), 2 * kBlock, 2 * kBlock), -1);
  EXPECT_EQ(errno, EIO);
  EXPECT_EQ(::pread(f, buf.data(), kBlock, 3 * kBlock), -1);
  EXPECT_EQ(::pread(g, buf.data(), kBlock, 3 * kBlock), static_cast<ssize_t>(kBlock));
  ::close(f);
  ::close(g);
}

TEST_F(FaultFuseFsTest, ATimedStallHoldsTheReplyThatLongThenProceeds) {
  MakeFile("f", 4 * kBlock);
  const int fd = Open("f", O_RDONLY | O_DIRECT);
  ASSERT_GE(fd, 0);
  ASSERT_OK(fs_->Arm("read path=f stall=300").status());
  AlignedBuffer buf(kBlock);
  const Clock::time_point t = Clock::now();
  ASSERT_EQ(::pread(fd, buf.data(), kBlock, kBlock), static_cast<ssize_t>(kBlock));
  EXPECT_GE(MsSince(t), 300);
  EXPECT_EQ(buf.str(kBlock), PatternAt(kBlock, kBlock));
  EXPECT_EQ(fs_->Stat("max_stalled").value(), 1);
  EXPECT_EQ(fs_->Stat("stalled").value(), 0);
  ::close(fd);
}

TEST_F(FaultFuseFsTest, AStalledWriteReachesTheFileOnlyWhenReleasedAndNotAtAllWhenFailed) {
  MakeFile("f", 4 * kBlock);
  const int fd = Open("f", O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0);
  ASSERT_OK(fs_->Arm("write path=f count=2 stall=forever").status());
  AlignedBuffer buf(kBlock);
  std::memset(buf.data(), 's', kBlock);
  std::atomic<ssize_t> first{-2};
  std::thread writer([&] { first = ::pwrite(fd, buf.data(), kBlock, 0); });
  ASSERT_OK(fs_->WaitStalled(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(first.load(), -2) << "the write returned while held";
  EXPECT_EQ(Backing("f").substr(0, kBlock), PatternAt(0, kBlock)) << "held, yet written";
  EXPECT_EQ(fs_->Release("f").value(), 1);
  writer.join();
  EXPECT_EQ(first.load(), static_cast<ssize_t>(kBlock));
  EXPECT_EQ(Backing("f").substr(0, kBlock), std::string(kBlock, 's'));
  // The second one is released as a failure: nothing of it lands.
  std::atomic<int> second_errno{0};
  std::thread failing([&] {
    if (::pwrite(fd, buf.data(), kBlock, kBlock) < 0) second_errno = errno;
  });
  ASSERT_OK(fs_->WaitStalled(1));
  EXPECT_EQ(fs_->Release("", EIO).value(), 1);
  failing.join();
  EXPECT_EQ(second_errno.load(), EIO);
  EXPECT_EQ(Backing("f").substr(kBlock, kBlock), PatternAt(kBlock, kBlock));
  ::close(fd);
}

TEST_F(FaultFuseFsTest, IgnoredFsyncsSucceedAndAreCountedFailedOnesReportTheErrno) {
  MakeFile("f", kBlock);
  const int fd = Open("f", O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_OK(fs_->Arm("fsync path=f ignore").status());
  ASSERT_OK(fs_->Arm("fsync path=f error=EIO").status());
  EXPECT_EQ(::fdatasync(fd), 0);
  EXPECT_EQ(::fdatasync(fd), -1);
  EXPECT_EQ(errno, EIO);
  EXPECT_EQ(::fdatasync(fd), 0);
  EXPECT_EQ(fs_->Stat("ignored_fsyncs").value(), 1);
  EXPECT_EQ(fs_->Stat("fsync").value(), 3);
  ::close(fd);
}

TEST_F(FaultFuseFsTest, AFailedOpenOfTheDirectHandleLeavesBufferedOpensAlone) {
  MakeFile("f", kBlock);
  ASSERT_OK(fs_->Arm("open path=f direct=1 count=0 error=EINVAL").status());
  EXPECT_EQ(::open(fs_->Path("f").c_str(), O_RDONLY | O_DIRECT), -1);
  EXPECT_EQ(errno, EINVAL);
  const int fd = Open("f", O_RDONLY);
  EXPECT_GE(fd, 0);
  ::close(fd);
}

void NoteSignal(int) {}

// A thread blocked in a stalled read gets a signal: the kernel sends FUSE_INTERRUPT. A rule
// with intr=1 then ends the read with EINTR; without it (a hung server) the read stays
// blocked until released, and the interrupt is only counted.
TEST_F(FaultFuseFsTest, ASignalInterruptsAStallThatHonoursInterruptsOnly) {
  MakeFile("f", 4 * kBlock);
  const int fd = Open("f", O_RDONLY | O_DIRECT);
  ASSERT_GE(fd, 0);
  struct sigaction sa = {}, old = {};
  sa.sa_handler = NoteSignal;  // no SA_RESTART
  ASSERT_EQ(::sigaction(SIGUSR1, &sa, &old), 0);
  for (const bool honoured : {true, false}) {
    SCOPED_TRACE(honoured ? "intr=1" : "intr=0");
    ASSERT_OK(fs_->Reset());
    ASSERT_OK(fs_->Arm(honoured ? "read path=f stall=forever intr=1" : "read path=f stall=forever")
                  .status());
    AlignedBuffer buf(kBlock);
    std::atomic<bool> done{false};
    std::atomic<ssize_t> got{0};
    std::atomic<int> err{0};
    std::thread reader([&] {
      got = ::pread(fd, buf.data(), kBlock, 0);
      err = errno;
      done = true;
    });
    ASSERT_OK(fs_->WaitStalled(1));
    ::pthread_kill(reader.native_handle(), SIGUSR1);
    for (int i = 0; i < 200 && fs_->Stat("interrupts").value() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(fs_->Stat("interrupts").value(), 1);
    if (honoured) {
      reader.join();
      EXPECT_EQ(got.load(), -1);
      EXPECT_EQ(err.load(), EINTR);
      EXPECT_EQ(fs_->Stat("stalled").value(), 0);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      EXPECT_FALSE(done.load()) << "a hung request ended on a signal";
      EXPECT_EQ(fs_->Release().value(), 1);
      reader.join();
      EXPECT_EQ(got.load(), static_cast<ssize_t>(kBlock));
    }
    std::vector<FaultFuse::Request> io = DataRequests(*fs_, "f");
    ASSERT_EQ(io.size(), 1u);
    EXPECT_TRUE(io[0].interrupted);
  }
  ::sigaction(SIGUSR1, &old, nullptr);
  ::close(fd);
}

// io_uring on an O_DIRECT handle: the reads reach the daemon all at once (asynchronous
// direct I/O), and a cancellation cannot take back a request the daemon holds: the read
// completes when the daemon answers. What the runtime's channels must live with.
TEST_F(FaultFuseFsTest, IoUringReadsArriveTogetherAndCancellationCannotTakeThemBack) {
  MakeFile("f", 16 * kBlock);
  const int fd = Open("f", O_RDONLY | O_DIRECT);
  ASSERT_GE(fd, 0);
  ASSERT_OK(fs_->Arm("read path=f count=0 stall=forever").status());
  io_uring ring;
  ASSERT_EQ(io_uring_queue_init(32, &ring, 0), 0);
  AlignedBuffer buf(8 * kBlock);
  for (int i = 0; i < 8; ++i) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read(sqe, fd, buf.data() + i * kBlock, kBlock, 2 * i * kBlock);
    io_uring_sqe_set_data64(sqe, i);
  }
  ASSERT_EQ(io_uring_submit(&ring), 8);
  ASSERT_OK(fs_->WaitStalled(8));
  io_uring_sqe* cancel = io_uring_get_sqe(&ring);
  io_uring_prep_cancel64(cancel, 3, 0);
  io_uring_sqe_set_data64(cancel, 100);
  ASSERT_EQ(io_uring_submit(&ring), 1);
  io_uring_cqe* cqe;
  ASSERT_EQ(io_uring_wait_cqe(&ring, &cqe), 0);
  EXPECT_EQ(cqe->user_data, 100u);
  EXPECT_EQ(cqe->res, -ENOENT) << "the held read was cancelled";
  io_uring_cqe_seen(&ring, cqe);
  EXPECT_EQ(fs_->Stat("interrupts").value(), 0);
  EXPECT_EQ(fs_->Release().value(), 8);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(io_uring_wait_cqe(&ring, &cqe), 0);
    EXPECT_EQ(cqe->res, static_cast<int>(kBlock)) << "read " << cqe->user_data;
    io_uring_cqe_seen(&ring, cqe);
  }
  EXPECT_EQ(fs_->Stat("max_inflight_read").value(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(buf.str(kBlock * (i + 1)).substr(i * kBlock), PatternAt(2 * i * kBlock, kBlock));
  }
  io_uring_queue_exit(&ring);
  ::close(fd);
}

TEST_F(FaultFuseFsTest, AnAbortedConnectionFailsEverythingWithEnotconn) {
  MakeFile("f", kBlock);
  const int fd = Open("f", O_RDONLY | O_DIRECT);
  ASSERT_GE(fd, 0);
  ASSERT_OK(fs_->Abort());
  AlignedBuffer buf(kBlock);
  EXPECT_EQ(::pread(fd, buf.data(), kBlock, 0), -1);
  EXPECT_EQ(errno, ENOTCONN);
  ::close(fd);
}

TEST_F(FaultFuseFsTest, BadRulesAndCommandsAreRefusedByName) {
  auto r = fs_->Arm("read tear=5");
  EXPECT_THAT(r, ::umap::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(r.status().message().find("tear"), std::string::npos) << r.status();
  r = fs_->Arm("write stall=soon");
  EXPECT_NE(r.status().message().find("stall=soon"), std::string::npos) << r.status();
  r = fs_->Arm("write path=f");
  EXPECT_NE(r.status().message().find("changes nothing"), std::string::npos) << r.status();
  auto c = fs_->Command("frobnicate");
  EXPECT_THAT(c, ::umap::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(c.status().message().find("unknown command 'frobnicate'"), std::string::npos);
  EXPECT_THAT(fs_->WaitStalled(1, absl::Milliseconds(50)),
              ::umap::testing::StatusIs(absl::StatusCode::kDeadlineExceeded));
}

class FaultFuseBufferedTest : public FaultFuseTest {};

// Without O_DIRECT (mode odirect), the kernel's page cache stands between the caller and
// the daemon: a read served from the cache never reaches it, and writes through the cache
// reach it one at a time. Tests that expect exact I/O use O_DIRECT handles or
// direct_io=all.
TEST_F(FaultFuseBufferedTest, BufferedReadsAreServedByThePageCache) {
  MakeFile("f", 4 * kBlock);
  const int fd = Open("f", O_RDONLY);
  ASSERT_GE(fd, 0);
  char buf[100];
  ASSERT_EQ(::pread(fd, buf, sizeof(buf), 10), static_cast<ssize_t>(sizeof(buf)));
  const int64_t reads = fs_->Stat("read").value();
  ASSERT_EQ(::pread(fd, buf, sizeof(buf), 10), static_cast<ssize_t>(sizeof(buf)));
  EXPECT_EQ(fs_->Stat("read").value(), reads);
  ::close(fd);
}

// The kernel retries a page-cache read that failed: one injected error never reaches a
// buffered reader (one reason buffered I/O hides a DFS's errors).
TEST_F(FaultFuseBufferedTest, APageCacheReadThatFailsOnceIsRetriedByTheKernel) {
  MakeFile("f", 4 * kBlock);
  const int fd = Open("f", O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_OK(fs_->Arm("read path=f error=EIO").status());
  char buf[100];
  ASSERT_EQ(::pread(fd, buf, sizeof(buf), kBlock + 10), static_cast<ssize_t>(sizeof(buf)));
  EXPECT_EQ(std::string(buf, sizeof(buf)), PatternAt(kBlock + 10, sizeof(buf)));
  std::vector<FaultFuse::Request> io = DataRequests(*fs_, "f");
  ASSERT_EQ(io.size(), 2u);
  EXPECT_EQ(io[0].result, -EIO);
  EXPECT_GT(io[1].result.value_or(-1), 0);
  EXPECT_LE(io[1].offset, kBlock + 10);
  ::close(fd);
}

class FaultFuseAllDirectTest : public FaultFuseTest {
 protected:
  FaultFuse::Options FuseOptions() override {
    FaultFuse::Options o;
    o.direct_io = "all";
    return o;
  }
};

TEST_F(FaultFuseAllDirectTest, EveryHandleIsDirectSoEveryReadReachesTheDaemon) {
  MakeFile("f", 4 * kBlock);
  const int fd = Open("f", O_RDONLY);
  ASSERT_GE(fd, 0);
  char buf[100];
  ASSERT_EQ(::pread(fd, buf, sizeof(buf), 10), static_cast<ssize_t>(sizeof(buf)));
  ASSERT_EQ(::pread(fd, buf, sizeof(buf), 10), static_cast<ssize_t>(sizeof(buf)));
  std::vector<FaultFuse::Request> io = DataRequests(*fs_, "f");
  ASSERT_EQ(io.size(), 2u);
  EXPECT_EQ(io[1].offset, 10u);
  EXPECT_EQ(io[1].len, sizeof(buf));
  EXPECT_FALSE(io[1].direct) << "the handle was not opened O_DIRECT";
  ::close(fd);
}

}  // namespace
}  // namespace umaptest
