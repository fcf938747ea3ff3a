#include "runtime/preload/range_set.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/preload/mapping_registry.h"

namespace umap::preload {
namespace {

ShimMapping At(uintptr_t base, size_t len) {
  ShimMapping m;
  m.base = m.user = base;
  m.user_len = m.map_len = m.region_len = len;
  m.fd = 3;
  return m;
}

std::vector<std::pair<uintptr_t, size_t>> Gaps(const RangeSet& r) {
  std::vector<std::pair<uintptr_t, size_t>> out;
  r.ForEachGap([&](uintptr_t a, size_t n) {
    out.emplace_back(a, n);
    return 0;
  });
  return out;
}

TEST(RangeSetTest, FindsOverlappingMappingsInAddressOrderAndTheGapsBetween) {
  MappingRegistry reg;
  ASSERT_GE(reg.Add(At(0x30000, 0x10000)), 0);
  ASSERT_GE(reg.Add(At(0x10000, 0x10000)), 0);
  ASSERT_GE(reg.Add(At(0x90000, 0x1000)), 0);
  RangeSet r(reg, 0x8000, 0x50000);
  ASSERT_EQ(r.size(), 2);
  EXPECT_EQ(r[0].m.base, 0x10000u);
  EXPECT_EQ(r[1].m.base, 0x30000u);
  using G = std::vector<std::pair<uintptr_t, size_t>>;
  EXPECT_EQ(Gaps(r), (G{{0x8000, 0x8000}, {0x20000, 0x10000}, {0x40000, 0x10000}}));
}

TEST(RangeSetTest, RangeInsideOneMappingHasNoGap) {
  MappingRegistry reg;
  ASSERT_GE(reg.Add(At(0x10000, 0x10000)), 0);
  RangeSet r(reg, 0x12000, 0x13000);
  ASSERT_EQ(r.size(), 1);
  EXPECT_TRUE(Gaps(r).empty());
}

TEST(RangeSetTest, RangeTouchingNoMappingIsOneGap) {
  MappingRegistry reg;
  ASSERT_GE(reg.Add(At(0x10000, 0x10000)), 0);
  RangeSet r(reg, 0x20000, 0x21000);
  EXPECT_TRUE(r.empty());
  using G = std::vector<std::pair<uintptr_t, size_t>>;
  EXPECT_EQ(Gaps(r), (G{{0x20000, 0x1000}}));
}

TEST(MappingRegistryTest, ClaimIsExclusiveAndRemoveFreesTheSlot) {
  MappingRegistry reg;
  const ShimMapping m = At(0x10000, 0x1000);
  const int i = reg.Add(m);
  ASSERT_GE(i, 0);
  EXPECT_EQ(reg.live(), 1u);
  EXPECT_TRUE(reg.Claim(i, m));
  EXPECT_FALSE(reg.Claim(i, m));  // a second unmapper loses
  reg.Release(i);
  EXPECT_TRUE(reg.Claim(i, m));
  reg.Remove(i);
  EXPECT_EQ(reg.live(), 0u);
  ShimMapping out;
  EXPECT_FALSE(reg.Load(i, &out));
  EXPECT_FALSE(reg.Claim(i, m));               // gone
  EXPECT_EQ(reg.Add(At(0x50000, 0x1000)), i);  // the slot is reused
}

TEST(MappingRegistryTest, DataEndStopsAtTheFileSizeAtMapTime) {
  ShimMapping m = At(0x10000, 0x4000);
  m.map_offset = 0x2000;
  m.file_size = 0x3000;
  EXPECT_EQ(m.data_end(), 0x11000u);
  m.file_size = 0x1000;  // mapped wholly past the end
  EXPECT_EQ(m.data_end(), 0x10000u);
  m.file_size = 1 << 30;
  EXPECT_EQ(m.data_end(), 0x14000u);
}

}  // namespace
}  // namespace umap::preload
