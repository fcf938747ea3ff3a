// A full journal disk, default settings, a program that writes more than its cache holds
// without umsync (the atomic policy spills dirty blocks into the journal): once the disk is
// full the runtime backs off, and its log says so once, with what the program will get and
// for how long it waits, then at most one line every 10 s, and one when the disk takes
// writes again; not a line per retry. The journal is a small tmpfs (root mounts it), grown
// after 12 s; the writer runs as nobody when setpriv is there.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/recovery/subprocess.h"
#include "tests/runtime/test_file.h"
#include "tests/testing/capability.h"

namespace umaptest {
namespace {

using ::testing::HasSubstr;

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(JournalFullLogTest, AFullJournalDiskIsReportedOnceWithWhatHappensThenBacksOff) {
  UMAP_SKIP_WITHOUT("root", "tmpfs-mount");
  TempDir dir;
  const std::string mnt = dir.File("journal-disk"), journal = mnt + "/journal";
  const std::string file = dir.File("data");
  ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
  ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=4m,mode=0755"), 0);
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{mnt};
  std::ofstream(file, std::ios::binary) << std::string(32 << 20, 'd');
  std::vector<std::string> argv = {ENV_CONFIG_WORKER, file, "1"};
  if (::access("/usr/bin/setpriv", X_OK) == 0) {
    ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
    ASSERT_EQ(std::system(("chown nobody:nogroup '" + mnt + "' '" + file + "'").c_str()), 0);
    argv.insert(argv.begin(),
                {"/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"});
  }
  const std::string out = dir.File("out"), err = dir.File("err");
  // Default settings but a cache of 2 MiB: writing the 32 MiB file spills into the journal.
  const pid_t pid = recoverytest::Spawn(
      argv, {"UMAP_JOURNAL_DIR=" + journal, "UMAP_CACHE_BYTES=2M", "UMAP_LAZY_SIZING=0"}, out, err);
  ASSERT_GT(pid, 0);
  std::this_thread::sleep_for(std::chrono::seconds(12));
  ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT, "size=256m,mode=0755"), 0);
  recoverytest::ProcResult r = recoverytest::Wait(pid, out, err);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err.substr(0, 4000);
  EXPECT_EQ(r.out, "ok\n");
  // Once, with what happens and for how long.
  EXPECT_EQ(Count(r.err, " cannot be written ("), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("No space left on device"));
  EXPECT_THAT(r.err, HasSubstr("waits up to 60 s for one, then its thread gets SIGBUS"));
  EXPECT_THAT(r.err, HasSubstr("Make room on the journal's disk"));
  // Then at most one line every 10 s while it lasts (12 s here), and one at the end.
  EXPECT_LE(Count(r.err, "still cannot be written after"), 2);
  EXPECT_EQ(Count(r.err, " is written again after "), 1);
  EXPECT_LE(Count(r.err, "\n"), 20) << "a warning storm:\n" << r.err;
}

}  // namespace
}  // namespace umaptest
