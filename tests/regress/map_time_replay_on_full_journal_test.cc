// Regression (found by umap-chaos, seed 20261201, iteration 20: enospc, journal-injected
// NoSpace armed before the journal's open).
//
// A file is mapped again while the journal still holds a committed transaction of an
// earlier, killed run. Umap replays it before the mapping reads anything. The replay wrote
// the blocks to the file, but the journal's disk was full, so marking the transaction
// applied failed. umap_ex then failed with EIO, which an application reads as a broken
// file. It must fail with ENOSPC (a condition worth waiting out), keep the records, and map
// once the space is back.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "base/crash_point.h"
#include "base/posix_error.h"
#include "faultinject/fault_fs.h"
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

RuntimeOptions Options(const std::string& jdir) {
  RuntimeOptions o;
  o.cache_bytes = 64 * kBs;
  o.block_size = kBs;
  o.handler_threads = 1;
  o.writeback_threads = 1;
  o.journal_dir = jdir;
  o.policy = UMAP_POLICY_ATOMIC;
  return o;
}

// In a child: map, write 'A' over the first 4 blocks, umsync; the crash point kills it
// after the commit, before the apply.
void KillAfterFirstCommit(const std::string& data, const std::string& jdir) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto rt = Runtime::Create(Options(jdir));
    const int fd = ::open(data.c_str(), O_RDWR);
    if (!rt.ok() || fd < 0) ::_exit(2);
    auto m = (*rt)->Map(nullptr, kBlocks * kBs, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!m.ok()) ::_exit(3);
    std::memset(*m, 'A', 4 * kBs);
    if (!crash_point::Arm("journal.after_commit", 1, crash_point::Action::Kill()).ok()) {
      ::_exit(4);
    }
    (void)(*rt)->Sync(*m, kBlocks * kBs);
    ::_exit(5);  // not reached: the crash point fired
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  ASSERT_TRUE(AllBytesAre(ReadString(data), 'o')) << "the crash point fires before the apply";
}

TEST(RegressMapTimeReplay, OnAFullJournalFailsWithEnospcAndMapsOnceSpaceIsBack) {
  umaptest::TempDir dir;
  const std::string data = dir.File("data.bin"), jdir = dir.File("journal");
  {
    std::ofstream f(data, std::ios::binary);
    f << std::string(kBlocks * kBs, 'o');
  }
  ASSERT_NO_FATAL_FAILURE(KillAfterFirstCommit(data, jdir));

  auto fs = std::make_shared<faultinject::FaultFs>(rocksdb::FileSystem::Default());
  // Every WAL append fails: the open (a new MANIFEST, a table of the old WAL) succeeds,
  // marking the replayed transaction applied does not.
  ASSERT_TRUE(fs->FailNext(faultinject::FsOp::kAppend, 1 << 20,
                           faultinject::FsFault::NoSpace().OnlyFor(faultinject::FileClass::kWal))
                  .ok());
  RuntimeOptions o = Options(jdir);
  o.journal_fs = fs;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const int fd = ::open(data.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  auto m = (*rt)->Map(nullptr, kBlocks * kBs, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_FALSE(m.ok()) << "mapped although the replay could not be recorded";
  EXPECT_GE(fs->fired(faultinject::FsOp::kAppend), 1u);
  EXPECT_EQ(ErrnoFromStatus(m.status()), ENOSPC) << m.status();
  EXPECT_NE(m.status().message().find(jdir), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("No space left"), std::string::npos) << m.status();

  fs->ClearAll();
  m = (*rt)->Map(nullptr, kBlocks * kBs, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  char* p = static_cast<char*>(*m);
  EXPECT_TRUE(AllBytesAre(std::string(p, 4 * kBs), 'A')) << "the committed blocks";
  EXPECT_TRUE(AllBytesAre(std::string(p + 4 * kBs, (kBlocks - 4) * kBs), 'o'));
  ASSERT_TRUE((*rt)->Unmap(p, kBlocks * kBs).ok());
  rt->reset();
  ::close(fd);
  const std::string after = ReadString(data);
  EXPECT_TRUE(AllBytesAre(after.substr(0, 4 * kBs), 'A'));
  EXPECT_TRUE(AllBytesAre(after.substr(4 * kBs), 'o'));
}

}  // namespace
}  // namespace umap::runtime
