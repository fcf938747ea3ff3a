// Regression (found reading JournalWriteBack, deferred file sync).
//
// A umsync whose journal commit fails is indeterminate: the commit may have reached the
// journal's disk. When another mapping's umsync has reopened the journal, a read of one of
// the failed umsync's blocks adopts the commit if it survived (AdoptSurvivors), so that
// the read finds its images. With defer_file_sync the sink's applier thread writes adopted
// transactions to the file, but only a commit woke it: after a read adopted one, the file
// went on lacking the blocks until the mapping's next umsync or its uunmap, although
// the journal had them committed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "faultinject/fault_fs.h"
#include "rocksdb/file_system.h"
#include "runtime/runtime.h"
#include "tests/runtime/test_file.h"
#include "tests/testing/temp_dir.h"

namespace umap::runtime {
namespace {

using faultinject::FileClass;
using faultinject::FsFault;
using faultinject::FsOp;

constexpr size_t kBs = 4096;
constexpr uint64_t kBlocks = 32;

using umaptest::AllBytesAre;
using umaptest::ReadString;

char* MapFile(Runtime& rt, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR);
  EXPECT_GE(fd, 0) << path;
  auto m = rt.Map(nullptr, kBlocks * kBs, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? static_cast<char*>(*m) : nullptr;
}

TEST(RegressDeferredSurvivor, AReadThatAdoptsAFailedCommitGetsItWrittenToTheFile) {
  umaptest::TempDir dir;
  const std::string a_path = dir.File("a.bin"), b_path = dir.File("b.bin");
  for (const std::string& path : {a_path, b_path}) {
    std::ofstream f(path, std::ios::binary);
    f << std::string(kBlocks * kBs, 'o');
  }
  auto fs = std::make_shared<faultinject::FaultFs>(rocksdb::FileSystem::Default());
  RuntimeOptions o;
  o.cache_bytes = 12 * kBs;  // 8 cache blocks + 4 shadows
  o.lazy_sizing = false;
  o.block_size = kBs;
  o.handler_threads = 1;
  o.writeback_threads = 1;
  o.stats_period_ms = 0;
  o.journal_dir = dir.File("journal");
  o.journal_fs = fs;
  o.policy = UMAP_POLICY_ATOMIC;
  o.defer_file_sync = true;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  char* a = MapFile(**rt, a_path);
  char* b = MapFile(**rt, b_path);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);

  // Block 0 of A is written and evicted: staged in the journal.
  std::memset(a, 'A', kBs);
  for (int pass = 0; pass < 20 && (*rt)->Stats().dirty_evictions == 0; ++pass) {
    for (uint64_t blk = 16; blk < kBlocks; ++blk) {
      (void)*static_cast<volatile char*>(a + blk * kBs);
    }
    for (int i = 0; i < 500 && (*rt)->shadows().in_use() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ASSERT_GE((*rt)->Stats().dirty_evictions, 1u) << "block 0 of A must have been staged";

  // A's umsync commits it, but the WAL's fsync fails: indeterminate, and the journal is
  // poisoned. The batch is in the WAL file, so the reopen below finds it committed.
  ASSERT_TRUE(fs->FailNext(FsOp::kSync, 1, FsFault::IOError().OnlyFor(FileClass::kWal)).ok());
  EXPECT_FALSE((*rt)->Sync(a, kBlocks * kBs).ok()) << "the WAL fsync failed";
  ASSERT_EQ(fs->fired(FsOp::kSync), 1u);

  // B's umsync reopens the journal.
  std::memset(b, 'B', kBs);
  absl::Status s = (*rt)->Sync(b, kBs);
  ASSERT_TRUE(s.ok()) << s;

  // A read of A's block adopts the survivor, and reads its image from it.
  EXPECT_TRUE(AllBytesAre(std::string(a, kBs), 'A')) << "the mapping reads old bytes";

  // The applier writes it to the file without another umsync of A.
  bool in_file = false;
  for (int i = 0; i < 500 && !in_file; ++i) {
    in_file = AllBytesAre(ReadString(a_path).substr(0, kBs), 'A');
    if (!in_file) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(in_file) << "5 s after the read adopted it, the committed block is not in the file";
  EXPECT_TRUE(AllBytesAre(ReadString(a_path).substr(kBs), 'o'));

  ASSERT_TRUE((*rt)->Unmap(a, kBlocks * kBs).ok());
  ASSERT_TRUE((*rt)->Unmap(b, kBlocks * kBs).ok());
  rt->reset();
  EXPECT_TRUE(AllBytesAre(ReadString(a_path).substr(0, kBs), 'A')) << "lost after uunmap";
  EXPECT_TRUE(AllBytesAre(ReadString(b_path).substr(0, kBs), 'B'));
}

}  // namespace
}  // namespace umap::runtime
