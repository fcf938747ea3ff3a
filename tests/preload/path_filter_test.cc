#include "runtime/preload/path_filter.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace umap::preload {
namespace {

TEST(PathFilterTest, PrefixMatchesWholePathComponentsOnly) {
  PathFilter f("/data:/scratch/job/", nullptr);
  EXPECT_TRUE(f.MatchesPath("/data"));
  EXPECT_TRUE(f.MatchesPath("/data/m.bin"));
  EXPECT_TRUE(f.MatchesPath("/scratch/job/a/b"));
  EXPECT_FALSE(f.MatchesPath("/database/m.bin"));
  EXPECT_FALSE(f.MatchesPath("/scratch/jobs/m.bin"));
  EXPECT_FALSE(f.MatchesPath("/other/data/m.bin"));
}

TEST(PathFilterTest, EmptyListsMatchNothing) {
  PathFilter f("::", ",,");
  EXPECT_TRUE(f.empty());
  EXPECT_FALSE(f.MatchesPath("/anything"));
  PathFilter none(nullptr, nullptr);
  EXPECT_TRUE(none.empty());
  EXPECT_FALSE(none.Matches(0));
}

TEST(PathFilterTest, PrefixIsCanonicalisedThroughSymlinks) {
  umaptest::TempDir dir;
  ASSERT_EQ(::mkdir(dir.File("real").c_str(), 0700), 0);
  ASSERT_EQ(::symlink(dir.File("real").c_str(), dir.File("link").c_str()), 0);
  { std::ofstream(dir.File("real/f.bin")) << "x"; }
  PathFilter f(dir.File("link/").c_str(), nullptr);
  const int fd = ::open(dir.File("link/f.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(f.Matches(fd));  // the descriptor's path is .../real/f.bin
  ::close(fd);
  const int other = ::open("/proc/self/exe", O_RDONLY);
  EXPECT_FALSE(f.Matches(other));
  ::close(other);
}

TEST(PathFilterTest, NonRegularFilesNeverMatch) {
  PathFilter f("/", nullptr);
  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(f.Matches(fd));
  ::close(fd);
}

TEST(PathFilterTest, MountinfoLineGivesTheTypeOfItsDevice) {
  const std::string line =
      "36 35 98:17 /root /mnt/gv0 rw,noatime shared:1 master:2 - fuse.glusterfs "
      "10.77.0.11:/gv0 rw,user_id=0";
  std::string_view type;
  EXPECT_TRUE(PathFilter::TypeIfDevice(line, makedev(98, 17), &type));
  EXPECT_EQ(type, "fuse.glusterfs");
  EXPECT_FALSE(PathFilter::TypeIfDevice(line, makedev(98, 1), &type));
  EXPECT_FALSE(PathFilter::TypeIfDevice(line, makedev(9, 17), &type));
  EXPECT_FALSE(PathFilter::TypeIfDevice("garbage", makedev(98, 17), &type));
  EXPECT_FALSE(PathFilter::TypeIfDevice("1 2 98:17 / / rw - ", makedev(98, 17), &type));
}

TEST(PathFilterTest, FileSystemTypeComesFromThisProcesssMountinfo) {
  // /dev/shm is tmpfs on every Debian system; /proc is proc.
  struct stat shm, proc;
  ASSERT_EQ(::stat("/dev/shm", &shm), 0);
  ASSERT_EQ(::stat("/proc/self", &proc), 0);
  char type[64];
  ASSERT_TRUE(PathFilter::FsTypeOfDevice(shm.st_dev, type, sizeof(type)));
  EXPECT_STREQ(type, "tmpfs");
  ASSERT_TRUE(PathFilter::FsTypeOfDevice(proc.st_dev, type, sizeof(type)));
  EXPECT_STREQ(type, "proc");

  PathFilter f(nullptr, "nfs,tmpfs");
  const std::string shm_file = "/dev/shm/umap-path-filter-test-" + std::to_string(::getpid());
  const int fd = ::open(shm_file.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ::unlink(shm_file.c_str());
  EXPECT_TRUE(f.Matches(fd));
  EXPECT_TRUE(f.Matches(fd));  // the cached verdict
  ::close(fd);
  PathFilter nfs_only(nullptr, "nfs");
  const int fd2 = ::open("/proc/self/exe", O_RDONLY);
  EXPECT_FALSE(nfs_only.Matches(fd2));
  ::close(fd2);
}

}  // namespace
}  // namespace umap::preload
