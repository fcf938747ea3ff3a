// SameFile: which file found at a journaled path is the journaled one. The inode must match,
// the device unless both are anonymous (FUSE, NFS), and a journaled birth (birth time, or the
// id in user.umap.id where the file system keeps no birth time) must be found again.
#include <gtest/gtest.h>
#include <sys/sysmacros.h>

#include "recovery/recovery.h"

namespace umap::recovery {
namespace {

FileIdentity Id(uint64_t device, uint64_t inode, FileBirth birth = FileBirth::kUnknown,
                uint64_t a = 0, uint64_t b = 0) {
  FileIdentity f{"/d/f", device, inode, 4096};
  f.birth = birth;
  f.birth_a = a;
  f.birth_b = b;
  return f;
}

TEST(SameFileTest, ABirthMustBeFoundAgain) {
  const uint64_t disk = makedev(8, 1);
  const FileIdentity born = Id(disk, 12, FileBirth::kBirthTime, 1700000000, 5);
  EXPECT_TRUE(SameFile(born, Id(disk, 12, FileBirth::kBirthTime, 1700000000, 5)));
  EXPECT_FALSE(SameFile(born, Id(disk, 12, FileBirth::kBirthTime, 1700000000, 6)))
      << "re-created at the same inode";
  EXPECT_FALSE(SameFile(born, Id(disk, 12))) << "no birth found";
  const FileIdentity stamped = Id(disk, 12, FileBirth::kIdXattr, 0xabc, 0xdef);
  EXPECT_TRUE(SameFile(stamped, Id(disk, 12, FileBirth::kIdXattr, 0xabc, 0xdef)));
  EXPECT_FALSE(SameFile(stamped, Id(disk, 12))) << "a re-created file has no id";
  EXPECT_FALSE(SameFile(stamped, Id(disk, 12, FileBirth::kIdXattr, 0xabc, 0xdee)));
  // A journal without a birth (an older format, or a file system with neither): device and
  // inode decide, as before.
  EXPECT_TRUE(SameFile(Id(disk, 12), Id(disk, 12, FileBirth::kBirthTime, 1, 2)));
  EXPECT_FALSE(SameFile(Id(disk, 12), Id(disk, 13)));
  // Anonymous devices (a FUSE mount) change at each mount; the birth still decides.
  EXPECT_TRUE(SameFile(Id(makedev(0, 50), 7, FileBirth::kIdXattr, 1, 2),
                       Id(makedev(0, 51), 7, FileBirth::kIdXattr, 1, 2)));
  EXPECT_FALSE(SameFile(Id(makedev(0, 50), 7, FileBirth::kIdXattr, 1, 2), Id(makedev(0, 51), 7)));
}

TEST(SameFileTest, DescribeIdentityNamesTheBirth) {
  EXPECT_EQ(DescribeIdentity(Id(5, 12, FileBirth::kBirthTime, 1700000000, 123)),
            "device 5 inode 12 born 2023-11-14 22:13:20.000000123 UTC");
  EXPECT_EQ(DescribeIdentity(Id(5, 12, FileBirth::kIdXattr, 1, 2)),
            "device 5 inode 12 id 00000000000000010000000000000002");
  EXPECT_EQ(DescribeIdentity(Id(5, 12)), "device 5 inode 12");
}

}  // namespace
}  // namespace umap::recovery
