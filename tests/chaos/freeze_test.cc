// FreezeProcess: once it returns, no thread of the child runs user code any more. The reboot
// class relies on it: a worker thread that went on after the power cut could act on an
// fdatasync that returned 0 for bytes the cut lost. kill(SIGSTOP) alone does not promise it
// (the signal is taken by one thread, which only then stops the others): with a bare kill
// this test sees the counter move after the "freeze" in most rounds.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include "chaos/system.h"

namespace chaos {
namespace {

// A child whose threads keep incrementing a counter the parent can read (shared memory),
// each increment after a system call, as a worker acts on its fdatasync results.
class SpinningChild {
 public:
  explicit SpinningChild(int threads) {
    void* p = ::mmap(nullptr, sizeof(std::atomic<uint64_t>), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    counter_ = new (p) std::atomic<uint64_t>(0);
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<std::thread> spinners;
      for (int i = 0; i < threads; ++i) {
        spinners.emplace_back([c = counter_] {
          for (;;) {
            (void)::getppid();
            c->fetch_add(1, std::memory_order_relaxed);
          }
        });
      }
      for (auto& t : spinners) t.join();
      ::_exit(0);
    }
  }
  ~SpinningChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::munmap(counter_, sizeof(*counter_));
  }
  pid_t pid() const { return pid_; }
  uint64_t count() const { return counter_->load(std::memory_order_relaxed); }
  // Waits until the counter moves (the threads run).
  bool WaitRunning() const {
    const uint64_t c0 = count();
    for (int i = 0; i < 5000; ++i) {
      if (count() != c0) return true;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  std::atomic<uint64_t>* counter_ = nullptr;
};

TEST(FreezeProcessTest, NoThreadRunsAfterItReturns) {
  SpinningChild child(2);
  ASSERT_GT(child.pid(), 0);
  for (int round = 0; round < 40; ++round) {
    ASSERT_TRUE(child.WaitRunning()) << "round " << round;
    ASSERT_TRUE(FreezeProcess(child.pid(), 5000).ok()) << "round " << round;
    const uint64_t frozen = child.count();
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    ASSERT_EQ(child.count(), frozen) << "a thread ran after FreezeProcess returned, round "
                                     << round;
    ASSERT_EQ(::kill(child.pid(), SIGCONT), 0);
  }
}

TEST(FreezeProcessTest, AnExitedChildCountsAsFrozenAndStaysReapable) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(7);
  siginfo_t info{};  // until it is a zombie, without reaping it
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);
  ASSERT_TRUE(FreezeProcess(pid, 5000).ok());
  const Exit e = Wait(pid, 5000);
  EXPECT_TRUE(e.exited);
  EXPECT_EQ(e.code, 7);
}

TEST(FreezeProcessTest, AGoneProcessIsAnError) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  const absl::Status s = FreezeProcess(pid, 100);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("SIGSTOP of pid"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace chaos
