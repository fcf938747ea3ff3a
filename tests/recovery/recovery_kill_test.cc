// Real processes: a writer (recovery_kill_worker, through the Umap C API or the Journal API)
// is SIGKILLed at each stage of the durability protocol via UMAP_CRASH_AT; then the real
// umap-recover binary runs, and the file must hold exactly the committed state. Also:
// recovery itself killed at every write, run twice, and refused while the owner lives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/recovery/kill_workload.h"
#include "tests/recovery/subprocess.h"
#define UMAPTEST_NO_UMAP_NAMESPACE
#include "tests/testing/temp_dir.h"

namespace recoverytest {
namespace {

using ::testing::HasSubstr;

class RecoveryKillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.File("data");
    journal_ = dir_.File("journal");
    ASSERT_TRUE(WriteFile(file_, Contents({}, kKillBlocks)));
  }

  ProcResult Worker(const std::string& mode, uint64_t rounds, const std::string& crash_at = "",
                    bool intent = false) {
    std::vector<std::string> argv = {UMAP_KILL_WORKER_BIN, mode, file_, journal_,
                                     std::to_string(rounds)};
    if (intent) argv.push_back("intent");
    std::vector<std::string> env;
    if (!crash_at.empty()) env.push_back("UMAP_CRASH_AT=" + crash_at);
    return ::recoverytest::Run(argv, dir_.path(), env);
  }

  ProcResult Recover(std::vector<std::string> args = {}, const std::string& crash_at = "") {
    std::vector<std::string> argv = {UMAP_RECOVER_BIN, "--journal", journal_};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env;
    if (!crash_at.empty()) env.push_back("UMAP_CRASH_AT=" + crash_at);
    return ::recoverytest::Run(argv, dir_.path(), env);
  }

  void ExpectFileIs(const FileState& state) {
    const std::string got = ReadFile(file_), want = Contents(state, kKillBlocks);
    EXPECT_TRUE(got == want) << "first difference: " << FirstDiff(got, want);
  }

  umaptest::TempDir dir_;
  std::string file_, journal_;
};

struct Stage {
  const char* name;
  const char* crash_at;  // empty: never killed
  uint64_t committed;    // rounds committed when it died (of 5)
  bool tear;             // the test tears the block the writer was about to write
  const char* replay;    // what umap-recover's report must say
};

// Round 3 of 5. Rounds 1 and 2 made 3 writes each (apply.mid_write hits 1..6). The runtime
// marks applied transactions in batches (runtime/writeback/journal_write_back.h), so the rounds applied
// before the kill are still pending and replayed again (idempotent); a runtime that ends
// cleanly marks everything.
const Stage kStages[] = {
    {"BeforeCommit", "journal.before_commit:3", 2, false, "replayed 2 transactions"},
    {"AfterCommitBeforeApply", "journal.after_commit:3", 3, false, "replayed 3 transactions"},
    {"MidApplyNoBlockWritten", "apply.mid_write:7", 3, false, "replayed 3 transactions"},
    {"MidApplyOneBlockWritten", "apply.mid_write:8", 3, false, "replayed 3 transactions"},
    {"MidApplyTornBlock", "apply.mid_write:9", 3, true, "replayed 3 transactions"},
    {"AfterApplyBeforeMarkAndGc", "apply.after_sync:3", 3, false, "replayed 3 transactions"},
    {"NeverKilled", "", 5, false, "0 transactions pending"},
};

class RecoveryKillStageTest : public RecoveryKillTest,
                              public ::testing::WithParamInterface<Stage> {};

