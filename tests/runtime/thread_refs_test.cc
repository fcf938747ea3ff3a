#include "runtime/fault/thread_refs.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>

namespace umap::runtime {
namespace {

pid_t Gettid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

class ThreadRefsTest : public ::testing::Test {
 protected:
  ThreadRefsTest() : pool_(8), refs_(&pool_) {
    for (int i = 0; i < 8; ++i) {
      uint32_t cache_block = pool_.Acquire([](uint32_t, uint64_t) { return true; }, [] {});
      pool_.Publish(cache_block, i);
    }
  }
  BlockPool pool_;
  ThreadRefs refs_;
};

TEST_F(ThreadRefsTest, TheLastBlocksAThreadFaultedAreActive) {
  pid_t me = Gettid();
  refs_.Touch(me, 0);
  refs_.Touch(me, 1);
  EXPECT_EQ(pool_.state(0), CbState::kActive);
  EXPECT_EQ(pool_.state(1), CbState::kActive);
  refs_.Touch(me, 2);  // depth 2: the oldest reference is dropped
  EXPECT_EQ(pool_.state(0), CbState::kSemiActive);
  EXPECT_EQ(pool_.state(2), CbState::kActive);
}

TEST_F(ThreadRefsTest, TouchingTheSameBlockTwiceTakesOneReference) {
  pid_t me = Gettid();
  refs_.Touch(me, 3);
  refs_.Touch(me, 3);
  refs_.Touch(me, 4);
  refs_.Touch(me, 5);
  EXPECT_EQ(pool_.state(3), CbState::kSemiActive);
}

TEST_F(ThreadRefsTest, DeadThreadsReferencesAreReclaimed) {
  pid_t dead = 0;
  std::thread t([&] {
    dead = Gettid();
    refs_.Touch(dead, 6);
  });
  t.join();
  EXPECT_EQ(pool_.state(6), CbState::kActive) << "still referenced until reclaimed";
  refs_.Touch(Gettid(), 7);
  EXPECT_EQ(refs_.ReclaimDead(), 1);
  EXPECT_EQ(pool_.state(6), CbState::kSemiActive);
  EXPECT_EQ(pool_.state(7), CbState::kActive) << "live threads keep theirs";
}

TEST_F(ThreadRefsTest, ForgetDropsEverything) {
  refs_.Touch(12345678, 1);
  refs_.Forget(12345678);
  EXPECT_EQ(pool_.state(1), CbState::kSemiActive);
  EXPECT_EQ(refs_.live_slots(), 0);
}

}  // namespace
}  // namespace umap::runtime
