// Regression (found by tests/runtime/durability_property_test.cc, atomic policy; minimal
// sequence: Write(0), EvictPressure, Inject(WAL sync IOError x1), Umsync(all), Umsync(all)).
//
// A dirty block evicted under the atomic policy is staged in the journal. A umsync then
// commits it; the commit's WriteBatch (which also deletes the staged record) reaches the WAL
// but its fsync fails, so the umsync returns the error and the commit is indeterminate. The
// runtime reopens the journal for the next call, and RocksDB's recovery finds the batch: the
// transaction is committed, and the staged record is gone. The runtime did not know that
// transaction (Commit returned an error), so it never applied it: the next umsync found
// nothing to commit and returned 0 while the file still held the old block, and a read of the
// block (its cache entry still said "staged") fetched the old bytes from the file. The data
// stayed only in the journal, for umap-recover to bring back after a crash.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "faultinject/fault_env.h"
#include "faultinject/fault_fs.h"
#include "journal/journal.h"
#include "rocksdb/file_system.h"
#include "runtime/runtime.h"
#include "tests/runtime/test_file.h"
#include "tests/testing/temp_dir.h"

namespace umap::runtime {
namespace {

constexpr size_t kBs = 4096;
constexpr uint64_t kBlocks = 32;

using umaptest::AllBytesAre;
using umaptest::ReadString;

TEST(RegressAtomicUmsync, SucceedsOnlyWithTheBlocksOfASurvivingFailedCommitInTheFile) {
  umaptest::TempDir dir;
  const std::string data = dir.File("data.bin"), jdir = dir.File("journal");
  {
    std::ofstream f(data, std::ios::binary);
    f << std::string(kBlocks * kBs, 'o');
  }
  auto fs = std::make_shared<faultinject::FaultFs>(rocksdb::FileSystem::Default());
  faultinject::FaultEnv env(Env::Default());
  {
    RuntimeOptions o;
    o.cache_bytes = 12 * kBs;  // 8 cache blocks + 4 shadows
    o.block_size = kBs;
    o.handler_threads = 1;
    o.writeback_threads = 1;
    o.journal_dir = jdir;
    o.policy = UMAP_POLICY_ATOMIC;
    o.env = &env;
    o.journal_fs = fs;
    auto rt = Runtime::Create(o);
    ASSERT_TRUE(rt.ok()) << rt.status();
    const int fd = ::open(data.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    auto m = (*rt)->Map(nullptr, kBlocks * kBs, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_TRUE(m.ok()) << m.status();
    char* p = static_cast<char*>(*m);

    std::memset(p, 'A', kBs);
    // Repeated until block 0 is evicted: the replacement policy may keep a recently written
    // block through one pass of cold reads.
    for (int pass = 0; pass < 20 && (*rt)->Stats().dirty_evictions == 0; ++pass) {
      for (uint64_t b = 16; b < kBlocks; ++b) (void)*static_cast<volatile char*>(p + b * kBs);
      for (int i = 0; i < 500 && (*rt)->shadows().in_use() > 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    ASSERT_GE((*rt)->Stats().dirty_evictions, 1u) << "block 0 must have been staged";

    ASSERT_TRUE(fs->FailNext(faultinject::FsOp::kSync, 1,
                             faultinject::FsFault::IOError().OnlyFor(faultinject::FileClass::kWal))
                    .ok());
    EXPECT_FALSE((*rt)->Sync(p, kBlocks * kBs).ok()) << "the WAL fsync failed";
    ASSERT_EQ(fs->fired(faultinject::FsOp::kSync), 1u);

    absl::Status s = (*rt)->Sync(p, kBlocks * kBs);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(AllBytesAre(ReadString(data).substr(0, kBs), 'A'))
        << "umsync returned 0 but the block is not in the file";
    EXPECT_TRUE(AllBytesAre(std::string(p, kBs), 'A')) << "the mapping reads old bytes";
    EXPECT_TRUE(AllBytesAre(ReadString(data).substr(kBs), 'o'));
    ASSERT_TRUE((*rt)->Unmap(p, kBlocks * kBs).ok());
    rt->reset();
    ::close(fd);
  }
  EXPECT_TRUE(AllBytesAre(ReadString(data).substr(0, kBs), 'A')) << "lost after a clean uunmap";
}

}  // namespace
}  // namespace umap::runtime
