// A data file on a full file system (writes into its holes fail with ENOSPC), atomic policy,
// a 64-block cache, new blocks written between umsyncs: every umsync fails with ENOSPC, as it
// must. Each one used to journal the whole dirty set again (the blocks of a failed apply
// became dirty again), so the journal grew with every retry until its own disk filled.
// Committed-but-unapplied images must be applied again, never journaled again: the journal's
// size is bounded by the dirty data, not by the number of retries; and once space is back,
// one umsync puts every byte in the file.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/runtime/test_file.h"
#include "umap/umap.h"

namespace umaptest {
namespace {

constexpr size_t kBlock = 4096;

uint64_t TreeBytes(const std::string& dir) {
  uint64_t total = 0;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    struct stat st;
    const std::string p = dir + "/" + e->d_name;
    if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += st.st_size;
  }
  ::closedir(d);
  return total;
}

TEST(RegressFullDataDisk, RetriedUmsyncsApplyTheBacklogAndJournalOnlyNewChanges) {
  TempDir dir;
  const std::string mnt = dir.File("data-fs");
  ASSERT_EQ(::mkdir(mnt.c_str(), 0700), 0);
  ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m,mode=0700"), 0)
      << "mounting a tmpfs for the data file failed: " << std::strerror(errno)
      << " (this test needs root)";
  struct Unmount {
    std::string m;
    ~Unmount() { ::umount2(m.c_str(), MNT_DETACH); }
  } unmount{mnt};

  // A sparse file far larger than its file system, then the file system is filled: every
  // write into a hole fails with ENOSPC.
  const size_t size = 1024 * kBlock;
  const std::string path = mnt + "/data";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
  const std::string filler = mnt + "/filler";
  {
    int ffd = ::open(filler.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(ffd, 0);
    std::vector<char> chunk(64 * 1024, 'f');
    while (::write(ffd, chunk.data(), chunk.size()) > 0) {
    }
    ::close(ffd);
  }

  const std::string journal = dir.File("journal");
  umap_config c;
  ASSERT_EQ(umap_config_init(&c), 0);
  c.cache_bytes = 64 * kBlock;
  c.journal_dir = journal.c_str();
  c.policy = UMAP_POLICY_ATOMIC;
  umap_runtime* rt = umap_runtime_create(&c);
  ASSERT_NE(rt, nullptr);
  char* p = static_cast<char*>(
      umap_ex(rt, nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(p, MAP_FAILED) << std::strerror(errno);

  std::vector<char> want(size, 0);
  constexpr int kWritingRounds = 8, kRetries = 22, kNewPerRound = 8;
  uint64_t after_writes = 0;
  for (int round = 0; round < kWritingRounds + kRetries; ++round) {
    if (round < kWritingRounds) {
      for (int k = 0; k < kNewPerRound; ++k) {
        const size_t b = static_cast<size_t>(round * kNewPerRound + k) * 3;  // spread out
        std::memset(p + b * kBlock, 'a' + round, kBlock);
        std::memset(want.data() + b * kBlock, 'a' + round, kBlock);
      }
    }
    errno = 0;
    ASSERT_EQ(umsync(p, size, MS_SYNC), -1) << "round " << round << ": the data disk is full";
    ASSERT_EQ(errno, ENOSPC) << "round " << round << ": " << std::strerror(errno);
    if (round == kWritingRounds - 1) after_writes = TreeBytes(journal);
  }
  const uint64_t after_retries = TreeBytes(journal);
  const uint64_t dirty = uint64_t{kWritingRounds} * kNewPerRound * kBlock;  // 256 KiB
  // Journaling the dirty set again at every retry would add ~256 KiB a round (5.5 MiB over
  // the 22 retries); applying the backlog again adds nothing but bookkeeping.
  EXPECT_LT(after_retries, after_writes + 64 * 1024)
      << "journal grew from " << after_writes << " to " << after_retries << " bytes over "
      << kRetries << " retries with nothing new to journal";
  EXPECT_LT(after_writes, 8 * dirty) << "journal " << after_writes << " bytes for " << dirty
                                     << " bytes of dirty data";

  // Space is back: one umsync applies everything, and the file holds every byte.
  ASSERT_EQ(::unlink(filler.c_str()), 0);
  ASSERT_EQ(umsync(p, size, MS_SYNC), 0) << std::strerror(errno);
  std::vector<char> got(size);
  ASSERT_EQ(::pread(fd, got.data(), size, 0), static_cast<ssize_t>(size));
  EXPECT_TRUE(got == want) << "the file is not the sum of the writes";
  ASSERT_EQ(uunmap(p, size), 0);
  ::close(fd);
  EXPECT_EQ(umap_runtime_destroy(rt), 0);
}

}  // namespace
}  // namespace umaptest
