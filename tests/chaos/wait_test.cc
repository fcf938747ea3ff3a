// chaos::Wait never blocks for good on a child that SIGKILL cannot end. A thread waiting for
// a FUSE request that its server has read and holds sleeps uninterruptibly after SIGKILL (the
// kernel cannot take such a request back); a nightly chaos run met it when the GlusterFS
// client held a worker's write, and the lane's blocking waitpid hung until the lane's own
// deadline killed it, report and all. Here umap-faultfuse holds the read instead.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "chaos/system.h"
#include "tests/faultinject/fault_fuse_fixture.h"
#include "tests/testing/status_matchers.h"

namespace umaptest {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

class ChaosWaitTest : public FaultFuseTest {};

TEST_F(ChaosWaitTest, AChildStuckInAHeldFuseReadComesBackUnkillableThenIsReaped) {
  MakeFile("f", 1 << 16);
  ASSERT_OK(fs_->Arm("read path=f count=0 stall=forever").status());
  const std::string path = fs_->Path("f");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
    alignas(4096) static char buf[4096];
    (void)::pread(fd, buf, sizeof buf, 0);
    ::_exit(0);
  }
  ASSERT_OK(fs_->WaitStalled(1));

  const auto t0 = Clock::now();
  chaos::Exit e = chaos::Wait(pid, 0, /*kill_grace_ms=*/500);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10)) << "Wait blocked on the child";
  EXPECT_TRUE(e.timed_out);
  ASSERT_TRUE(e.unkillable) << e.ToString();
  EXPECT_THAT(e.stuck, HasSubstr("state D")) << e.ToString();
  EXPECT_THAT(e.stuck, HasSubstr("request_wait_answer")) << "its kernel stack, named";
  EXPECT_THAT(e.ToString(), HasSubstr("still alive after SIGKILL"));

  // Once the server answers, the SIGKILL takes effect and the child is reaped.
  EXPECT_EQ(fs_->Release("", EIO).value(), 1);
  e = chaos::Wait(pid, 10000);
  EXPECT_FALSE(e.unkillable);
  EXPECT_FALSE(e.exited) << "killed, not exited";
  EXPECT_EQ(e.signal, SIGKILL);
  EXPECT_TRUE(chaos::StuckThreads(pid).empty());
}

}  // namespace
}  // namespace umaptest
