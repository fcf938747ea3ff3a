// As an ordinary user runs it: a writer process with the uid of `nobody` (setpriv), no
// capabilities, the Umap C API in its default fault mode (a user-mode-only userfaultfd,
// when nothing better is granted), maps a file it owns on a umap-faultfuse mount that root
// made for other users (allow_other, with the kernel checking file modes). The server
// fails round 2's writes with ENOSPC: umsync returns ENOSPC to the writer, which reports
// it and exits, and the file holds exactly round 1, which umsync acknowledged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/faultinject/fault_fuse_fixture.h"
#include "tests/recovery/kill_workload.h"
#include "tests/recovery/subprocess.h"
#include "tests/testing/status_matchers.h"

namespace recoverytest {
namespace {

using ::testing::HasSubstr;
using ::umap::faultinject::FaultFuse;

constexpr uid_t kNobody = 65534;

class FuseOrdinaryUserTest : public ::umaptest::FaultFuseTest {
 protected:
  FaultFuse::Options FuseOptions() override {
    FaultFuse::Options o;
    o.allow_other = true;
    return o;
  }
};

TEST_F(FuseOrdinaryUserTest, AnOrdinaryUsersUmsyncGetsTheServersEnospcAndKeepsRound1) {
  // The path to the mount and the writer's own journal directory must be reachable by it.
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
  const std::string journal = dir_.File("journal-nobody");
  ASSERT_EQ(::mkdir(journal.c_str(), 0700), 0);
  ASSERT_EQ(::chown(journal.c_str(), kNobody, kNobody), 0);
  ASSERT_TRUE(WriteFile(fs_->BackingPath("data"), Contents({}, kKillBlocks)));
  ASSERT_EQ(::chown(fs_->BackingPath("data").c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(::chmod(fs_->BackingPath("data").c_str(), 0600), 0);
  // Round 1 is three writes; every write after them fails.
  ASSERT_OK(fs_->Arm("write path=data skip=3 count=0 error=ENOSPC").status());

  ProcResult r = ::recoverytest::Run(
      {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
       UMAP_KILL_WORKER_BIN, "umap", fs_->Path("data"), journal, "3"},
      dir_.path());
  EXPECT_EQ(r.exit_code, 13) << r.out << r.err;  // kill_worker.cc: umsync failed
  EXPECT_THAT(r.err, HasSubstr("umsync round 2: No space left on device"));
  EXPECT_GE(fs_->Stat("fired").value(), 1);
  const std::string got = ReadFile(fs_->BackingPath("data"));
  const std::string want = Contents(StateAfter(1), kKillBlocks);
  EXPECT_TRUE(got == want) << "first difference: " << FirstDiff(got, want);
  // The writer really ran as another user: the kernel refuses it root's 0600 file there.
  ASSERT_TRUE(WriteFile(fs_->BackingPath("root-only"), "secret"));
  ASSERT_EQ(::chmod(fs_->BackingPath("root-only").c_str(), 0600), 0);
  ProcResult denied = ::recoverytest::Run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                           "--clear-groups", "/bin/cat", fs_->Path("root-only")},
                                          dir_.path());
  EXPECT_NE(denied.exit_code, 0);
  EXPECT_THAT(denied.err, HasSubstr("Permission denied"));
}

}  // namespace
}  // namespace recoverytest
