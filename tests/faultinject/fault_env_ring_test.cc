// FaultEnv with Options::through_ring: files offer io_uring (File::SupportsRing), the real
// submission is the target's, and the armed faults reach its results: what the runtime's
// I/O channels and the write engine see on their fast path. A small ring of the test's own
// drives PrepareRead/FinishRead and PrepareWritev/FinishWritev as they do.
#include <fcntl.h>
#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/status_macros.h"
#include "faultinject/fault_env.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace umap::faultinject {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using ::umap::testing::StatusIs;

class Ring {
 public:
  Ring() { ok_ = io_uring_queue_init(4, &ring_, 0) == 0; }
  ~Ring() {
    if (ok_) io_uring_queue_exit(&ring_);
  }
  bool ok() const { return ok_; }
  // One submission prepared by `prep`, its raw result.
  template <typename Prep>
  int Run(Prep prep) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    prep(sqe);
    if (io_uring_submit(&ring_) != 1) return -1000;
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring_, &cqe) != 0) return -1001;
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    return res;
  }

 private:
  io_uring ring_;
  bool ok_ = false;
};

class FaultEnvRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ring_.ok()) << "io_uring_queue_init failed";
    path_ = dir_.File("data");
    int fd = ::open(path_.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    const std::string old(8192, 'o');
    ASSERT_EQ(::pwrite(fd, old.data(), old.size(), 0), 8192);
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
    FaultEnv::Options o;
    o.through_ring = true;
    env_ = std::make_unique<FaultEnv>(Env::Default(), o);
    ASSERT_OK_AND_ASSIGN(auto f, env_->OpenFile(path_, OpenMode::kReadWrite));
    file_ = std::move(f);
  }
  int Read(uint64_t offset, char* buf, uint32_t len) {
    const int raw =
        ring_.Run([&](io_uring_sqe* sqe) { file_->PrepareRead(sqe, offset, buf, len); });
    return file_->FinishRead(offset, buf, len, raw);
  }
  int Writev(uint64_t offset, const iovec* iov, unsigned n) {
    const int raw =
        ring_.Run([&](io_uring_sqe* sqe) { file_->PrepareWritev(sqe, iov, n, offset); });
    return file_->FinishWritev(offset, iov, n, raw);
  }
  std::string OnDisk() {
    std::string s(8192, '\0');
    int fd = ::open(path_.c_str(), O_RDONLY);
    const ssize_t n = ::pread(fd, s.data(), s.size(), 0);
    ::close(fd);
    s.resize(n < 0 ? 0 : static_cast<size_t>(n));
    return s;
  }

  ::umap::testing::TempDir dir_;
  std::string path_;
  Ring ring_;
  std::unique_ptr<FaultEnv> env_;
  std::unique_ptr<File> file_;
};

TEST_F(FaultEnvRingTest, FilesOfferTheRingOnlyWhenAskedAndStillHandOutNoDescriptor) {
  EXPECT_TRUE(file_->SupportsRing());
  EXPECT_EQ(file_->fd(), -1);
  FaultEnv plain(Env::Default());
  ASSERT_OK_AND_ASSIGN(auto f, plain.OpenFile(path_, OpenMode::kReadOnly));
  EXPECT_FALSE(f->SupportsRing());  // every byte through ReadAt/WriteAt, as before
}

TEST_F(FaultEnvRingTest, ReadFaultsReachTheRingsResults) {
  char buf[4096];
  EXPECT_EQ(Read(0, buf, 4096), 4096);
  ASSERT_OK(env_->FailNext(Op::kRead, 1, Fault::Error(EIO)));
  EXPECT_EQ(Read(0, buf, 4096), -EIO);
  EXPECT_EQ(Read(0, buf, 4096), 4096);  // only the next one
  ASSERT_OK(env_->FailNext(Op::kRead, 1, Fault::ShortRead(ETIMEDOUT, 100)));
  EXPECT_EQ(Read(0, buf, 4096), -ETIMEDOUT);
  ASSERT_OK(env_->FailNext(Op::kRead, 1, Fault::TruncatedRead(100)));
  EXPECT_EQ(Read(0, buf, 4096), 100);
  EXPECT_EQ(env_->fired(FaultKind::kError), 1u);
  EXPECT_EQ(env_->fired(FaultKind::kShortRead), 1u);
  EXPECT_EQ(env_->fired(FaultKind::kTruncatedRead), 1u);
}

TEST_F(FaultEnvRingTest, ATornWriteLandsItsPrefixThenFailsAndAPowerCutTakesItBack) {
  std::string a(4096, 'a'), b(4096, 'b');
  iovec iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  ASSERT_OK(env_->FailNext(Op::kWrite, 1, Fault::TornWrite(EIO, 5000)));
  EXPECT_EQ(Writev(0, iov, 2), -EIO);
  const std::string disk = OnDisk();
  EXPECT_EQ(disk.substr(0, 4096), a);
  EXPECT_EQ(disk.substr(4096, 904), std::string(904, 'b'));
  EXPECT_EQ(disk.substr(5000), std::string(8192 - 5000, 'o'));
  EXPECT_THAT(env_->UnsyncedRanges(path_), ElementsAre(Pair(0u, 5000u)));
  env_->SimulatePowerCut();
  ASSERT_OK(env_->DropUnsyncedData(DropMode::kDropAll));
  EXPECT_EQ(OnDisk(), std::string(8192, 'o'));
}

TEST_F(FaultEnvRingTest, AFailedWriteWritesNothingAndAGoodOneIsTracked) {
  std::string a(4096, 'a');
  iovec iov[1] = {{a.data(), a.size()}};
  ASSERT_OK(env_->FailNext(Op::kWrite, 1, Fault::Error(ENOSPC)));
  EXPECT_EQ(Writev(4096, iov, 1), -ENOSPC);
  EXPECT_EQ(OnDisk(), std::string(8192, 'o'));
  EXPECT_EQ(Writev(4096, iov, 1), 4096);
  EXPECT_THAT(env_->UnsyncedRanges(path_), ElementsAre(Pair(4096u, 8192u)));
  ASSERT_OK(file_->Sync());
  EXPECT_TRUE(env_->UnsyncedRanges(path_).empty());
}

TEST_F(FaultEnvRingTest, StallsOfReadsAndWritesCannotBeArmedThroughTheRing) {
  EXPECT_THAT(env_->FailNext(Op::kRead, 1, Fault::Stall(absl::Seconds(1))),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(env_->FailNext(Op::kWrite, 1, Fault::Stall(absl::Seconds(1))),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(env_->FailNext(Op::kSync, 1, Fault::Stall(absl::Milliseconds(1))));
}

}  // namespace
}  // namespace umap::faultinject
