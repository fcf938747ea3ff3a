#include "runtime/cache/block_pool.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <set>
#include <vector>

namespace umap::runtime {
namespace {

// Evicting a CB always succeeds and records which one was evicted.
struct Evictions {
  std::vector<uint32_t> cache_blocks;
  bool operator()(uint32_t cache_block, uint64_t) {
    cache_blocks.push_back(cache_block);
    return true;
  }
};

TEST(BlockPool, HandsOutEveryFreeBlockOnceBeforeEvicting) {
  BlockPool pool(4);
  Evictions ev;
  std::set<uint32_t> got;
  for (int i = 0; i < 4; ++i) {
    uint32_t cache_block = pool.Acquire(std::ref(ev), [] {});
    ASSERT_NE(cache_block, BlockPool::kNone);
    EXPECT_EQ(pool.state(cache_block), CbState::kBusy);
    got.insert(cache_block);
    pool.Publish(cache_block, 100 + i);
    EXPECT_EQ(pool.state(cache_block), CbState::kSemiActive);
  }
  EXPECT_EQ(got.size(), 4u);
  EXPECT_TRUE(ev.cache_blocks.empty());
  EXPECT_EQ(pool.resident(), 4u);
  uint32_t cache_block = pool.Acquire(std::ref(ev), [] {});
  ASSERT_NE(cache_block, BlockPool::kNone);
  EXPECT_EQ(ev.cache_blocks.size(), 1u) << "a full pool evicts exactly one block";
  EXPECT_EQ(pool.resident(), 3u);
}

TEST(BlockPool, ReferencedBlocksAreActiveAndNotEvicted) {
  BlockPool pool(3);
  auto noevict = [](uint32_t, uint64_t) { return true; };
  std::vector<uint32_t> cache_blocks;
  for (int i = 0; i < 3; ++i) {
    cache_blocks.push_back(pool.Acquire(noevict, [] {}));
    pool.Publish(cache_blocks.back(), i);
  }
  ASSERT_TRUE(pool.AddRef(cache_blocks[0], pool.generation(cache_blocks[0])));
  ASSERT_TRUE(pool.AddRef(cache_blocks[2], pool.generation(cache_blocks[2])));
  EXPECT_EQ(pool.state(cache_blocks[0]), CbState::kActive);
  Evictions ev;
  uint32_t got = pool.Acquire(std::ref(ev), [] {});
  EXPECT_EQ(got, cache_blocks[1]) << "the only unreferenced block is the victim";
}

TEST(BlockPool, ReclaimRunsBeforeReferencesAreOverridden) {
  BlockPool pool(2);
  auto ok = [](uint32_t, uint64_t) { return true; };
  uint32_t a = pool.Acquire(ok, [] {});
  pool.Publish(a, 1);
  uint32_t b = pool.Acquire(ok, [] {});
  pool.Publish(b, 2);
  uint32_t ga = pool.generation(a);
  ASSERT_TRUE(pool.AddRef(a, ga));
  ASSERT_TRUE(pool.AddRef(b, pool.generation(b)));
  bool reclaimed = false;
  uint32_t got = pool.Acquire(ok, [&] {
    reclaimed = true;
    pool.DropRef(a, ga);  // "thread owning a died"
  });
  EXPECT_TRUE(reclaimed);
  EXPECT_EQ(got, a);
  EXPECT_EQ(pool.forced_evictions(), 0u);
}

TEST(BlockPool, AllReferencedForcesAnEvictionRatherThanDeadlock) {
  BlockPool pool(2);
  auto ok = [](uint32_t, uint64_t) { return true; };
  for (int i = 0; i < 2; ++i) {
    uint32_t cache_block = pool.Acquire(ok, [] {});
    pool.Publish(cache_block, i);
    ASSERT_TRUE(pool.AddRef(cache_block, pool.generation(cache_block)));
  }
  EXPECT_NE(pool.Acquire(ok, [] {}), BlockPool::kNone);
  EXPECT_EQ(pool.forced_evictions(), 1u);
}

TEST(BlockPool, OwnerRefusingEvictionYieldsNone) {
  BlockPool pool(2);
  auto ok = [](uint32_t, uint64_t) { return true; };
  for (int i = 0; i < 2; ++i) pool.Publish(pool.Acquire(ok, [] {}), i);
  EXPECT_EQ(pool.Acquire([](uint32_t, uint64_t) { return false; }, [] {}), BlockPool::kNone);
  EXPECT_EQ(pool.resident(), 2u) << "nothing was lost";
}

TEST(BlockPool, StaleReferencesToAReusedBlockAreIgnored) {
  BlockPool pool(1);
  auto ok = [](uint32_t, uint64_t) { return true; };
  uint32_t cache_block = pool.Acquire(ok, [] {});
  pool.Publish(cache_block, 1);
  uint32_t old_gen = pool.generation(cache_block);
  uint32_t again = pool.Acquire(ok, [] {});  // evicts and reuses it
  ASSERT_EQ(again, cache_block);
  EXPECT_NE(pool.generation(cache_block), old_gen);
  EXPECT_FALSE(pool.AddRef(cache_block, old_gen));
  pool.Publish(cache_block, 2);
  pool.DropRef(cache_block, old_gen);  // must not underflow the new generation's count
  EXPECT_EQ(pool.state(cache_block), CbState::kSemiActive);
}

// Whatever the sequence of acquire/publish/release, the pool never has more resident
// blocks than its capacity and never hands out one CB twice.
RC_GTEST_PROP(BlockPool, NeverExceedsCapacityNorDoubleAllocates, ()) {
  const uint32_t cap = *rc::gen::inRange<uint32_t>(1, 16);
  BlockPool pool(cap);
  std::set<uint32_t> busy, resident;
  const auto ops = *rc::gen::container<std::vector<int>>(rc::gen::inRange(0, 3));
  for (int op : ops) {
    if (op == 0 || busy.empty()) {
      uint32_t cache_block = pool.Acquire(
          [&](uint32_t c, uint64_t) {
            RC_ASSERT(resident.count(c) == 1u);
            resident.erase(c);
            return true;
          },
          [] {});
      if (cache_block == BlockPool::kNone) {
        RC_ASSERT(resident.empty());
        continue;
      }
      RC_ASSERT(busy.insert(cache_block).second);
      RC_ASSERT(resident.count(cache_block) == 0u);
    } else if (op == 1) {
      uint32_t cache_block = *busy.begin();
      busy.erase(cache_block);
      pool.Publish(cache_block, cache_block);
      resident.insert(cache_block);
    } else {
      uint32_t cache_block = *busy.begin();
      busy.erase(cache_block);
      pool.Release(cache_block);
    }
    RC_ASSERT(pool.resident() == resident.size());
    RC_ASSERT(resident.size() + busy.size() <= cap);
  }
}

}  // namespace
}  // namespace umap::runtime
