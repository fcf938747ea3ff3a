#include "base/coding.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

namespace umap {
namespace {

RC_GTEST_PROP(Coding, VarintRoundTrip, (uint64_t v)) {
  std::string s;
  PutVarint64(&s, v);
  std::string_view in = s;
  uint64_t out = 0;
  RC_ASSERT(GetVarint64(&in, &out));
  RC_ASSERT(out == v);
  RC_ASSERT(in.empty());
}

RC_GTEST_PROP(Coding, FixedRoundTrip, (uint32_t a, uint64_t b)) {
  std::string s;
  PutFixed32(&s, a);
  PutFixed64(&s, b);
  PutBigEndian64(&s, b);
  std::string_view in = s;
  uint32_t a2 = 0;
  uint64_t b2 = 0, b3 = 0;
  RC_ASSERT(GetFixed32(&in, &a2) && GetFixed64(&in, &b2) && GetBigEndian64(&in, &b3));
  RC_ASSERT(a2 == a && b2 == b && b3 == b && in.empty());
}

RC_GTEST_PROP(Coding, DecodersNeverReadPastTheEnd, (const std::string& bytes)) {
  std::string_view in = bytes;
  uint64_t v;
  std::string_view piece;
  // Whatever the bytes, each decoder either consumes a prefix or fails cleanly.
  while (!in.empty()) {
    size_t before = in.size();
    if (!GetVarint64(&in, &v) && !GetLengthPrefixed(&in, &piece)) break;
    RC_ASSERT(in.size() < before);
  }
}

TEST(Coding, TruncatedVarintFails) {
  std::string s;
  PutVarint64(&s, 1ull << 40);
  std::string_view in(s.data(), s.size() - 1);
  uint64_t v;
  EXPECT_FALSE(GetVarint64(&in, &v));
}

TEST(Coding, BigEndianKeysSortNumerically) {
  std::string a, b;
  PutBigEndian64(&a, 255);
  PutBigEndian64(&b, 256);
  EXPECT_LT(a, b);
}

}  // namespace
}  // namespace umap
