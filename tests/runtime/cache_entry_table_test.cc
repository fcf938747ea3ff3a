#include "runtime/fault/cache_entry_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace umap::runtime {
namespace {

using Table = CacheEntryTable;

TEST(CacheEntryTable, StartsAbsentAndUnlocked) {
  Table t(8);
  for (uint64_t b = 0; b < 8; ++b) {
    Table::Entry e = t.Load(b);
    EXPECT_FALSE(e.present() || e.dirty() || e.shadow() || e.staged() || e.poisoned());
  }
}

TEST(CacheEntryTable, TryLockFailsWhileLocked) {
  Table t(2);
  Table::Entry e = t.Lock(1);
  Table::Entry e2;
  EXPECT_FALSE(t.TryLock(1, &e2));
  EXPECT_TRUE(t.TryLock(0, &e2)) << "other entries are independent";
  t.Unlock(0, e2.v);
  t.Unlock(1, Table::WithCb(e.v | Table::kPresent, 42));
  ASSERT_TRUE(t.TryLock(1, &e2));
  EXPECT_TRUE(e2.present());
  EXPECT_EQ(e2.cache_block(), 42u);
  t.Unlock(1, e2.v);
}

TEST(CacheEntryTable, ShadowIndexRoundTrips) {
  uint64_t v = Table::WithShadow(Table::kPresent | 7, 300);
  Table::Entry e{v};
  EXPECT_TRUE(e.shadow());
  EXPECT_EQ(e.shadow_index(), 300u);
  EXPECT_EQ(e.cache_block(), 7u);
  Table::Entry f{Table::WithoutShadow(v)};
  EXPECT_FALSE(f.shadow());
  EXPECT_TRUE(f.present());
  EXPECT_EQ(f.cache_block(), 7u);
}

TEST(CacheEntryTable, LockIsMutuallyExclusive) {
  Table t(1);
  uint64_t counter = 0;  // protected only by the entry lock
  std::vector<std::thread> ths;
  for (int i = 0; i < 4; ++i) {
    ths.emplace_back([&] {
      for (int k = 0; k < 20000; ++k) {
        Table::Entry e = t.Lock(0);
        ++counter;
        t.Unlock(0, e.v);
      }
    });
  }
  for (auto& th : ths) th.join();
  EXPECT_EQ(counter, 80000u);
}

}  // namespace
}  // namespace umap::runtime
