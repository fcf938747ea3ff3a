// The file of a mapping changes outside its cache (runtime/fault/mapping_file_change.cc,
// runtime/runtime_file_change.cc): the program's own write(2) and ftruncate (the
// LD_PRELOAD shim reports them), another process's change, and a hand-off to the kernel.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/posix_error.h"
#include "runtime/fault/mapping.h"
#include "runtime/runtime.h"
#include "tests/runtime/test_file.h"
#include "tests/testing/status_matchers.h"

namespace umap::runtime {
namespace {

constexpr size_t kBlock = 4096;
constexpr size_t kBlocks = 16;
constexpr size_t kBytes = kBlocks * kBlock;

class FileChangeTest : public ::testing::Test {
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
    absl::StatusOr<void*> p = rt_->Map(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    ASSERT_OK(p.status());
    p_ = static_cast<char*>(*p);
  }
  void TearDown() override {
    rt_.reset();
    ::close(fd_);
  }
  void WriteFile(uint64_t off, const std::string& s) {
    ASSERT_EQ(::pwrite(fd_, s.data(), s.size(), static_cast<off_t>(off)),
              static_cast<ssize_t>(s.size()));
  }
  off_t FileSize() { return ::lseek(fd_, 0, SEEK_END); }

  umaptest::TempDir dir_;
  std::string path_;
  int fd_ = -1;
  std::unique_ptr<Runtime> rt_;
  char* p_ = nullptr;
};

TEST_F(FileChangeTest, ACleanCopyIsDroppedAndADirtyBlockKeepsItsStore) {
  const char before = p_[100];                                            // block 0 resident, clean
  p_[kBlock + 7] = 'S';                                                   // block 1 dirty
  ASSERT_OK(rt_->PrepareFileChange(p_, 2 * kBlock, /*for_read=*/false));  // writes block 1 back
  p_[kBlock + 9] = 'T';  // stored again after the write-back: kept as a racing store
  WriteFile(100, "W");
  WriteFile(kBlock + 200, "X");
  absl::StatusOr<uint64_t> kept = rt_->FileChanged(p_, 2 * kBlock, kBytes);
  ASSERT_OK(kept.status());
  EXPECT_EQ(*kept, 1u);  // block 1 was stored to meanwhile
  EXPECT_NE(before, 'W');
  EXPECT_EQ(p_[100], 'W');  // the copy went: the file's new byte
  EXPECT_EQ(p_[kBlock + 7], 'S');
  EXPECT_EQ(p_[kBlock + 9], 'T');
}

TEST_F(FileChangeTest, AShrinkRaisesSigbusPastTheEndAndNothingIsWrittenBackPastIt) {
  std::memset(p_ + 10 * kBlock, 'D', kBlock);  // dirty, past the new end
  p_[kBlock] = 'K';                            // dirty, inside it
  ASSERT_EQ(::ftruncate(fd_, 4 * kBlock), 0);
  ASSERT_OK(rt_->FileChanged(p_, 0, 4 * kBlock).status());
  ASSERT_OK(rt_->Sync(p_, kBytes));
  EXPECT_EQ(FileSize(), static_cast<off_t>(4 * kBlock)) << "a umsync grew the file back";
  char c = 0;
  ASSERT_EQ(::pread(fd_, &c, 1, kBlock), 1);
  EXPECT_EQ(c, 'K');
  // (SIGBUS past the end, through the shim: tests/conformance/cases/sigbus_truncate.py.)
}

TEST_F(FileChangeTest, AForeignChangeDropsCleanCopiesOrRefusesWithUnwrittenBlocks) {
  const char before = p_[300];
  ASSERT_NE(before, 'F');
  WriteFile(300, "F");
  // Right after an own write-back a change counts as the mapping's own; wait it out.
  std::this_thread::sleep_for(std::chrono::microseconds(Mapping::kOwnWriteWindowUs + 1000));
  absl::StatusOr<int> what = rt_->ForeignChange(p_, kBytes);
  ASSERT_OK(what.status());
  EXPECT_EQ(*what, static_cast<int>(Mapping::Foreign::kDropped));
  EXPECT_EQ(p_[300], 'F');
  // Now with an unwritten store: every later write-back is refused, the other's bytes stay.
  p_[kBlock * 2] = 'M';
  WriteFile(kBlock * 2 + 1, "O");
  what = rt_->ForeignChange(p_, kBytes);
  ASSERT_OK(what.status());
  EXPECT_EQ(*what, static_cast<int>(Mapping::Foreign::kRefused));
  absl::Status s = rt_->Sync(p_, kBytes);
  EXPECT_EQ(ErrnoFromStatus(s), EBUSY) << s;
  char c = 0;
  ASSERT_EQ(::pread(fd_, &c, 1, kBlock * 2 + 1), 1);
  EXPECT_EQ(c, 'O');
}

TEST_F(FileChangeTest, AHandOffKeepsEveryStoreOfThreadsWritingThroughIt) {
  // Each thread stores a rising counter into its own block while the mapping is handed to
  // the kernel; every store before, during and after lands in the same bytes.
  constexpr int kThreads = 4;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> last[kThreads];
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    last[t] = 0;
    writers.emplace_back([&, t] {
      auto* slot = reinterpret_cast<volatile uint64_t*>(p_ + (2 + t) * kBlock);
      for (uint64_t v = 1; !stop.load(std::memory_order_relaxed); ++v) {
        *slot = v;
        last[t].store(v, std::memory_order_release);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_OK(rt_->HandOff(p_, kBytes));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop = true;
  for (std::thread& w : writers) w.join();
  // The range is the kernel's mapping of the file now: msync, and the file has every store.
  ASSERT_EQ(::msync(p_, kBytes, MS_SYNC), 0);
  for (int t = 0; t < kThreads; ++t) {
    uint64_t v = 0;
    ASSERT_EQ(::pread(fd_, &v, sizeof v, static_cast<off_t>((2 + t) * kBlock)),
              static_cast<ssize_t>(sizeof v));
    EXPECT_EQ(v, last[t].load()) << "thread " << t;
  }
  EXPECT_FALSE(rt_->Owns(p_, 1)) << "Umap still lists the handed-off range";
  ASSERT_EQ(::munmap(p_, kBytes), 0);
}

}  // namespace
}  // namespace umap::runtime
