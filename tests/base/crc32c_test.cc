#include "base/crc32c.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>

namespace umap {
namespace {

TEST(Crc32c, MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32c::Value("123456789", 9), 0xE3069283u);
}

TEST(Crc32c, EmptyInputIsZero) { EXPECT_EQ(crc32c::Value("", 0), 0u); }

TEST(Crc32c, ThirtyTwoZeroBytesMatchRfc3720) {
  // RFC 3720 B.4: 32 bytes of zeros.
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c::Value(zeros.data(), zeros.size()), 0x8A9136AAu);
}

RC_GTEST_PROP(Crc32c, ExtendEqualsWhole, (const std::string& a, const std::string& b)) {
  std::string ab = a + b;
  RC_ASSERT(crc32c::Extend(crc32c::Value(a.data(), a.size()), b.data(), b.size()) ==
            crc32c::Value(ab.data(), ab.size()));
}

}  // namespace
}  // namespace umap
