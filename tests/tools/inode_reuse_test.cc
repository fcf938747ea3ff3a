// A file deleted and created again at the same size on ext4 gets the freed inode number back:
// path, device, inode and size all match the journaled file. Its birth time does not, so
// umap-recover refuses it (exit 2, naming both identities) and a new map of it fails, and
// neither writes the old journal's images into it. On a loop-mounted ext4 image of its own
// (root, a loop device); the writer and umap-recover run as the user nobody when setpriv
// is there, as an ordinary user would.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/recovery/kill_workload.h"
#include "tests/recovery/subprocess.h"
#include "tests/testing/capability.h"
#include "tests/testing/temp_dir.h"

namespace umap::tools {
namespace {

using ::recoverytest::Contents;
using ::recoverytest::ProcResult;
using ::recoverytest::ReadFile;
using ::recoverytest::WriteFile;
using ::testing::HasSubstr;

uint64_t InodeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

class InodeReuseTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (mounted_) std::system(("umount '" + mnt_ + "'").c_str());
  }

  // argv run as nobody when setpriv is there (and as this user otherwise).
  std::vector<std::string> AsUser(std::vector<std::string> argv) const {
    if (!as_nobody_) return argv;
    std::vector<std::string> out = {"/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup",
                                    "--clear-groups"};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

  umap::testing::TempDir dir_;
  std::string mnt_;
  bool mounted_ = false;
  bool as_nobody_ = false;
};

TEST_F(InodeReuseTest, ARecreatedFileAtTheSameInodeIsRefusedByRecoveryAndByMap) {
  UMAP_SKIP_WITHOUT("root", "loop-device");
  const std::string image = dir_.File("ext4.img");
  mnt_ = dir_.File("mnt");
  std::filesystem::create_directory(mnt_);
  ASSERT_EQ(std::system(("truncate -s 64M '" + image + "' && mkfs.ext4 -q -F '" + image +
                         "' && mount -o loop '" + image + "' '" + mnt_ + "'")
                            .c_str()),
            0);
  mounted_ = true;
  as_nobody_ = ::access("/usr/bin/setpriv", X_OK) == 0;
  // The user may pass through the test's directory and owns the file system's root.
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  if (as_nobody_) {
    ASSERT_EQ(std::system(("chown nobody:nogroup '" + mnt_ + "'").c_str()), 0);
  }
  const std::string file = mnt_ + "/data", journal = mnt_ + "/journal";
  const std::string initial = Contents({}, recoverytest::kKillBlocks);
  ASSERT_TRUE(WriteFile(file, initial));
  if (as_nobody_) {
    ASSERT_EQ(std::system(("chown nobody:nogroup '" + file + "'").c_str()), 0);
  }
  const uint64_t inode = InodeOf(file);

  // A writer killed right after its second umsync committed: the journal holds a committed,
  // unapplied transaction for the file.
  ProcResult w = recoverytest::Run(AsUser({UMAP_KILL_WORKER_BIN, "umap", file, journal, "2"}),
                                   dir_.path(), {"UMAP_CRASH_AT=journal.after_commit:2"});
  ASSERT_EQ(w.signal, SIGKILL) << w.exit_code << w.err;

  // The file is deleted and created again at the same size: ext4 hands it the same inode.
  std::filesystem::remove(file);
  const std::string other(initial.size(), 'n');
  ASSERT_TRUE(WriteFile(file, other));
  if (as_nobody_) {
    ASSERT_EQ(std::system(("chown nobody:nogroup '" + file + "'").c_str()), 0);
  }
  ASSERT_EQ(InodeOf(file), inode) << "ext4 did not reuse the inode: the case is not made";

  for (std::vector<std::string> cmd :
       {std::vector<std::string>{"status"}, {"--dry-run"}, {"replay"}}) {
    std::vector<std::string> argv = {UMAP_RECOVER_BIN, "--journal", journal};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    ProcResult r = recoverytest::Run(AsUser(argv), dir_.path());
    const int want = cmd.front() == "status" ? 0 : 2;  // status reports, never refuses a file
    EXPECT_EQ(r.exit_code, want) << cmd.front() << ": " << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("identity_mismatch")) << cmd.front();
    EXPECT_THAT(r.out, HasSubstr("is not the journaled file: journaled device ")) << cmd.front();
    EXPECT_THAT(r.out, HasSubstr(" inode " + std::to_string(inode) + " born ")) << cmd.front();
    EXPECT_THAT(r.out, HasSubstr("deleted and created again")) << cmd.front();
    EXPECT_EQ(ReadFile(file), other) << cmd.front() << ": the new file was written";
  }

  // Mapping the new file with the old journal: its replay is refused, so is the map.
  ProcResult map =
      recoverytest::Run(AsUser({UMAP_KILL_WORKER_BIN, "umap", file, journal, "1"}), dir_.path());
  EXPECT_EQ(map.exit_code, 12) << map.err;  // umap() failed
  EXPECT_THAT(map.err, HasSubstr("umap: Input/output error"));
  EXPECT_THAT(map.err, HasSubstr("deleted and created again"));
  EXPECT_EQ(ReadFile(file), other) << "the map wrote the old journal's images";
}

}  // namespace
}  // namespace umap::tools
