// A fault class is one file and one registration line: this file defines a trivial class
// (the worker runs its rounds undisturbed), registers it with the macro every class uses,
// and runs it through the real epoch loop, worker and umap-recover.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chaos/config.h"
#include "chaos/fault_class.h"
#include "chaos/harness.h"
#include "chaos/run_context.h"
#include "chaos/system.h"

namespace chaos {
namespace {

struct Calls {
  int arm = 0, inject = 0, judge = 0, restore = 0, damage = 0;
};
Calls g_calls;

class UndisturbedFault : public FaultClass {
 public:
  static constexpr const char* kName = "undisturbed";
  static constexpr const char* kHelp = "  undisturbed  no fault: the worker runs its rounds\n";
  static constexpr int kWeight = 1;
  static constexpr bool kReplayable = true;
  using FaultClass::FaultClass;

  void Arm(Epoch& e) override {
    ++g_calls.arm;
    e.rounds = 5;
    e.rec.Describe("no fault");
  }
  bool Inject(Epoch& e, Worker& worker) override {
    ++g_calls.inject;
    return FaultClass::Inject(e, worker);
  }
  void Judge(Epoch&, Worker&, const Exit& exit) override {
    ++g_calls.judge;
    EXPECT_TRUE(exit.exited && exit.code == 0) << exit.ToString();
  }
  absl::Status Restore(Epoch&) override {
    ++g_calls.restore;
    return absl::OkStatus();
  }
  absl::Status DamageJournal(Epoch&, const Exit&) override {
    ++g_calls.damage;
    return absl::OkStatus();
  }
};

}  // namespace

UMAP_CHAOS_REGISTER_FAULT_CLASS(UndisturbedFault);

namespace {

TEST(FaultRegistryTest, ListsTheBuiltinClassesInTheDefaultOrderThenTheRestByName) {
  std::vector<std::string> names;
  for (const FaultClassInfo* info : FaultRegistry::All("kill,reboot,timeout,enospc,eio,torn")) {
    names.push_back(info->name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"kill", "reboot", "timeout", "enospc", "eio", "torn",
                                             "journal-damage", "node-loss", "undisturbed"}));
  ASSERT_NE(FaultRegistry::Find("undisturbed"), nullptr);
  EXPECT_EQ(FaultRegistry::Find("undisturbed")->weight, 1);
  EXPECT_EQ(FaultRegistry::Find("kill")->weight, 3);
  ASSERT_NE(FaultRegistry::Find("node-loss"), nullptr);
  EXPECT_FALSE(FaultRegistry::Find("node-loss")->replayable);
  EXPECT_EQ(FaultRegistry::Find("no-such-class"), nullptr);
}

TEST(FaultRegistryTest, ARegisteredClassRunsThroughTheEpochLoop) {
  const std::string dir = "/var/tmp/umap-chaos-registry-test-" + std::to_string(::getpid());
  Config c;
  c.seed = 4242;
  c.faults = {"undisturbed"};
  c.faults_arg = "undisturbed";
  c.worker = UMAP_CHAOS_WORKER;
  c.recover = UMAP_RECOVER;
  ASSERT_TRUE(MakeDirs(dir).ok());
  RunContext run(c, dir);
  int epochs = 0;
  {
    Harness harness(run);
    for (int index = 0; index < 3; ++index) {
      IterationRecord rec = harness.RunIteration(index);
      EXPECT_EQ(rec.cls, "undisturbed");
      EXPECT_FALSE(rec.skipped);
      for (const Violation& v : rec.violations) ADD_FAILURE() << v.invariant << ": " << v.detail;
      EXPECT_NE(rec.what.find("no fault"), std::string::npos) << rec.what;
      epochs += rec.epochs_run;
    }
  }
  EXPECT_GE(epochs, 3);
  EXPECT_EQ(g_calls.arm, epochs);
  EXPECT_EQ(g_calls.inject, epochs);
  EXPECT_EQ(g_calls.judge, epochs);
  EXPECT_EQ(g_calls.restore, epochs);
  // Every epoch but those left to the next epoch's map-time replay is recovered.
  EXPECT_GE(g_calls.damage, 3);
  EXPECT_LE(g_calls.damage, epochs);
  const ClassStats& st = run.tally().classes().at("undisturbed");
  EXPECT_EQ(st.iterations, 3u);
  EXPECT_EQ(st.violations, 0u);
  EXPECT_EQ(st.fired, 0u);
  EXPECT_GE(st.recoveries, 2u * g_calls.damage);
  EXPECT_TRUE(RemoveTree(dir).ok());
}

}  // namespace
}  // namespace chaos