TEST_P(RecoveryKillStageTest, ReplayGivesExactlyTheCommittedBytesAndIsIdempotent) {
  const Stage& s = GetParam();
  ProcResult w = Worker("umap", 5, s.crash_at);
  if (*s.crash_at != '\0') {
    ASSERT_EQ(w.signal, SIGKILL) << "worker exit " << w.exit_code << ": " << w.err;
  } else {
    ASSERT_EQ(w.exit_code, 0) << w.err;
  }
  if (s.tear) {
    // The block the runtime was about to write, half written by a partial DFS write.
    const uint64_t b = RoundBlocks(3)[2];
    ASSERT_TRUE(PWrite(file_, b * kKillBlockSize, Image(3, b).substr(0, kKillBlockSize / 2)));
  }
  ProcResult r = Recover();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(s.replay));
  ExpectFileIs(StateAfter(s.committed));
  // Twice: nothing left to do, same bytes.
  ProcResult again = Recover();
  EXPECT_EQ(again.exit_code, 0) << again.out;
  EXPECT_THAT(again.out, HasSubstr("nothing to do"));
  ExpectFileIs(StateAfter(s.committed));
}

INSTANTIATE_TEST_SUITE_P(EveryStage, RecoveryKillStageTest, ::testing::ValuesIn(kStages),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(RecoveryKillTest, IntentModeKilledMidApplyListsTheBlocksItCannotRepair) {
  ProcResult w = Worker("umap", 5, "apply.mid_write:8", /*intent=*/true);
  ASSERT_EQ(w.signal, SIGKILL) << w.err;
  const std::string before = ReadFile(file_);
  ProcResult r = Recover({"--json"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"contents\":\"intent\""));
  EXPECT_THAT(r.out, HasSubstr("\"not_applied_or_torn\":2"));
  EXPECT_THAT(r.out, HasSubstr("\"block\":9"));
  EXPECT_THAT(r.out, HasSubstr("\"block\":14"));
  EXPECT_EQ(ReadFile(file_), before);  // intent mode: nothing to write
  EXPECT_EQ(Recover().exit_code, 0);
}

// umap-recover SIGKILLed before its n-th write is issued (n-1 issued, some possibly still in
// flight: io_uring keeps up to 16 going), for every n; the next run must give the committed
// bytes, and a third run must find nothing to do. --io-max-kib 4 makes every block one
// write, so the kills fall between blocks rather than before the one merged write.
TEST_F(RecoveryKillTest, RecoveryKilledAtEveryWriteThenRerunGivesTheSameBytes) {
  int killed = 0;
  for (int n = 1; n <= 40; ++n) {
    ASSERT_TRUE(WriteFile(file_, Contents({}, kKillBlocks)));
    ASSERT_EQ(std::system(("rm -rf '" + journal_ + "'").c_str()), 0);
    ASSERT_EQ(Worker("backlog", 8).exit_code, 0);
    ProcResult first =
        Recover({"--io-max-kib", "4"}, "recovery.mid_replay:" + std::to_string(n));
    if (first.exited()) {
      EXPECT_EQ(first.exit_code, 0) << first.out;
      ExpectFileIs(StateAfter(8));
      break;
    }
    ASSERT_EQ(first.signal, SIGKILL) << "n=" << n;
    ++killed;
    ProcResult second = Recover();
    ASSERT_EQ(second.exit_code, 0) << "n=" << n << ": " << second.out << second.err;
    ExpectFileIs(StateAfter(8));
    ProcResult third = Recover();
    EXPECT_THAT(third.out, HasSubstr("nothing to do"));
    ExpectFileIs(StateAfter(8));
  }
  EXPECT_EQ(killed, 16);  // one kill before each of the 16 blocks' newest images
}

TEST_F(RecoveryKillTest, JournalOfALiveOwnerIsRefusedNamingItsPid) {
  const std::string out = dir_.File("worker.out"), err = dir_.File("worker.err");
  pid_t pid = Spawn({UMAP_KILL_WORKER_BIN, "hold", file_, journal_, "2"}, {}, out, err);
  ASSERT_GT(pid, 0);
  bool ready = false;
  for (int i = 0; i < 600 && !ready; ++i) {
    ready = Slurp(out).find("ready") != std::string::npos;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(ready) << Slurp(err);
  const std::string before = ReadFile(file_);
  ProcResult r = Recover();
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("in use by pid " + std::to_string(pid)));
  EXPECT_EQ(ReadFile(file_), before);
  ::kill(pid, SIGKILL);
  ProcResult w = Wait(pid, out, err);
  EXPECT_EQ(w.signal, SIGKILL);
  ProcResult after = Recover();
  EXPECT_EQ(after.exit_code, 0) << after.out;
  ExpectFileIs(StateAfter(2));
}

// The owner's files deleted under a live writer (LOCK and UMAP-OWNER, or either): umap-recover
// is refused (exit 2, naming the writer's pid), writes nothing (no UMAP-OWNER of its own,
// the data file untouched), and the writer, whose UMAP-OWNER no longer proves its ownership,
// fails its next umsync with ESTALE instead of committing into a journal it cannot prove is
// its own. Then, with the writer gone, recovery finds exactly the acknowledged rounds.
TEST_F(RecoveryKillTest, DeletingTheOwnerFilesNeverHandsTheJournalToAnother) {
  const std::string owner = journal_ + "/UMAP-OWNER", lock = journal_ + "/LOCK";
  for (const std::vector<std::string>& deleted :
       {std::vector<std::string>{lock, owner}, {owner}, {lock}}) {
    SCOPED_TRACE(deleted.size() == 2 ? "LOCK and UMAP-OWNER" : deleted[0]);
    journal_ =
        dir_.File("journal-" + std::to_string(deleted.size()) + (deleted[0] == lock ? "l" : "o"));
    ASSERT_TRUE(WriteFile(file_, Contents({}, kKillBlocks)));
    const std::string own = journal_ + "/UMAP-OWNER";
    const std::string out = dir_.File("worker.out"), err = dir_.File("worker.err");
    pid_t pid = Spawn({UMAP_KILL_WORKER_BIN, "hold-sync", file_, journal_, "2"}, {}, out, err);
    ASSERT_GT(pid, 0);
    bool ready = false;
    for (int i = 0; i < 600 && !ready; ++i) {
      ready = Slurp(out).find("ready") != std::string::npos;
      if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(ready) << Slurp(err);
    for (const std::string& f : deleted) {
      ASSERT_EQ(::unlink((journal_ + f.substr(f.rfind('/'))).c_str()), 0) << f;
    }
    const bool owner_deleted = deleted.size() == 2 || deleted[0] == owner;
    const std::string owner_before = owner_deleted ? "" : ReadFile(own);
    const std::string before = ReadFile(file_);
    ProcResult r = Recover();
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("is in use by"));
    EXPECT_THAT(r.out, HasSubstr(std::to_string(pid)));
    EXPECT_EQ(ReadFile(file_), before);
    if (owner_deleted) {
      EXPECT_FALSE(std::filesystem::exists(own)) << "umap-recover wrote an owner record";
    } else {
      EXPECT_EQ(ReadFile(own), owner_before) << "umap-recover rewrote the owner record";
    }
    ::kill(pid, SIGUSR1);
    ProcResult w = Wait(pid, out, err);
    if (owner_deleted) {
      EXPECT_EQ(w.exit_code, 20) << w.out << w.err;
      EXPECT_THAT(w.out, HasSubstr("umsync -1 errno " + std::to_string(ESTALE)));
      EXPECT_THAT(w.err, HasSubstr("was deleted or replaced"));
    } else {
      EXPECT_EQ(w.exit_code, 0) << w.out << w.err;  // its ownership stands: LOCK is RocksDB's
    }
    ProcResult after = Recover();
    EXPECT_EQ(after.exit_code, 0) << after.out << after.err;
    ExpectFileIs(StateAfter(owner_deleted ? 2 : 3));
  }
}

}  // namespace
}  // namespace recoverytest
