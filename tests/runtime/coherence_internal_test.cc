// A partitioned-write mapping whose locks the file system dropped (a node cut off from a
// GlusterFS volume, an NFSv4 lease that expired) writes nothing more: its umsync fails with
// ENOLCK saying which range it lost and who holds it now, and the file keeps what was there
// (runtime/writeback/coherence.h, docs/consistency.md).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/ofd_lock.h"
#include "base/posix_error.h"
#include "runtime/fault/mapping.h"
#include "runtime/runtime.h"
#include "tests/runtime/test_file.h"
#include "tests/testing/status_matchers.h"

namespace umap::runtime {
namespace {

using ::testing::HasSubstr;
constexpr size_t kBlock = 4096;
constexpr size_t kBytes = 16 * kBlock;

class CoherenceLockLossTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("f");
    fd_ = umaptest::MakePatternFile(path_, kBytes);
    ASSERT_GE(fd_, 0);
    RuntimeOptions o;
    o.cache_bytes = 64 * kBlock;
    o.journal_dir = dir_.File("journal");
    absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Create(o);
    ASSERT_OK(rt.status());
    rt_ = *std::move(rt);
    CoherenceRequest req;
    req.mode = UMAP_COHERENCE_PARTITIONED_WRITE;
    req.write_ranges = {{0, 8 * kBlock}};
    absl::StatusOr<void*> p = rt_->Map(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                                       0, req);
    ASSERT_OK(p.status());
    p_ = static_cast<char*>(*p);
  }
  void TearDown() override {
    rt_.reset();  // its write-back fails (the lock is gone) and is logged, nothing written
    ::close(fd_);
  }
  // As the file system would: nothing tells the mapping. Then waits out the window in which
  // a passing test stands for later write-backs (Coherence::kFresh), so the next write-back
  // tests again.
  void DropLocks() {
    rt_->WhileMappingsPinned([&] {
      rt_->ForEachMapping([](Mapping& m) { m.coherence()->TEST_DropLocks(); });
    });
    std::this_thread::sleep_for(Coherence::kFresh + std::chrono::milliseconds(1));
  }
  std::string Block0() { return umaptest::ReadString(path_).substr(0, kBlock); }

  umaptest::TempDir dir_;
  std::string path_;
  int fd_ = -1;
  std::unique_ptr<Runtime> rt_;
  char* p_ = nullptr;
};

TEST_F(CoherenceLockLossTest, AWriterWhoseLockWasDroppedRefusesItsUmsyncAndWritesNothing) {
  std::memset(p_, 'x', kBlock);
  ASSERT_OK(rt_->Sync(p_, kBytes));
  ASSERT_EQ(Block0(), std::string(kBlock, 'x'));
  DropLocks();
  std::memset(p_, 'y', kBlock);
  absl::Status s = rt_->Sync(p_, kBytes);
  EXPECT_EQ(ErrnoFromStatus(s), ENOLCK) << s;
  EXPECT_THAT(s.message(), HasSubstr("lost its lock on bytes [0, 32768)"));
  EXPECT_THAT(s.message(), HasSubstr("the file system dropped it"));
  EXPECT_EQ(Block0(), std::string(kBlock, 'x')) << "a writer without its lock wrote";
  // For good: even once nobody else holds the range, it does not write again.
  EXPECT_EQ(ErrnoFromStatus(rt_->Sync(p_, kBytes)), ENOLCK);
  EXPECT_EQ(Block0(), std::string(kBlock, 'x'));
}

TEST_F(CoherenceLockLossTest, ARangeAnotherWriterTookIsRefusedNamingIt) {
  DropLocks();
  absl::StatusOr<std::unique_ptr<OfdLockFile>> other = OfdLockFile::Open(path_, false, false);
  ASSERT_OK(other.status());
  // Another mapping's lock: in Umap's lock space (Coherence::kLockSpace).
  absl::StatusOr<std::optional<LockConflict>> taken =
      (*other)->TryLock(Coherence::kLockSpace, kBlock, true);
  ASSERT_OK(taken.status());
  ASSERT_FALSE(taken->has_value());
  std::memset(p_, 'z', kBlock);
  absl::Status s = rt_->Sync(p_, kBytes);
  EXPECT_EQ(ErrnoFromStatus(s), ENOLCK) << s;
  EXPECT_THAT(s.message(), HasSubstr("(now a write lock on bytes [0, 4096) is held by"));
  const std::vector<char> initial = umaptest::Pattern(kBlock);
  EXPECT_EQ(Block0(), std::string(initial.begin(), initial.end())) << "the file changed";
}

}  // namespace
}  // namespace umap::runtime
