// UMAP_LOG_EVERY: a call site's line at most once per period, the next one naming how many
// were left out in between.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "base/log.h"

namespace umap {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

void SayFull(int i) { UMAP_LOG_EVERY(kWarn, 1, "disk full, attempt ", i); }
void SayOther() { UMAP_LOG_EVERY(kWarn, 1, "another condition"); }

TEST(LogEvery, OneLinePerPeriodPerCallSiteThenTheCountLeftOut) {
  testing::internal::CaptureStderr();
  for (int i = 0; i < 50; ++i) {
    SayFull(i);
    SayOther();  // another call site is limited by itself, not silenced by the first
  }
  std::string first = testing::internal::GetCapturedStderr();
  EXPECT_EQ(Lines(first), 2) << first;
  EXPECT_THAT(first, HasSubstr("disk full, attempt 0\n"));
  EXPECT_THAT(first, HasSubstr("another condition\n"));
  EXPECT_THAT(first, Not(HasSubstr("more like it")));

  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  testing::internal::CaptureStderr();
  SayFull(50);
  std::string next = testing::internal::GetCapturedStderr();
  EXPECT_EQ(Lines(next), 1) << next;
  EXPECT_THAT(next, HasSubstr("disk full, attempt 50 (and 49 more like it in the last 1 s)"));
}

}  // namespace
}  // namespace umap
