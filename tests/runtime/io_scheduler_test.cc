// IoScheduler: PIAO merging around the FIFO head, the FIFO bound, least-served fairness,
// requeued runs and queue removal.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "runtime/io/scheduler.h"

namespace umap::runtime::io {
namespace {

// A file queue's client: which blocks have a queued fill, and on which cache_block (as the cache
// entry table says for a real mapping).
class FakeFile : public IoClient {
 public:
  explicit FakeFile(IoScheduler* s) : sched_(s), queue_(this) {}
  uint32_t QueuedCb(uint64_t block) const override {
    auto it = cb_.find(block);
    return it == cb_.end() ? kNoCb : it->second;
  }
  IoQueue* queue() { return &queue_; }
  void Push(uint64_t block, uint32_t cache_block, uint64_t now = 0) {
    cb_[block] = cache_block;
    sched_->Push(&queue_, block, cache_block, now);
  }
  // What a channel does once it has the run: the blocks are no longer queued.
  void Served(const io::Run& r) {
    for (uint64_t b = r.first; b < r.first + r.count; ++b) cb_.erase(b);
  }

 private:
  IoScheduler* sched_;
  IoQueue queue_;
  std::map<uint64_t, uint32_t> cb_;
};

constexpr auto kAsync = IoScheduler::Taker::kAsync;

TEST(IoSchedulerTest, TakesTheFifoHeadAndMergesQueuedNeighboursBothWays) {
  IoScheduler s(64, 4);
  FakeFile f(&s);
  f.Push(5, 0);
  f.Push(3, 1);
  f.Push(4, 2);
  f.Push(6, 3);
  f.Push(9, 4);  // not adjacent: a run of its own
  io::Run r;
  ASSERT_TRUE(s.Next(8, 0, kAsync, &r));
  EXPECT_EQ(r.queue, f.queue());
  EXPECT_EQ(r.first, 3u);
  EXPECT_EQ(r.count, 4u);
  f.Served(r);
  ASSERT_TRUE(s.Next(8, 0, kAsync, &r));
  EXPECT_EQ(r.first, 9u);
  EXPECT_EQ(r.count, 1u);
  f.Served(r);
  EXPECT_FALSE(s.Next(8, 0, kAsync, &r));
  EXPECT_EQ(s.backlog(), 0u);
}

TEST(IoSchedulerTest, ARunNeverExceedsTheMaximumSize) {
  IoScheduler s(64, 4);
  FakeFile f(&s);
  for (uint32_t b = 0; b < 20; ++b) f.Push(b, b);
  std::vector<uint32_t> sizes;
  io::Run r;
  while (s.Next(8, 0, kAsync, &r)) {
    sizes.push_back(r.count);
    f.Served(r);
  }
  EXPECT_EQ(sizes, (std::vector<uint32_t>{8, 8, 4}));
}

TEST(IoSchedulerTest, AFillQueuedButNotYetPushedIsNotMerged) {
  // The entry table may show a block as queued on a cache_block whose node belongs to another
  // block (reused cache_block) or to no queue yet: only linked nodes of the same queue merge.
  IoScheduler s(64, 4);
  FakeFile a(&s), b(&s);
  a.Push(10, 0);
  b.Push(11, 1);  // same block index next door, but another file
  io::Run r;
  ASSERT_TRUE(s.Next(8, 0, kAsync, &r));
  EXPECT_EQ(r.count, 1u);
}

// FIFO guarantee: with one queue, the request that arrived k-th is served within k
// dequeues, whatever the merging does.
RC_GTEST_PROP(IoScheduler, EarlyRequestsAreServedWithinTheirFifoPosition, ()) {
  const auto blocks = *rc::gen::unique<std::vector<uint32_t>>(rc::gen::inRange<uint32_t>(0, 200));
  const uint32_t max = *rc::gen::inRange<uint32_t>(1, 17);
  IoScheduler s(256, 2);
  FakeFile f(&s);
  for (uint32_t i = 0; i < blocks.size(); ++i) f.Push(blocks[i], i);
  std::map<uint64_t, size_t> served_at;  // block -> dequeue number (1-based)
  io::Run r;
  size_t n = 0;
  while (s.Next(max, 0, kAsync, &r)) {
    ++n;
    RC_ASSERT(r.count >= 1u);
    RC_ASSERT(r.count <= max);
    for (uint64_t b = r.first; b < r.first + r.count; ++b) {
      RC_ASSERT(served_at.emplace(b, n).second);  // every block once
    }
    f.Served(r);
  }
  RC_ASSERT(served_at.size() == blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) RC_ASSERT(served_at[blocks[i]] <= i + 1);
}

TEST(IoSchedulerTest, LeastServedSharesBlocksEquallyBetweenALargeAndASmallFile) {
  // The large file's misses are adjacent (runs of 16 blocks), the small file's scattered
  // (runs of 1): per dequeue the large one gets 16 times more, so least-served must give the
  // small one about 16 dequeues for each of the large one's.
  IoScheduler s(8192, 4);
  FakeFile large(&s), small(&s);
  uint32_t cache_block = 0;
  for (uint32_t b = 0; b < 4000; ++b) large.Push(b, cache_block++);
  for (uint32_t b = 0; b < 4000; ++b) small.Push(b * 2, cache_block++);
  uint64_t got_large = 0, got_small = 0;
  io::Run r;
  // Count only while both are backlogged.
  while (large.queue()->queued() > 0 && small.queue()->queued() > 0) {
    ASSERT_TRUE(s.Next(16, 0, kAsync, &r));
    (r.queue == large.queue() ? got_large : got_small) += r.count;
    (r.queue == large.queue() ? large : small).Served(r);
  }
  const double share = static_cast<double>(got_large) / static_cast<double>(got_large + got_small);
  EXPECT_NEAR(share, 0.5, 0.05) << got_large << " vs " << got_small;
}

TEST(IoSchedulerTest, AQueueThatWasIdleJoinsAtTheCurrentVirtualTime) {
  IoScheduler s(8192, 4);
  FakeFile busy(&s), late(&s);
  uint32_t cache_block = 0;
  for (uint32_t b = 0; b < 2000; b += 2) busy.Push(b, cache_block++);
  io::Run r;
  for (int i = 0; i < 500; ++i) {  // busy gets 500 blocks served alone
    ASSERT_TRUE(s.Next(1, 0, kAsync, &r));
    busy.Served(r);
  }
  for (uint32_t b = 0; b < 1000; b += 2) late.Push(b, cache_block++);
  int late_first = 0;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(s.Next(1, 0, kAsync, &r));
    late_first += r.queue == late.queue();
    (r.queue == late.queue() ? late : busy).Served(r);
  }
  // Not 100 of 100 (catching up on 500 blocks): alternation from the join on.
  EXPECT_NEAR(late_first, 50, 2);
}

TEST(IoSchedulerTest, RequeuedRunsWaitUntilDueAndGoToTheRightTaker) {
  IoScheduler s(64, 4);
  FakeFile f(&s);
  io::Run retry;
  retry.queue = f.queue();
  retry.first = 7;
  retry.count = 2;
  retry.attempt = 1;
  s.Requeue(retry, /*due_us=*/1000);
  io::Run sync_only = retry;
  sync_only.first = 20;
  sync_only.sync_only = true;
  s.Requeue(sync_only, 0);
  io::Run r;
  EXPECT_FALSE(s.Next(8, 500, kAsync, &r));  // retry not due; sync_only not for async
  ASSERT_TRUE(s.Next(8, 500, IoScheduler::Taker::kSyncHelper, &r));
  EXPECT_EQ(r.first, 20u);
  EXPECT_FALSE(s.Next(8, 999, IoScheduler::Taker::kSyncHelper, &r));
  EXPECT_EQ(s.earliest_due_us(), 1000u);
  ASSERT_TRUE(s.Next(8, 1000, kAsync, &r));
  EXPECT_EQ(r.first, 7u);
  EXPECT_EQ(r.attempt, 1u);
  EXPECT_EQ(s.earliest_due_us(), UINT64_MAX);
}

TEST(IoSchedulerTest, RequeuedRunsComeBeforeNewWork) {
  IoScheduler s(64, 4);
  FakeFile f(&s);
  f.Push(1, 0);
  io::Run retry;
  retry.queue = f.queue();
  retry.first = 40;
  retry.count = 1;
  s.Requeue(retry, 0);
  io::Run r;
  ASSERT_TRUE(s.Next(8, 0, kAsync, &r));
  EXPECT_EQ(r.first, 40u);
  ASSERT_TRUE(s.Next(8, 0, kAsync, &r));
  EXPECT_EQ(r.first, 1u);
}

TEST(IoSchedulerTest, CloseDropsEveryQueuedFillOfThatQueueOnly) {
  IoScheduler s(64, 4);
  FakeFile a(&s), b(&s);
  a.Push(1, 0);
  a.Push(2, 1);
  b.Push(5, 2);
  std::vector<std::pair<uint64_t, uint32_t>> dropped;
  s.Close(a.queue(), &dropped);
  EXPECT_EQ(dropped, (std::vector<std::pair<uint64_t, uint32_t>>{{1, 0}, {2, 1}}));
  io::Run r;
  ASSERT_TRUE(s.Next(8, 0, kAsync, &r));
  EXPECT_EQ(r.queue, b.queue());
  EXPECT_FALSE(s.Next(8, 0, kAsync, &r));
}

}  // namespace
}  // namespace umap::runtime::io
