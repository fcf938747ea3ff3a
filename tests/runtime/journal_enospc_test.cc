// ENOSPC on the journal for real: the journal lives on a small tmpfs that fills up. umsync
// must return ENOSPC with every acknowledged byte intact and the new writes still dirty in
// cache; once space is freed, the same data syncs. Needs root to mount the tmpfs; CI and the
// dev machines run as root, anything else is a set-up error, not a skip.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
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

class TmpfsJournal {
 public:
  explicit TmpfsJournal(const std::string& dir, const char* size) : dir_(dir) {
    ::mkdir(dir_.c_str(), 0700);
    std::string opts = std::string("size=") + size + ",mode=0700";
    mounted_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, opts.c_str()) == 0;
    err_ = errno;
  }
  ~TmpfsJournal() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  int err() const { return err_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  int err_ = 0;
};

// Fills the file system holding `path` until write() says ENOSPC; returns bytes written.
size_t FillUp(const std::string& path) {
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  if (fd < 0) return 0;
  std::vector<char> chunk(64 * 1024, 'f');
  size_t total = 0;
  for (;;) {
    ssize_t n = ::write(fd, chunk.data(), chunk.size());
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
  ::close(fd);
  return total;
}

TEST(JournalEnospc, UmsyncReturnsEnospcLosesNothingAndSucceedsOnceSpaceReturns) {
  TempDir dir;
  const std::string mnt = dir.File("jfs");
  TmpfsJournal fs(mnt, "8m");
  ASSERT_TRUE(fs.mounted()) << "mounting a tmpfs for the journal failed: "
                            << std::strerror(fs.err()) << " (this test needs root)";
  const size_t size = 256 * kBlock;
  const std::string path = dir.File("data");
  int fd = MakePatternFile(path, size);
  ASSERT_GE(fd, 0);
  umap_config c;
  ASSERT_EQ(umap_config_init(&c), 0);
  c.cache_bytes = 64 * kBlock;
  const std::string journal = mnt + "/journal";
  c.journal_dir = journal.c_str();
  c.policy = UMAP_POLICY_ATOMIC;
  umap_runtime* rt = umap_runtime_create(&c);
  ASSERT_NE(rt, nullptr);
  char* p = static_cast<char*>(umap_ex(rt, nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(p, MAP_FAILED) << std::strerror(errno);

  // Round 1 is acknowledged.
  std::vector<char> want = Pattern(size);
  for (size_t b = 0; b < size / kBlock; b += 64) {  // small: its journal space is small
    std::memset(p + b * kBlock, '1', kBlock);
    std::memset(want.data() + b * kBlock, '1', kBlock);
  }
  ASSERT_EQ(umsync(p, size, MS_SYNC), 0) << std::strerror(errno);
  EXPECT_EQ(ReadAll(path), want);

  // Round 2 (1 MiB, 4x the cache: most of it is spilled to the journal while there is room),
  // then the journal's file system fills up, so round 2 cannot commit.
  std::vector<char> want2 = want;
  for (size_t b = 0; b < size / kBlock; ++b) {
    std::memset(p + b * kBlock, '2', kBlock);
    std::memset(want2.data() + b * kBlock, '2', kBlock);
  }
  const std::string filler = mnt + "/filler";
  ASSERT_GT(FillUp(filler), 0u);
  errno = 0;
  EXPECT_EQ(umsync(p, size, MS_SYNC), -1);
  EXPECT_EQ(errno, ENOSPC) << std::strerror(errno);
  EXPECT_EQ(ReadAll(path), want) << "acknowledged data intact, nothing of round 2 applied";
  errno = 0;
  EXPECT_EQ(umsync(p, size, MS_SYNC), -1) << "still full: still ENOSPC, never a silent success";
  EXPECT_EQ(errno, ENOSPC);
  // (No reads of the mapping here: with the journal full, dirty blocks cannot be spilled,
  // so a miss waits for a cache block — back-pressure — until space returns.)

  // Space returns: the same data syncs.
  ASSERT_EQ(::unlink(filler.c_str()), 0);
  ASSERT_EQ(umsync(p, size, MS_SYNC), 0) << std::strerror(errno);
  EXPECT_EQ(ReadAll(path), want2);
  ASSERT_EQ(uunmap(p, size), 0);
  ::close(fd);
  EXPECT_EQ(umap_runtime_destroy(rt), 0);
}

}  // namespace
}  // namespace umaptest
