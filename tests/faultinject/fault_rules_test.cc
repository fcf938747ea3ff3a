// The rule engine that FaultEnv and FaultFs share: when a rule fires, and what it hands back.
#include "faultinject/fault_rules.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tests/testing/status_matchers.h"

namespace umap::faultinject {
namespace {

using ::umap::testing::StatusIs;

enum class TestOp { kA, kB };

struct TestFault {
  int tag = 0;
  std::string only = {};  // path filter: empty matches every path
  bool sticky = false;
  bool Matches(absl::string_view path) const { return only.empty() || path == only; }
};

using Rules = FaultRules<TestOp, 2, TestFault>;

// Which of `calls` calls of kA on `path` fire.
std::vector<bool> Fires(Rules& rules, int calls, absl::string_view path = "f") {
  std::vector<bool> out;
  for (int i = 0; i < calls; ++i) out.push_back(rules.Decide(TestOp::kA, path, false).has_value());
  return out;
}

TEST(FaultRulesTest, NothingFiresWithoutARule) {
  Rules rules(1);
  EXPECT_EQ(Fires(rules, 3), (std::vector<bool>{false, false, false}));
}

TEST(FaultRulesTest, FailNextFiresOnTheNextNCallsThenEnds) {
  Rules rules(1);
  ASSERT_OK(rules.FailNext(TestOp::kA, 2, {.tag = 7}));
  auto fired = rules.Decide(TestOp::kA, "f", false);
  ASSERT_TRUE(fired.has_value());
  EXPECT_EQ(fired->fault.tag, 7);
  EXPECT_EQ(Fires(rules, 3), (std::vector<bool>{true, false, false}));
}

TEST(FaultRulesTest, RulesOfOneOpLeaveTheOthersAlone) {
  Rules rules(1);
  ASSERT_OK(rules.FailNext(TestOp::kB, 1, {}));
  EXPECT_FALSE(rules.Decide(TestOp::kA, "f", false).has_value());
  EXPECT_TRUE(rules.Decide(TestOp::kB, "f", false).has_value());
}

TEST(FaultRulesTest, ArmingReplacesTheOpsRule) {
  Rules rules(1);
  ASSERT_OK(rules.FailNext(TestOp::kA, 5, {.tag = 1}));
  ASSERT_OK(rules.FailNext(TestOp::kA, 1, {.tag = 2}));
  EXPECT_EQ(rules.Decide(TestOp::kA, "f", false)->fault.tag, 2);
  EXPECT_FALSE(rules.Decide(TestOp::kA, "f", false).has_value());
}

TEST(FaultRulesTest, StickyKeepsFiringOnceItFiredUntilCleared) {
  Rules rules(1);
  ASSERT_OK(rules.FailNext(TestOp::kA, 1, {.sticky = true}));
  EXPECT_EQ(Fires(rules, 4), (std::vector<bool>{true, true, true, true}));
  rules.Clear(TestOp::kA);
  EXPECT_EQ(Fires(rules, 2), (std::vector<bool>{false, false}));
}

TEST(FaultRulesTest, StickyOneInNStartsAtItsFirstDrawThenNeverStops) {
  Rules rules(1);
  ASSERT_OK(rules.FailOneIn(TestOp::kA, 4, 99, {.sticky = true}));
  std::vector<bool> f = Fires(rules, 200);
  auto first = std::find(f.begin(), f.end(), true);
  ASSERT_NE(first, f.end());
  EXPECT_TRUE(std::all_of(first, f.end(), [](bool b) { return b; }));
}

TEST(FaultRulesTest, OneInNIsAFunctionOfTheSeedAndTheCalls) {
  Rules a(1), b(2), c(1);
  ASSERT_OK(a.FailOneIn(TestOp::kA, 5, 42, {}));
  ASSERT_OK(b.FailOneIn(TestOp::kA, 5, 42, {}));
  ASSERT_OK(c.FailOneIn(TestOp::kA, 5, 43, {}));
  const std::vector<bool> fa = Fires(a, 500), fb = Fires(b, 500), fc = Fires(c, 500);
  EXPECT_EQ(fa, fb) << "the engine's own seed plays no part in a 1-in-n decision";
  EXPECT_NE(fa, fc);
  const auto n = std::count(fa.begin(), fa.end(), true);
  EXPECT_GT(n, 500 / 5 / 2);
  EXPECT_LT(n, 500 / 5 * 2);
}

TEST(FaultRulesTest, OneInOneFiresOnEveryCallAndNeverEnds) {
  Rules rules(1);
  ASSERT_OK(rules.FailOneIn(TestOp::kA, 1, 0, {}));
  EXPECT_EQ(Fires(rules, 3), (std::vector<bool>{true, true, true}));
}

TEST(FaultRulesTest, CallsThePathFilterRejectsNeitherCountNorDraw) {
  Rules filtered(1), plain(1);
  ASSERT_OK(filtered.FailOneIn(TestOp::kA, 3, 7, {.only = "wal"}));
  ASSERT_OK(plain.FailOneIn(TestOp::kA, 3, 7, {}));
  std::vector<bool> f, p;
  for (int i = 0; i < 60; ++i) {
    EXPECT_FALSE(filtered.Decide(TestOp::kA, "sst", false).has_value());
    f.push_back(filtered.Decide(TestOp::kA, "wal", false).has_value());
    p.push_back(plain.Decide(TestOp::kA, "wal", false).has_value());
  }
  EXPECT_EQ(f, p);
  ASSERT_OK(filtered.FailNext(TestOp::kB, 1, {.only = "wal"}));
  EXPECT_FALSE(filtered.Decide(TestOp::kB, "sst", false).has_value());
  EXPECT_TRUE(filtered.Decide(TestOp::kB, "wal", false).has_value()) << "not used up by sst";
}

TEST(FaultRulesTest, DrawsComeFromTheRuleSeedOrTheEngineSeed) {
  Rules a(5), b(5), c(6);
  for (Rules* r : {&a, &b, &c}) ASSERT_OK(r->FailNext(TestOp::kA, 3, {}));
  std::vector<uint64_t> da, db, dc;
  for (int i = 0; i < 3; ++i) {
    da.push_back(a.Decide(TestOp::kA, "f", true)->draw);
    db.push_back(b.Decide(TestOp::kA, "f", true)->draw);
    dc.push_back(c.Decide(TestOp::kA, "f", true)->draw);
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
  EXPECT_EQ(Rules(5).Decide(TestOp::kA, "f", true), std::nullopt);
  ASSERT_OK(a.FailOneIn(TestOp::kA, 1, 11, {}));
  ASSERT_OK(c.FailOneIn(TestOp::kA, 1, 11, {}));
  EXPECT_EQ(a.Decide(TestOp::kA, "f", true)->draw, c.Decide(TestOp::kA, "f", true)->draw);
  EXPECT_EQ(a.Decide(TestOp::kA, "f", false)->draw, 0u);
}

TEST(FaultRulesTest, InvalidCountsAreInvalidArgument) {
  Rules rules(1);
  EXPECT_THAT(rules.FailNext(TestOp::kA, 0, {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rules.FailOneIn(TestOp::kA, 0, 1, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(rules.Decide(TestOp::kA, "f", false).has_value());
}

TEST(FaultRulesTest, ClearAllEndsEveryRule) {
  Rules rules(1);
  ASSERT_OK(rules.FailOneIn(TestOp::kA, 1, 0, {}));
  ASSERT_OK(rules.FailOneIn(TestOp::kB, 1, 0, {}));
  rules.ClearAll();
  EXPECT_FALSE(rules.Decide(TestOp::kA, "f", false).has_value());
  EXPECT_FALSE(rules.Decide(TestOp::kB, "f", false).has_value());
}

}  // namespace
}  // namespace umap::faultinject
