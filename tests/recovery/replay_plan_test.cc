// ReplayPlan: which entry is the newest version of each block range, when each transaction
// may be marked applied (its cover), and the merge of two mappings' plans of one file.
#include "recovery/replay_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace umap::recovery {
namespace {

using journal::Contents;
using journal::TxnBlock;

std::vector<TxnBlock> Blocks(std::vector<uint64_t> numbers) {
  std::vector<TxnBlock> out;
  for (uint64_t b : numbers) out.push_back({b, 4096, static_cast<uint32_t>(b)});
  return out;
}

TEST(ReplayPlanTest, OnlyTheNewestVersionOfABlockIsWrittenAndItsOlderTxnsWaitForIt) {
  ReplayPlan p;
  p.Add(10, 0, 4096, Contents::kData, Blocks({0, 1}));  // txn 0: entries 0, 1
  p.Add(11, 0, 4096, Contents::kData, Blocks({2}));     // txn 1: entry 2
  p.Add(12, 0, 4096, Contents::kData, Blocks({1, 3}));  // txn 2: entries 3, 4
  p.Finish(/*keep_versions=*/false);
  EXPECT_TRUE(p.newest(0));
  EXPECT_FALSE(p.newest(1));  // block 1 is rewritten by LSN 12
  EXPECT_TRUE(p.newest(2));
  EXPECT_TRUE(p.newest(3));
  EXPECT_TRUE(p.newest(4));
  EXPECT_EQ(p.txns()[0].cover, 2u);  // marked once LSN 12's image of block 1 is written
  EXPECT_EQ(p.txns()[1].cover, 1u);
  EXPECT_EQ(p.txns()[2].cover, 2u);
  EXPECT_EQ(p.TxnOf(3), 2u);
}

TEST(ReplayPlanTest, RangesListEveryVersionOldestFirst) {
  ReplayPlan p;
  p.Add(1, 0, 4096, Contents::kData, Blocks({5}));
  p.Add(2, 0, 4096, Contents::kIntent, Blocks({2, 5}));
  p.Finish(/*keep_versions=*/true);
  std::vector<std::pair<uint64_t, std::vector<uint64_t>>> ranges;
  p.ForEachRange([&](uint64_t offset, absl::Span<const uint64_t> entries) {
    ranges.push_back({offset, {entries.begin(), entries.end()}});
  });
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].first, 2u * 4096);
  EXPECT_EQ(ranges[0].second, std::vector<uint64_t>({1}));
  EXPECT_EQ(ranges[1].first, 5u * 4096);
  EXPECT_EQ(ranges[1].second, std::vector<uint64_t>({0, 2}));
}

TEST(ReplayPlanTest, MergeInterleavesTwoMappingsByLsn) {
  ReplayPlan a, b;
  a.Add(1, 0, 4096, Contents::kData, Blocks({0}));
  a.Add(3, 0, 4096, Contents::kData, Blocks({1}));
  b.Add(2, 0, 8192, Contents::kData, Blocks({0}));
  std::vector<ReplayPlan> parts;
  parts.push_back(std::move(a));
  parts.push_back(std::move(b));
  ReplayPlan m = ReplayPlan::Merge(std::move(parts));
  ASSERT_EQ(m.txns().size(), 3u);
  EXPECT_EQ(m.txns()[1].lsn, 2u);
  EXPECT_EQ(m.txns()[1].member, 1u);
  EXPECT_EQ(m.txns()[1].block_size, 8192u);
  EXPECT_TRUE(m.mixed_block_sizes());
  m.Finish(false);
  // Mixed block sizes: every transaction is a round of its own, written whole in LSN order.
  ASSERT_EQ(m.rounds().size(), 3u);
  EXPECT_TRUE(m.newest(0));
  EXPECT_TRUE(m.newest(1));
  EXPECT_TRUE(m.newest(2));
}

TEST(ReplayPlanTest, RoundsFitTheBudgetAndNewestIsPerRound) {
  ReplayPlan p;
  p.Add(1, 0, 4096, Contents::kData, Blocks({0, 1}));  // txn 0: entries 0, 1 (8 KiB)
  p.Add(2, 0, 4096, Contents::kData, Blocks({1}));     // txn 1: entry 2
  p.Add(3, 0, 4096, Contents::kData, Blocks({1}));     // txn 2: entry 3
  p.Add(4, 0, 4096, Contents::kData, Blocks({0, 1, 2}));  // txn 3: 12 KiB, oversize
  p.Finish(false, /*round_bytes=*/8192);
  ASSERT_EQ(p.rounds().size(), 3u);
  EXPECT_EQ(p.rounds()[0].end_txn, 1u);  // txn 0 fills it
  EXPECT_EQ(p.rounds()[1].first_txn, 1u);
  EXPECT_EQ(p.rounds()[1].end_txn, 3u);
  EXPECT_FALSE(p.rounds()[1].oversize);
  EXPECT_TRUE(p.rounds()[2].oversize);
  EXPECT_TRUE(p.newest(1));   // block 1 in round 0, though rewritten later
  EXPECT_FALSE(p.newest(2));  // superseded by txn 2 in the same round
  EXPECT_TRUE(p.newest(3));
  EXPECT_EQ(p.txns()[0].cover, 0u);  // markable once its own round is written
  EXPECT_EQ(p.txns()[1].cover, 2u);
  EXPECT_EQ(p.txns()[3].round, 2u);
}

}  // namespace
}  // namespace umap::recovery
