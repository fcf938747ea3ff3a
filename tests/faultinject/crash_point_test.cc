#include "base/crash_point.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/status_macros.h"
#include "tests/testing/status_matchers.h"

namespace umap::crash_point {
namespace {

using ::testing::ElementsAre;
using ::umap::testing::StatusIs;

// The macro's registry check runs at compile time.
static_assert(IdOf("journal.after_commit") >= 0);
static_assert(IdOf("journal.no_such_step") < 0);

class CrashPointTest : public ::testing::Test {
 protected:
  void SetUp() override { Reset(); }
  void TearDown() override { Reset(); }
  static void Reset() {
    Disarm();
    EnableCounting(false);
    ResetHitCounts();
  }
};

void HitAfterCommit() { UMAP_CRASH_POINT("journal.after_commit"); }
void HitBeforeCommit() { UMAP_CRASH_POINT("journal.before_commit"); }

TEST_F(CrashPointTest, DisarmedPointDoesNothingAndCountsNothing) {
  for (int i = 0; i < 10; ++i) HitAfterCommit();
  EXPECT_EQ(HitCount("journal.after_commit"), 0u);
  EXPECT_EQ(ArmedName(), "");
}

TEST_F(CrashPointTest, CallbackFiresExactlyAtTheNthHit) {
  std::vector<std::string> fired;
  ASSERT_OK(Arm("journal.after_commit", 3,
                Action::Call([&](absl::string_view name) { fired.emplace_back(name); })));
  EXPECT_EQ(ArmedName(), "journal.after_commit");
  HitAfterCommit();
  HitBeforeCommit();  // another point does not advance the countdown
  HitAfterCommit();
  EXPECT_TRUE(fired.empty());
  HitAfterCommit();
  EXPECT_THAT(fired, ElementsAre("journal.after_commit"));
  EXPECT_EQ(ArmedName(), "") << "a point disarms when it fires";
  HitAfterCommit();
  EXPECT_EQ(fired.size(), 1u);
}

TEST_F(CrashPointTest, ArmReplacesThePreviouslyArmedPoint) {
  int before = 0, after = 0;
  ASSERT_OK(Arm("journal.before_commit", 1, Action::Call([&](absl::string_view) { ++before; })));
  ASSERT_OK(Arm("journal.after_commit", 1, Action::Call([&](absl::string_view) { ++after; })));
  HitBeforeCommit();
  HitAfterCommit();
  EXPECT_EQ(before, 0);
  EXPECT_EQ(after, 1);
}

TEST_F(CrashPointTest, DisarmStopsAnArmedPoint) {
  int fired = 0;
  ASSERT_OK(Arm("journal.after_commit", 1, Action::Call([&](absl::string_view) { ++fired; })));
  Disarm();
  HitAfterCommit();
  EXPECT_EQ(fired, 0);
}

TEST_F(CrashPointTest, ArmingAnUnregisteredNameIsInvalidArgument) {
  EXPECT_THAT(Arm("journal.no_such_step", 1, Action::Kill()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ArmedName(), "");
}

TEST_F(CrashPointTest, ArmingWithZeroHitsIsInvalidArgument) {
  EXPECT_THAT(Arm("journal.after_commit", 0, Action::Kill()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ArmedName(), "");
}

TEST_F(CrashPointTest, CountsHitsPerNameOnlyWhileActive) {
  EnableCounting(true);
  HitAfterCommit();
  HitAfterCommit();
  HitBeforeCommit();
  EnableCounting(false);
  HitAfterCommit();
  EXPECT_EQ(HitCount("journal.after_commit"), 2u);
  EXPECT_EQ(HitCount("journal.before_commit"), 1u);
  EXPECT_EQ(HitCount("gc.before_delete"), 0u);
  EXPECT_EQ(HitCount("not.registered"), 0u);
  auto counts = HitCounts();
  ASSERT_EQ(counts.size(), AllNames().size());
  for (const auto& [name, hits] : counts) EXPECT_EQ(hits, HitCount(name)) << name;
}

TEST_F(CrashPointTest, ArmedPointCountsEveryPointsHits) {
  ASSERT_OK(Arm("gc.before_delete", 100, Action::Call([](absl::string_view) {})));
  HitAfterCommit();
  HitBeforeCommit();
  EXPECT_EQ(HitCount("journal.after_commit"), 1u);
  EXPECT_EQ(HitCount("journal.before_commit"), 1u);
}

TEST_F(CrashPointTest, ConcurrentHitsFireExactlyOnce) {
  std::atomic<int> fired{0};
  EnableCounting(true);  // keeps counting after the point fired and disarmed itself
  ASSERT_OK(Arm("journal.after_commit", 2000,
                Action::Call([&](absl::string_view) { fired.fetch_add(1); })));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 1000; ++i) HitAfterCommit();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(HitCount("journal.after_commit"), 4000u);
}

TEST_F(CrashPointTest, SpecSyntaxIsNameWithOptionalHitCount) {
  ASSERT_OK(internal::TEST_ArmFromSpec("journal.after_commit"));
  EXPECT_EQ(ArmedName(), "journal.after_commit");
  ASSERT_OK(internal::TEST_ArmFromSpec("gc.before_delete:7"));
  EXPECT_EQ(ArmedName(), "gc.before_delete");
  Disarm();
  for (const char* bad : {"journal.after_commit:0", "journal.after_commit:", "journal.after_commit:x",
                          "journal.after_commit:-1", "nope", ":3", ""}) {
    EXPECT_THAT(internal::TEST_ArmFromSpec(bad), StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  EXPECT_EQ(ArmedName(), "");
}

TEST_F(CrashPointTest, RegistryIsSortedUniqueAndNamedComponentDotStep) {
  auto names = AllNames();
  ASSERT_FALSE(names.empty());
  std::regex convention("[a-z][a-z0-9_]*\\.[a-z0-9_.]*[a-z0-9_]");
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_TRUE(std::regex_match(names[i], convention)) << names[i];
    EXPECT_TRUE(IsRegistered(names[i])) << names[i];
    EXPECT_EQ(IdOf(names[i]), static_cast<int>(i));
    if (i > 0) {
      EXPECT_LT(std::string(names[i - 1]), std::string(names[i]));
    }
  }
  EXPECT_FALSE(IsRegistered("journal.no_such_step"));
}

TEST_F(CrashPointTest, DocsListExactlyTheRegisteredNames) {
  std::ifstream in(std::string(UMAP_SOURCE_DIR) + "/docs/crash_points.md");
  ASSERT_TRUE(in) << "docs/crash_points.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  // A registered name is documented by a table row that starts with it in backticks.
  std::regex row("\\n\\|\\s*`([a-z0-9_.]+)`\\s*\\|");
  std::set<std::string> documented;
  std::string doc = "\n" + text.str();
  for (std::sregex_iterator it(doc.begin(), doc.end(), row), end; it != end; ++it) {
    documented.insert((*it)[1]);
  }
  std::set<std::string> registered(AllNames().begin(), AllNames().end());
  EXPECT_EQ(documented, registered);
}

using CrashPointDeathTest = CrashPointTest;

TEST_F(CrashPointDeathTest, KillActionRaisesSigkillAtTheNthHit) {
  EXPECT_EXIT(
      {
        if (!Arm("journal.after_commit", 2, Action::Kill()).ok()) std::_Exit(3);
        HitAfterCommit();
        HitAfterCommit();
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "");
}

TEST_F(CrashPointDeathTest, KillActionDoesNotFireBeforeTheNthHit) {
  EXPECT_EXIT(
      {
        if (!Arm("journal.after_commit", 2, Action::Kill()).ok()) std::_Exit(3);
        HitAfterCommit();
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// The environment variable is read by a static initializer, so these death tests re-execute
// the test binary ("threadsafe" style) with UMAP_CRASH_AT in its environment.
// The fixture must not disarm in SetUp: the re-executed child runs SetUp too, after the
// static initializer armed the point.
class CrashPointEnvDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
  void TearDown() override {
    ::unsetenv("UMAP_CRASH_AT");
    GTEST_FLAG_SET(death_test_style, "fast");
    Disarm();
    ResetHitCounts();
  }
};

TEST_F(CrashPointEnvDeathTest, EnvironmentArmsTheNthHitAtStartUp) {
  ASSERT_EQ(::setenv("UMAP_CRASH_AT", "journal.before_commit:2", 1), 0);
  EXPECT_EXIT(
      {
        if (ArmedName() != "journal.before_commit") std::_Exit(4);
        HitBeforeCommit();
        HitBeforeCommit();
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "");
}

TEST_F(CrashPointEnvDeathTest, EnvironmentDefaultsToTheFirstHit) {
  ASSERT_EQ(::setenv("UMAP_CRASH_AT", "journal.before_commit", 1), 0);
  EXPECT_EXIT(
      {
        HitBeforeCommit();
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "");
}

TEST_F(CrashPointEnvDeathTest, UnregisteredNameInEnvironmentAbortsAtStartUp) {
  ASSERT_EQ(::setenv("UMAP_CRASH_AT", "journal.no_such_step", 1), 0);
  EXPECT_EXIT({ std::_Exit(0); }, ::testing::KilledBySignal(SIGABRT),
              "UMAP_CRASH_AT=journal.no_such_step: INVALID_ARGUMENT");
}

}  // namespace
}  // namespace umap::crash_point
