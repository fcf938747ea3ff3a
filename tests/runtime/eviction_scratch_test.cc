#include "runtime/cache/eviction_scratch.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "runtime/cache/block_pool.h"

namespace umap::runtime {
namespace {

struct Lent {
  int victims;
  int batch;
  int victims_n;
  int batch_count;
};

Lent Borrow(EvictionScratch& s) {
  return s.With([](BlockPool::Victims* v, EvictionBatch* b) {
    return Lent{v->capacity, b->capacity, v->n, b->count};
  });
}

TEST(EvictionScratch, LendsALargeEmptySetAndTakesItBack) {
  EvictionScratch s(1);
  s.With([](BlockPool::Victims* v, EvictionBatch* b) {
    v->n = 7;  // left behind by the borrower
    b->count = 5;
    return 0;
  });
  const Lent l = Borrow(s);
  EXPECT_EQ(l.victims, EvictionScratch::kLargeBatch);
  EXPECT_EQ(l.batch, EvictionScratch::kLargeBatch);
  EXPECT_EQ(l.victims_n, 0) << "a set is lent empty";
  EXPECT_EQ(l.batch_count, 0);
}

TEST(EvictionScratch, WithEverySetTakenAThreadEvictsASmallBatchFromItsStack) {
  EvictionScratch s(2);
  std::vector<int> capacities;
  // Nested: each level holds its set while the next borrows (a thread per level).
  s.With([&](BlockPool::Victims* v1, EvictionBatch*) {
    capacities.push_back(v1->capacity);
    return s.With([&](BlockPool::Victims* v2, EvictionBatch*) {
      capacities.push_back(v2->capacity);
      return s.With([&](BlockPool::Victims* v3, EvictionBatch* b3) {
        capacities.push_back(v3->capacity);
        capacities.push_back(b3->capacity);
        return 0;
      });
    });
  });
  EXPECT_EQ(capacities,
            (std::vector<int>{EvictionScratch::kLargeBatch, EvictionScratch::kLargeBatch,
                              EvictionScratch::kSmallBatch, EvictionScratch::kSmallBatch}));
  // Both sets came back.
  EXPECT_EQ(Borrow(s).victims, EvictionScratch::kLargeBatch);
  s.With([&](BlockPool::Victims*, EvictionBatch*) {
    EXPECT_EQ(Borrow(s).victims, EvictionScratch::kLargeBatch);
    return 0;
  });
}

// A full pool evicts one batch of up to max_batch victims in one call, keeps one of them for
// the caller and puts the rest on the free list, where the next acquisitions find them
// without evicting.
TEST(EvictionScratch, ABatchedAcquireEvictsOneBatchAndFreesTheRest) {
  constexpr uint32_t kBlocks = 600;
  BlockPool pool(kBlocks);
  auto none = [](const uint32_t*, const uint64_t*, int, bool*, int) { FAIL(); };
  BlockPool::VictimsOf<1> one;
  for (uint32_t i = 0; i < kBlocks; ++i) {
    const uint32_t cb = pool.AcquireBatched(
        none, [] {}, &one, 1);
    ASSERT_NE(cb, BlockPool::kNone);
    pool.Publish(cb, i);
  }
  EvictionScratch s(1);
  std::vector<int> calls;
  const uint32_t got = s.With([&](BlockPool::Victims* v, EvictionBatch*) {
    return pool.AcquireBatched(
        [&](const uint32_t*, const uint64_t*, int n, bool* freed, int) {
          calls.push_back(n);
          for (int i = 0; i < n; ++i) freed[i] = true;
        },
        [] {}, v, 1000);  // more than the set holds: a batch is its capacity
  });
  ASSERT_NE(got, BlockPool::kNone);
  EXPECT_EQ(calls, std::vector<int>{EvictionScratch::kLargeBatch}) << "one batch, one flush";
  int free = 0;
  while (pool.TryTakeFree() != BlockPool::kNone) ++free;
  EXPECT_EQ(free, EvictionScratch::kLargeBatch - 1);
}

}  // namespace
}  // namespace umap::runtime
