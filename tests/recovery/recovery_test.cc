// In-process tests of recovery::Recover: every stage a crashed writer can leave behind,
// every refusal, I/O errors and power cuts during replay (FaultEnv / FaultFs), intent-mode
// classification, dry-run and verify. Real-process kill tests: recovery_kill_test.cc.
#include "recovery/recovery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/crash_point.h"
#include "base/crc32c.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "faultinject/fault_env.h"
#include "faultinject/fault_fs.h"
#include "journal/format.h"
#include "journal/journal.h"
#include "rocksdb/db.h"
#include "rocksdb/file_system.h"
#include "tests/recovery/recovery_test_util.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace umap::recovery {
namespace {

using ::recoverytest::Contents;
using ::recoverytest::FileState;
using ::recoverytest::FirstDiff;
using ::recoverytest::Image;
using ::recoverytest::PWrite;
using ::recoverytest::ReadFile;
using ::recoverytest::WriteFile;
using ::testing::HasSubstr;
using journal::Journal;
using journal::Policy;
using journal::Transaction;
using umap::testing::StatusIs;

constexpr uint64_t kBlocks = 16;
constexpr uint32_t kBs = 4096;

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.File("data");
    jdir_ = dir_.File("journal");
    ASSERT_TRUE(WriteFile(file_, Contents({}, kBlocks)));
    OpenJournal();
  }

  void OpenJournal(std::shared_ptr<rocksdb::FileSystem> fs = nullptr) {
    journal::JournalOptions o;
    o.dir = jdir_;
    o.fs = std::move(fs);
    ASSERT_OK_AND_ASSIGN(journal_, Journal::Open(o));
  }
  // The writer "dies": its journal is closed with whatever it committed.
  void Crash() { journal_.reset(); }

  uint64_t Register(journal::Policy policy = Policy::kAtomic,
                    journal::Contents contents = journal::Contents::kData,
                    const std::string& path = "") {
    absl::StatusOr<FileIdentity> id = Env::Default()->IdentifyPath(path.empty() ? file_ : path);
    EXPECT_OK(id.status());
    absl::StatusOr<uint64_t> m = journal_->RegisterMapping(*id, kBs, policy, contents);
    EXPECT_OK(m.status());
    return *m;
  }

  // Commits {block -> version}; remembers the committed state.
  Transaction Commit(uint64_t m, const FileState& blocks, FileState* state = nullptr) {
    std::vector<std::string> images;
    std::vector<journal::BlockWrite> writes;
    for (const auto& [b, v] : blocks) images.push_back(Image(v, b));
    size_t i = 0;
    for (const auto& [b, v] : blocks) writes.push_back({b, images[i++]});
    absl::StatusOr<Transaction> t = journal_->Commit(m, writes, 0, 0);
    EXPECT_OK(t.status());
    if (state == nullptr) state = &committed_;
    for (const auto& [b, v] : blocks) (*state)[b] = v;
    return *t;
  }

  // Writes (some of) a transaction's images to the file, as the runtime's apply does.
  void Apply(const Transaction& t, size_t max_blocks = SIZE_MAX) {
    for (size_t i = 0; i < t.blocks.size() && i < max_blocks; ++i) {
      ASSERT_TRUE(PWrite(file_, t.blocks[i].block * kBs, t.blocks[i].data));
    }
  }

  RecoverOptions Options(Mode mode = Mode::kReplay) {
    RecoverOptions o;
    o.journal_dir = jdir_;
    o.mode = mode;
    o.env = env_;
    return o;
  }

  Report MustRecover(const RecoverOptions& o) {
    absl::StatusOr<Report> r = Recover(o);
    EXPECT_OK(r.status());
    return r.ok() ? *std::move(r) : Report();
  }

  std::vector<uint64_t> PendingAfterReopen() {
    if (journal_ == nullptr) OpenJournal();
    std::vector<uint64_t> p = journal_->PendingLsns();
    Crash();
    return p;
  }

  void ExpectFileIs(const FileState& state) {
    const std::string got = ReadFile(file_), want = Contents(state, kBlocks);
    EXPECT_TRUE(got == want) << "first difference: " << FirstDiff(got, want);
  }

  umap::testing::TempDir dir_;
  std::string file_, jdir_;
  std::unique_ptr<Journal> journal_;
  FileState committed_;  // initial file + every committed transaction, in LSN order
  Env* env_ = nullptr;
};

// ---- the stages of the protocol -----------------------------------------------------------

TEST_F(RecoveryTest, CleanJournalHasNothingToDo) {
  const uint64_t m = Register();
  Apply(Commit(m, {{1, 1}}));
  ASSERT_OK(journal_->MarkApplied(journal_->PendingLsns()));
  Crash();
  Report r = MustRecover(Options());
  ASSERT_EQ(r.mappings.size(), 1u);
  EXPECT_EQ(r.mappings[0].state, MappingState::kClean);
  EXPECT_TRUE(r.mappings[0].unregistered);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  ExpectFileIs(committed_);
}

TEST_F(RecoveryTest, KilledBeforeCommitLeavesTheFileAsItWas) {
  Register();
  // The transaction was being built when the process died: nothing of it is in the journal.
  Crash();
  Report r = MustRecover(Options());
  EXPECT_EQ(r.pending_txns, 0u);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  ExpectFileIs({});
}

TEST_F(RecoveryTest, KilledAfterCommitBeforeApplyReplaysInLsnOrder) {
  const uint64_t m = Register();
  Commit(m, {{0, 1}, {1, 1}, {5, 1}});
  Commit(m, {{1, 2}, {2, 2}});
  Commit(m, {{0, 3}, {15, 3}});
  Crash();
  Report r = MustRecover(Options());
  ASSERT_EQ(r.mappings.size(), 1u);
  const MappingReport& mr = r.mappings[0];
  EXPECT_EQ(mr.state, MappingState::kReplayed);
  EXPECT_EQ(mr.txns_pending, 3u);
  EXPECT_EQ(mr.txns_replayed, 3u);
  EXPECT_EQ(mr.blocks_pending, 7u);
  EXPECT_EQ(mr.blocks_written, 5u);  // newest version of each block only
  EXPECT_EQ(mr.bytes_written, 5u * kBs);
  EXPECT_TRUE(mr.unregistered);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  ExpectFileIs(committed_);
  EXPECT_TRUE(PendingAfterReopen().empty());
}

TEST_F(RecoveryTest, KilledMidApplyWithATornBlockHeals) {
  const uint64_t m = Register();
  Apply(Commit(m, {{3, 1}}));
  ASSERT_OK(journal_->MarkApplied(journal_->PendingLsns()));
  const Transaction t = Commit(m, {{2, 2}, {3, 2}, {4, 2}, {9, 2}});
  Apply(t, 1);  // block 2 written
  // Block 3 half written (a partial DFS write), blocks 4 and 9 never reached.
  ASSERT_TRUE(PWrite(file_, 3 * kBs, Image(2, 3).substr(0, kBs / 2)));
  Crash();
  Report r = MustRecover(Options());
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  EXPECT_EQ(r.mappings[0].txns_replayed, 1u);
  ExpectFileIs(committed_);
}

TEST_F(RecoveryTest, KilledAfterApplyBeforeMarkRewritesTheSameBytes) {
  const uint64_t m = Register();
  Apply(Commit(m, {{7, 1}, {8, 1}}));
  Apply(Commit(m, {{8, 2}}));
  Crash();  // applied and synced, never marked applied: still pending
  Report r = MustRecover(Options());
  EXPECT_EQ(r.mappings[0].txns_replayed, 2u);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  ExpectFileIs(committed_);
}

TEST_F(RecoveryTest, KilledAfterMarkBeforeGcKeepsTheNewerVersion) {
  const uint64_t m = Register();
  const Transaction t1 = Commit(m, {{4, 1}});
  const Transaction t2 = Commit(m, {{4, 2}, {5, 2}});
  Apply(t1);
  Apply(t2);
  // t2 marked first: the journal keeps it while the older t1 shares block 4.
  ASSERT_OK(journal_->MarkApplied(t2.lsn));
  Crash();
  Report r = MustRecover(Options());
  EXPECT_EQ(r.mappings[0].txns_pending, 2u);
  ExpectFileIs(committed_);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
}

TEST_F(RecoveryTest, SecondRunFindsNothingAndLeavesTheSameBytes) {
  const uint64_t m = Register();
  Commit(m, {{0, 1}, {1, 1}});
  Commit(m, {{1, 2}});
  Crash();
  Report first = MustRecover(Options());
  EXPECT_EQ(ExitCodeOf(first), ExitCode::kOk);
  const std::string after_first = ReadFile(file_);
  Report second = MustRecover(Options());
  EXPECT_EQ(second.pending_txns, 0u);
  EXPECT_TRUE(second.mappings.empty());
  EXPECT_EQ(ExitCodeOf(second), ExitCode::kOk);
  EXPECT_EQ(ReadFile(file_), after_first);
  ExpectFileIs(committed_);
}

TEST_F(RecoveryTest, ReplayAfterAPartialReplayWithoutMarkGivesTheSameBytes) {
  const uint64_t m = Register();
  Commit(m, {{0, 1}, {1, 1}});
  Commit(m, {{1, 2}, {2, 2}});
  Crash();
  // A first recovery that died after writing one block: one write per block, and the crash
  // point before the second write makes it and every later one fail, as if the process was
  // gone.
  faultinject::FaultEnv fenv(Env::Default());
  env_ = &fenv;
  ASSERT_OK(crash_point::Arm("recovery.mid_replay", 2, crash_point::Action::Call([&](auto) {
                               ASSERT_OK(fenv.FailNext(faultinject::Op::kWrite, 100,
                                                       faultinject::Fault::Error(EIO)));
                             })));
  RecoverOptions o = Options();
  o.io_max_bytes = kBs;
  Report r = MustRecover(o);
  crash_point::Disarm();
  EXPECT_EQ(r.mappings[0].state, MappingState::kIoError);
  EXPECT_EQ(ReadFile(file_).substr(0, kBs), Image(1, 0));  // the first block was written
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kIoError);
  EXPECT_EQ(PendingAfterReopen().size(), 2u);  // nothing marked
  fenv.ClearAll();
  Report again = MustRecover(Options());
  EXPECT_EQ(ExitCodeOf(again), ExitCode::kOk);
  ExpectFileIs(committed_);
}

// ---- faults during replay ----------------------------------------------------------------

TEST_F(RecoveryTest, WriteErrorKeepsTheJournalAndARerunSucceeds) {
  const uint64_t m = Register();
  Commit(m, {{0, 1}});
  Commit(m, {{6, 2}});
  Crash();
  faultinject::FaultEnv fenv(Env::Default());
  env_ = &fenv;
  ASSERT_OK(fenv.FailNext(faultinject::Op::kWrite, 1, faultinject::Fault::Error(EIO)));
  Report r = MustRecover(Options());
  const MappingReport& mr = r.mappings[0];
  EXPECT_EQ(mr.state, MappingState::kIoError);
  EXPECT_EQ(mr.problem, Problem::kIo);
  EXPECT_THAT(mr.status.message(), HasSubstr("LSN 1"));
  EXPECT_THAT(mr.status.message(), HasSubstr("offset 0"));
  EXPECT_THAT(mr.status.message(), HasSubstr("safe to rerun"));
  EXPECT_FALSE(mr.unregistered);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kIoError);
  EXPECT_EQ(PendingAfterReopen().size(), 2u);
  Report again = MustRecover(Options());
  EXPECT_EQ(ExitCodeOf(again), ExitCode::kOk);
  ExpectFileIs(committed_);
}

TEST_F(RecoveryTest, TornWriteDuringReplayHealsOnRerun) {
  const uint64_t m = Register();
  Commit(m, {{0, 1}, {1, 1}, {2, 1}});
  Crash();
  faultinject::FaultEnv fenv(Env::Default());
  env_ = &fenv;
  ASSERT_OK(fenv.FailNext(faultinject::Op::kWrite, 1, faultinject::Fault::TornWrite(EIO, 5000)));
  Report r = MustRecover(Options());
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kIoError);
  EXPECT_NE(ReadFile(file_), Contents(committed_, kBlocks));
  Report again = MustRecover(Options());
  EXPECT_EQ(ExitCodeOf(again), ExitCode::kOk);
  ExpectFileIs(committed_);
}

TEST_F(RecoveryTest, FailedSyncIsNeverRetriedAndMarksNothing) {
  const uint64_t m = Register();
  Commit(m, {{10, 1}});
  Crash();
  faultinject::FaultEnv fenv(Env::Default());
  env_ = &fenv;
  ASSERT_OK(fenv.FailNext(faultinject::Op::kSync, 1, faultinject::Fault::SyncLosesData(EIO)));
  Report r = MustRecover(Options());
  EXPECT_EQ(r.mappings[0].state, MappingState::kIoError);
  EXPECT_EQ(r.mappings[0].txns_replayed, 0u);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kIoError);
  EXPECT_EQ(PendingAfterReopen().size(), 1u);
  Report again = MustRecover(Options());
  EXPECT_EQ(ExitCodeOf(again), ExitCode::kOk);
  ExpectFileIs(committed_);
}

// A power cut in the middle of a replay that already checkpointed: file writes after the
// last fdatasync are torn, unsynced journal deletions are lost. The next run gives the
// same bytes.
TEST_F(RecoveryTest, PowerCutMidReplayAfterACheckpointThenRerunGivesTheSameBytes) {
  const uint64_t m = Register();
  for (uint64_t v = 1; v <= 6; ++v) Commit(m, {{v, v}, {v + 8, v}});
  Crash();
  auto fs = std::make_shared<faultinject::FaultFs>(rocksdb::FileSystem::Default());
  faultinject::FaultEnv fenv(Env::Default());
  env_ = &fenv;
  RecoverOptions o = Options();
  o.journal_fs = fs;
  o.journal_env = Env::Default();
  o.checkpoint_bytes = 4 * kBs;  // sync + mark every two transactions
  o.io_max_bytes = kBs;          // one write per block: the 9th is the third checkpoint's first
  ASSERT_OK(crash_point::Arm("recovery.mid_replay", 9, crash_point::Action::Call([&](auto) {
                               fenv.SimulatePowerCut();
                               fs->SimulatePowerCut();
                             })));
  Report r = MustRecover(o);
  crash_point::Disarm();
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kIoError);
  EXPECT_GT(r.mappings[0].txns_replayed, 0u);  // a checkpoint marked some
  ASSERT_OK(fenv.DropUnsyncedData(faultinject::DropOptions::Tear(7, /*garble=*/true)));
  ASSERT_OK(fs->DropUnsyncedData(faultinject::FsDropOptions::Tear(7)));
  fenv.Restart();
  fs->Restart();
  Report again = MustRecover(o);
  EXPECT_EQ(ExitCodeOf(again), ExitCode::kOk);
  ExpectFileIs(committed_);
}

TEST_F(RecoveryTest, CheckpointsMarkAppliedInBatches) {
  const uint64_t m = Register();
  for (uint64_t v = 1; v <= 8; ++v) Commit(m, {{v, v}});
  Crash();
  RecoverOptions o = Options();
  o.checkpoint_bytes = 3 * kBs;
  o.verify_after_replay = true;
  Report r = MustRecover(o);
  EXPECT_EQ(r.mappings[0].txns_replayed, 8u);
  EXPECT_EQ(r.mappings[0].blocks_verified, 8u);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  ExpectFileIs(committed_);
  EXPECT_TRUE(PendingAfterReopen().empty());
}

// ---- refusals: exit 2, nothing written ---------------------------------------------------

TEST_F(RecoveryTest, ReplacedFileIsRefusedAndNotWritten) {
  const uint64_t m = Register();
  Commit(m, {{0, 1}});
  Crash();
  // Same path, same bytes, another inode (restored from a copy).
  const std::string copy = dir_.File("copy");
  ASSERT_TRUE(WriteFile(copy, ReadFile(file_)));
  std::filesystem::rename(copy, file_);
  const std::string before = ReadFile(file_);
  Report r = MustRecover(Options());
  const MappingReport& mr = r.mappings[0];
  EXPECT_EQ(mr.state, MappingState::kRefused);
  EXPECT_EQ(mr.problem, Problem::kIdentityMismatch);
  EXPECT_THAT(mr.status.message(), HasSubstr("is not the journaled file"));
  EXPECT_THAT(mr.status.message(), HasSubstr("--force-path"));
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kRefused);
  EXPECT_EQ(ReadFile(file_), before);
  EXPECT_EQ(PendingAfterReopen().size(), 1u);
}

TEST_F(RecoveryTest, ForcePathRelocatesAMovedFile) {
  const uint64_t m = Register();
  Commit(m, {{2, 1}, {3, 1}});
  Crash();
  const std::string newdir = dir_.File("newmount");
  std::filesystem::create_directory(newdir);
  ASSERT_TRUE(WriteFile(newdir + "/data", ReadFile(file_)));  // another inode
  std::filesystem::remove(file_);
  RecoverOptions o = Options();
  ASSERT_OK_AND_ASSIGN(PathRelocation rel, ParseRelocation(dir_.path() + "=" + newdir));
  o.relocations.push_back(rel);
  Report r = MustRecover(o);
  EXPECT_TRUE(r.mappings[0].relocated);
  EXPECT_EQ(r.mappings[0].target_path, newdir + "/data");
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  file_ = newdir + "/data";
  ExpectFileIs(committed_);
}

TEST_F(RecoveryTest, ForcePathStillChecksTheSize) {
  const uint64_t m = Register();
  Commit(m, {{2, 1}});
  Crash();
  const std::string moved = dir_.File("moved");
  ASSERT_TRUE(WriteFile(moved, ReadFile(file_).substr(0, 3 * kBs)));
  RecoverOptions o = Options();
  o.relocations.push_back({file_, moved});
  Report r = MustRecover(o);
  EXPECT_EQ(r.mappings[0].problem, Problem::kSizeMismatch);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kRefused);
  EXPECT_EQ(ReadFile(moved).size(), 3 * kBs);
}

TEST_F(RecoveryTest, SizeChangeIsRefusedUnlessAccepted) {
  const uint64_t m = Register();
  Commit(m, {{1, 1}});
  Crash();
  ASSERT_EQ(::truncate(file_.c_str(), (kBlocks + 1) * kBs), 0);
  Report r = MustRecover(Options());
  EXPECT_EQ(r.mappings[0].problem, Problem::kSizeMismatch);
  EXPECT_THAT(r.mappings[0].status.message(), HasSubstr("--accept-size"));
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kRefused);
  RecoverOptions o = Options();
  o.accept_size_change = true;
  Report accepted = MustRecover(o);
  EXPECT_EQ(ExitCodeOf(accepted), ExitCode::kOk);
  EXPECT_EQ(ReadFile(file_).substr(kBs, kBs), Image(1, 1));
}

TEST_F(RecoveryTest, MissingFileIsRefused) {
  const uint64_t m = Register();
  Commit(m, {{1, 1}});
  Crash();
  std::filesystem::remove(file_);
  Report r = MustRecover(Options());
  EXPECT_EQ(r.mappings[0].problem, Problem::kMissingFile);
  EXPECT_THAT(r.mappings[0].status.message(), HasSubstr("is missing"));
  EXPECT_THAT(r.mappings[0].status.message(), HasSubstr("LSN 1"));
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kRefused);
  EXPECT_FALSE(std::filesystem::exists(file_));
}

TEST_F(RecoveryTest, ReadOnlyTargetIsRefused) {
  const uint64_t m = Register();
  Commit(m, {{1, 1}});
  Crash();
  faultinject::FaultEnv fenv(Env::Default());
  env_ = &fenv;
  ASSERT_OK(fenv.FailNext(faultinject::Op::kOpen, 1, faultinject::Fault::Error(EROFS)));
  const std::string before = ReadFile(file_);
  Report r = MustRecover(Options());
  EXPECT_EQ(r.mappings[0].problem, Problem::kNotWritable);
  EXPECT_THAT(r.mappings[0].status.message(), HasSubstr("for writing"));
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kRefused);
  EXPECT_EQ(ReadFile(file_), before);
}

TEST_F(RecoveryTest, TransactionOutsideTheJournaledFileIsRefused) {
  absl::StatusOr<FileIdentity> id = Env::Default()->IdentifyPath(file_);
  ASSERT_OK(id.status());
  FileIdentity small = *id;
  small.size = 2 * kBs;
  ASSERT_EQ(::truncate(file_.c_str(), 2 * kBs), 0);
  ASSERT_OK_AND_ASSIGN(uint64_t m, journal_->RegisterMapping(small, kBs, Policy::kAtomic,
                                                             journal::Contents::kData));
  Commit(m, {{5, 1}});
  Crash();
  Report r = MustRecover(Options());
  EXPECT_EQ(r.mappings[0].problem, Problem::kBadTransaction);
  EXPECT_THAT(r.mappings[0].status.message(), HasSubstr("outside the journaled file"));
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kRefused);
  EXPECT_EQ(ReadFile(file_).size(), 2 * kBs);
}

TEST_F(RecoveryTest, OneRefusedFileDoesNotStopTheOthers) {
  const std::string other = dir_.File("other");
  ASSERT_TRUE(WriteFile(other, Contents({}, kBlocks)));
  const uint64_t a = Register();
  const uint64_t b = Register(Policy::kAtomic, journal::Contents::kData, other);
  Commit(a, {{1, 1}});
  FileState other_state;
  Commit(b, {{2, 1}}, &other_state);
  Crash();
  std::filesystem::remove(file_);
  Report r = MustRecover(Options());
  ASSERT_EQ(r.mappings.size(), 2u);
  EXPECT_EQ(r.mappings[0].state, MappingState::kRefused);
  EXPECT_EQ(r.mappings[1].state, MappingState::kReplayed);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kRefused);
  EXPECT_EQ(ReadFile(other), Contents(other_state, kBlocks));
}

// Overwrites the payload of (lsn, block) with a value whose CRC does not match its bytes.
void DamagePayload(const std::string& jdir, uint64_t lsn, uint64_t block, uint64_t version) {
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), jdir, &db).ok());
  std::string bad = journal::EncodeTxnPayload(Image(version, block));
  bad[10] ^= 0x55;
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), journal::TxnPayloadKey(lsn, block), bad).ok());
  delete db;
}

// Replay reads and checks a whole round before writing any of it: a damaged image in a
// backlog that fits one round leaves the file untouched and everything pending.
TEST_F(RecoveryTest, DamagedImageRefusesItsRoundAndWritesNothingOfIt) {
  const uint64_t m = Register();
  const Transaction t1 = Commit(m, {{0, 1}});
  const Transaction t2 = Commit(m, {{1, 2}});
  Commit(m, {{2, 3}});
  Crash();
  DamagePayload(jdir_, t2.lsn, 1, 2);
  Report r = MustRecover(Options());
  const MappingReport& mr = r.mappings[0];
  EXPECT_EQ(mr.state, MappingState::kRefused);
  EXPECT_EQ(mr.problem, Problem::kCorruptRecord);
  EXPECT_THAT(mr.status.message(), HasSubstr("LSN 2 is damaged"));
  EXPECT_THAT(mr.status.message(), HasSubstr("stopped before the replay round"));
  EXPECT_FALSE(mr.unregistered);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kRefused);
  ExpectFileIs({});
  EXPECT_EQ(PendingAfterReopen(), (std::vector<uint64_t>{t1.lsn, t2.lsn, t2.lsn + 1}));
}

// With rounds of one transaction each, the rounds before the damaged one are written and
// marked: the file is as the transactions before the damage left it.
TEST_F(RecoveryTest, DamagedImageStopsTheReplayAtItsRoundAfterTheRoundsBefore) {
  const uint64_t m = Register();
  Commit(m, {{0, 1}});
  const Transaction t2 = Commit(m, {{1, 2}});
  Commit(m, {{2, 3}});
  Crash();
  DamagePayload(jdir_, t2.lsn, 1, 2);
  RecoverOptions o = Options();
  o.checkpoint_bytes = kBs;  // buffers, and so rounds, of one block
  Report r = MustRecover(o);
  EXPECT_EQ(r.mappings[0].problem, Problem::kCorruptRecord);
  EXPECT_THAT(r.mappings[0].status.message(), HasSubstr("before LSN 2 left it"));
  ExpectFileIs({{0, 1}});
  EXPECT_EQ(PendingAfterReopen(), (std::vector<uint64_t>{t2.lsn, t2.lsn + 1}));
}

// A block rewritten in a later round is written in each round: a replay stopped between
// them leaves the earlier round's image, as applying the transactions in order would.
TEST_F(RecoveryTest, ABlockRewrittenInALaterRoundKeepsTheEarlierImageWhenReplayStopsBetween) {
  const uint64_t m = Register();
  const Transaction t1 = Commit(m, {{0, 1}, {1, 1}});
  const Transaction t2 = Commit(m, {{2, 2}});
  const Transaction t3 = Commit(m, {{1, 3}});
  Crash();
  DamagePayload(jdir_, t2.lsn, 2, 2);
  RecoverOptions o = Options();
  o.checkpoint_bytes = 2 * kBs;  // rounds: t1 | t2 t3
  Report r = MustRecover(o);
  EXPECT_EQ(r.mappings[0].problem, Problem::kCorruptRecord);
  EXPECT_EQ(r.mappings[0].txns_replayed, 1u);
  ExpectFileIs({{0, 1}, {1, 1}});
  EXPECT_EQ(PendingAfterReopen(), (std::vector<uint64_t>{t2.lsn, t3.lsn}));
}

// A transaction larger than a buffer is checked whole before the first of its buffers is
// written: damage in its last image leaves the file untouched.
TEST_F(RecoveryTest, AnOversizeTransactionIsCheckedWholeBeforeAnyOfItIsWritten) {
  const uint64_t m = Register();
  const Transaction t1 = Commit(m, {{0, 1}, {1, 1}, {2, 1}, {3, 1}});
  Crash();
  DamagePayload(jdir_, t1.lsn, 3, 1);
  RecoverOptions o = Options();
  o.checkpoint_bytes = kBs;  // buffers of one block: the transaction spans four
  Report r = MustRecover(o);
  EXPECT_EQ(r.mappings[0].problem, Problem::kCorruptRecord);
  EXPECT_EQ(r.mappings[0].blocks_written, 0u);
  ExpectFileIs({});
  EXPECT_EQ(PendingAfterReopen(), (std::vector<uint64_t>{t1.lsn}));
}

TEST_F(RecoveryTest, DryRunAndVerifyReportADamagedImageAndWriteNothing) {
  const uint64_t m = Register();
  const Transaction t1 = Commit(m, {{0, 1}, {1, 1}});
  Crash();
  DamagePayload(jdir_, t1.lsn, 1, 1);
  const std::string before = ReadFile(file_);
  for (Mode mode : {Mode::kDryRun, Mode::kVerify}) {
    Report r = MustRecover(Options(mode));
    EXPECT_EQ(r.mappings[0].problem, Problem::kCorruptRecord) << ModeName(mode);
    EXPECT_THAT(r.mappings[0].status.message(), HasSubstr("nothing was written"));
    EXPECT_EQ(ExitCodeOf(r), ExitCode::kRefused);
  }
  EXPECT_EQ(ReadFile(file_), before);
  EXPECT_EQ(PendingAfterReopen().size(), 1u);
}

TEST_F(RecoveryTest, CorruptTransactionHeaderRefusesAtOpen) {
  const uint64_t m = Register();
  const Transaction t = Commit(m, {{0, 1}});
  Crash();
  {
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), jdir_, &db).ok());
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), journal::TxnHeaderKey(t.lsn), &v).ok());
    v[3] ^= 1;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), journal::TxnHeaderKey(t.lsn), v).ok());
    delete db;
  }
  absl::StatusOr<Report> r = Recover(Options());
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(ExitCodeOf(r.status()), ExitCode::kRefused);
  ExpectFileIs({});
}

TEST_F(RecoveryTest, NewerJournalFormatIsRefused) {
  Register();
  Crash();
  {
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), jdir_, &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), journal::FormatKey(),
                        journal::EncodeFormat(journal::FormatRecord{journal::kFormatVersion + 1}))
                    .ok());
    delete db;
  }
  absl::StatusOr<Report> r = Recover(Options());
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(r.status().message(), HasSubstr("newer"));
  EXPECT_EQ(ExitCodeOf(r.status()), ExitCode::kRefused);
}

TEST_F(RecoveryTest, JournalHeldOpenIsRefusedWithEbusy) {
  const uint64_t m = Register();
  Commit(m, {{0, 1}});
  // journal_ stays open: this process is the owner.
  absl::StatusOr<Report> r = Recover(Options());
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(ErrnoFromStatus(r.status()), EBUSY);
  EXPECT_EQ(ExitCodeOf(r.status()), ExitCode::kRefused);
  ExpectFileIs({});
}

TEST_F(RecoveryTest, MissingJournalIsNotFoundUnlessAllowed) {
  Crash();
  RecoverOptions o = Options();
  o.journal_dir = dir_.File("nope");
  EXPECT_THAT(Recover(o), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_FALSE(std::filesystem::exists(o.journal_dir));  // not created
  o.allow_missing_journal = true;
  Report r = MustRecover(o);
  EXPECT_FALSE(r.journal_found);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  // An empty directory is not a journal either, and stays empty.
  std::filesystem::create_directory(o.journal_dir);
  o.allow_missing_journal = false;
  EXPECT_THAT(Recover(o), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(std::filesystem::is_empty(o.journal_dir));
}

// ---- dry run and verify ------------------------------------------------------------------

TEST_F(RecoveryTest, DryRunReportsAndWritesNothing) {
  const uint64_t m = Register();
  Commit(m, {{0, 1}, {1, 1}});
  Commit(m, {{1, 2}});
  Crash();
  const std::string before = ReadFile(file_);
  Report r = MustRecover(Options(Mode::kDryRun));
  const MappingReport& mr = r.mappings[0];
  EXPECT_EQ(mr.state, MappingState::kWouldReplay);
  EXPECT_EQ(mr.txns_pending, 2u);
  EXPECT_EQ(mr.blocks_to_write, 2u);
  EXPECT_EQ(mr.bytes_to_write, 2u * kBs);
  EXPECT_EQ(mr.blocks_written, 0u);
  EXPECT_FALSE(mr.unregistered);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  EXPECT_EQ(ReadFile(file_), before);
  EXPECT_EQ(PendingAfterReopen().size(), 2u);
}

TEST_F(RecoveryTest, VerifyListsBlocksThatDifferAndWritesNothing) {
  const uint64_t m = Register();
  const Transaction t1 = Commit(m, {{0, 1}, {1, 1}, {2, 1}});
  Apply(t1);
  const Transaction t2 = Commit(m, {{1, 2}, {3, 2}});
  ASSERT_TRUE(PWrite(file_, 3 * kBs, std::string(100, 'x')));  // block 3 torn, 1 not applied
  Crash();
  const std::string before = ReadFile(file_);
  Report r = MustRecover(Options(Mode::kVerify));
  const MappingReport& mr = r.mappings[0];
  EXPECT_EQ(mr.state, MappingState::kVerified);
  EXPECT_EQ(mr.blocks_verified, 2u);  // blocks 0 and 2
  EXPECT_EQ(mr.blocks_not_applied, 1u);
  EXPECT_EQ(mr.blocks_not_applied_or_torn, 1u);  // block 3 has a single pending version
  ASSERT_EQ(mr.findings.size(), 2u);
  EXPECT_EQ(mr.findings[0].block, 1u);
  EXPECT_EQ(mr.findings[0].cls, BlockClass::kNotApplied);
  EXPECT_EQ(mr.findings[0].matched_lsn, t1.lsn);
  EXPECT_TRUE(mr.findings[0].repairable);
  EXPECT_EQ(mr.findings[1].block, 3u);
  EXPECT_EQ(mr.findings[1].offset, 3u * kBs);
  EXPECT_EQ(mr.findings[1].lsn, t2.lsn);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kDataLoss);
  EXPECT_EQ(ReadFile(file_), before);
  // Replay repairs every one of them; verify of a drained journal then has nothing to say.
  EXPECT_EQ(ExitCodeOf(MustRecover(Options())), ExitCode::kOk);
  ExpectFileIs(committed_);
}

// ---- intent mode -------------------------------------------------------------------------

TEST_F(RecoveryTest, IntentModeClassifiesBlocksAndWritesNothing) {
  const uint64_t m = Register(Policy::kRelaxed, journal::Contents::kIntent);
  const Transaction t1 = Commit(m, {{0, 1}, {1, 1}, {2, 1}, {3, 1}});
  Apply(t1);
  const Transaction t2 = Commit(m, {{0, 2}, {1, 2}, {3, 2}, {4, 2}});
  Apply(t2, 1);                                                  // block 0: applied
  /* block 1: still t1's image */                                // not applied
  ASSERT_TRUE(PWrite(file_, 3 * kBs, Image(2, 3).substr(0, 512)));  // block 3: torn
  ASSERT_TRUE(PWrite(file_, 4 * kBs, Image(2, 4).substr(0, 512)));  // block 4: one version
  Crash();
  const std::string before = ReadFile(file_);
  Report r = MustRecover(Options());
  const MappingReport& mr = r.mappings[0];
  EXPECT_EQ(mr.state, MappingState::kReplayed);
  EXPECT_EQ(mr.txns_discarded, 2u);
  EXPECT_EQ(mr.txns_replayed, 0u);
  EXPECT_EQ(mr.blocks_written, 0u);
  EXPECT_EQ(mr.blocks_verified, 2u);  // blocks 0 and 2
  EXPECT_EQ(mr.blocks_not_applied, 1u);
  EXPECT_EQ(mr.blocks_torn, 1u);
  EXPECT_EQ(mr.blocks_not_applied_or_torn, 1u);
  ASSERT_EQ(mr.findings.size(), 3u);
  EXPECT_EQ(mr.findings[0].block, 1u);
  EXPECT_EQ(mr.findings[0].cls, BlockClass::kNotApplied);
  EXPECT_EQ(mr.findings[0].matched_lsn, t1.lsn);
  EXPECT_FALSE(mr.findings[0].repairable);
  EXPECT_EQ(mr.findings[1].block, 3u);
  EXPECT_EQ(mr.findings[1].cls, BlockClass::kTorn);
  EXPECT_EQ(mr.findings[1].expected_crc, crc32c::Value(Image(2, 3).data(), kBs));
  EXPECT_EQ(mr.findings[2].block, 4u);
  EXPECT_EQ(mr.findings[2].cls, BlockClass::kNotAppliedOrTorn);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kDataLoss);
  EXPECT_EQ(ReadFile(file_), before);
  EXPECT_TRUE(PendingAfterReopen().empty());  // marked applied: nothing to replay
}

// docs/journal_format.md §6 read per transaction would call t1's block "not applied or
// torn" because the file holds t2's newer image; recovery judges each block against its
// newest pending version, so an overwritten older version is not a finding.
TEST_F(RecoveryTest, IntentBlockOverwrittenByANewerPendingVersionIsNotAFinding) {
  const uint64_t m = Register(Policy::kRelaxed, journal::Contents::kIntent);
  Apply(Commit(m, {{0, 1}}));
  Apply(Commit(m, {{0, 2}}));
  Crash();
  Report r = MustRecover(Options());
  EXPECT_EQ(r.mappings[0].blocks_verified, 1u);
  EXPECT_TRUE(r.mappings[0].findings.empty());
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
}

TEST_F(RecoveryTest, DryRunOfIntentJournalPredictsExitOne) {
  const uint64_t m = Register(Policy::kRelaxed, journal::Contents::kIntent);
  Commit(m, {{0, 1}});
  Crash();
  Report r = MustRecover(Options(Mode::kDryRun));
  EXPECT_EQ(r.mappings[0].blocks_not_applied_or_torn, 1u);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kDataLoss);
  EXPECT_EQ(PendingAfterReopen().size(), 1u);
}

// ---- staged (uncommitted) blocks ---------------------------------------------------------

TEST_F(RecoveryTest, UncommittedStagedBlocksAreDiscardedAndReported) {
  const uint64_t m = Register();
  Commit(m, {{0, 1}});
  ASSERT_OK(journal_->Stage(m, 5, Image(9, 5)));
  ASSERT_OK(journal_->Stage(m, 6, Image(9, 6)));
  Crash();
  Report dry = MustRecover(Options(Mode::kDryRun));
  EXPECT_EQ(dry.staged_blocks, 2u);
  EXPECT_EQ(ExitCodeOf(dry), ExitCode::kDataLoss);
  Report r = MustRecover(Options());
  EXPECT_EQ(r.staged_blocks, 2u);
  EXPECT_EQ(r.mappings[0].staged_discarded, 2u);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kDataLoss);
  ExpectFileIs(committed_);  // block 5 and 6 keep their old bytes
  Report again = MustRecover(Options());
  EXPECT_EQ(again.staged_blocks, 0u);
  EXPECT_EQ(ExitCodeOf(again), ExitCode::kOk);
}

// ---- in-process use by a runtime ---------------------------------------------------------

TEST_F(RecoveryTest, InProcessRecoveryOfOneFileLeavesOtherMappingsAlone) {
  const std::string other = dir_.File("other");
  ASSERT_TRUE(WriteFile(other, Contents({}, kBlocks)));
  const uint64_t old_mapping = Register();
  Commit(old_mapping, {{3, 1}});
  Crash();
  OpenJournal();  // the runtime of the next job
  const uint64_t live = Register(Policy::kAtomic, journal::Contents::kData, other);
  FileState other_state;
  const Transaction t = Commit(live, {{4, 1}}, &other_state);  // in flight, not applied
  RecoverOptions o;
  ASSERT_OK_AND_ASSIGN(FileIdentity id, Env::Default()->IdentifyPath(file_));
  o.only_file = id;
  o.skip_mappings = {live};
  ASSERT_OK_AND_ASSIGN(Report r, Recover(*journal_, o));
  ASSERT_EQ(r.mappings.size(), 1u);
  EXPECT_EQ(r.mappings[0].mapping.id, old_mapping);
  EXPECT_TRUE(r.mappings[0].unregistered);
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  ExpectFileIs(committed_);
  EXPECT_EQ(journal_->PendingLsns(), std::vector<uint64_t>{t.lsn});
  EXPECT_EQ(journal_->Mappings().size(), 1u);
  EXPECT_EQ(ReadFile(other), Contents({}, kBlocks));  // not touched
}

TEST_F(RecoveryTest, TwoMappingsOfOneFileReplayInLsnOrderAcrossMappings) {
  const uint64_t a = Register();
  const uint64_t b = Register();
  Commit(a, {{0, 1}});
  Commit(b, {{0, 2}, {1, 2}});
  Commit(a, {{1, 3}});
  Crash();
  Report r = MustRecover(Options());
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  ExpectFileIs(committed_);
}

// ---- options -----------------------------------------------------------------------------

TEST(ParseRelocationTest, AcceptsAbsoluteOldEqualsNew) {
  ASSERT_OK_AND_ASSIGN(PathRelocation r, ParseRelocation("/mnt/a/=/mnt/b"));
  EXPECT_EQ(r.from, "/mnt/a");
  EXPECT_EQ(r.to, "/mnt/b");
  EXPECT_THAT(ParseRelocation("/mnt/a"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseRelocation("a=/b"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseRelocation("/a="), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ExitCodeTest, RefusalOutranksIoErrorOutranksDataLoss) {
  Report r;
  r.mappings.resize(3);
  r.mappings[0].blocks_torn = 1;
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kDataLoss);
  r.mappings[1].state = MappingState::kIoError;
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kIoError);
  r.mappings[2].state = MappingState::kRefused;
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kRefused);
  EXPECT_EQ(ExitCodeOf(WithErrno(absl::UnavailableError("held"), EBUSY)), ExitCode::kRefused);
  EXPECT_EQ(ExitCodeOf(WithErrno(absl::UnavailableError("eio"), EIO)), ExitCode::kIoError);
  EXPECT_EQ(ExitCodeOf(absl::DataLossError("x")), ExitCode::kRefused);
}

}  // namespace
}  // namespace umap::recovery

namespace umap::recovery {
namespace {

// A second run that maps the same file while the journal still holds the first run's
// committed, unapplied transaction: its own transactions are deleted once applied (the
// journal's deletion rule is per mapping), so a later replay of the first run's transaction
// would roll the block back. Recovering the file's old mappings first, in process, before
// registering the new mapping (what the runtime should do at map time), avoids it.
TEST_F(RecoveryTest, RecoverBeforeRegisteringKeepsANewerRunsWrites) {
  const uint64_t first_run = Register();
  Commit(first_run, {{0, 1}, {1, 1}});
  Crash();
  OpenJournal();  // the next run of the job, same journal directory
  RecoverOptions o;
  ASSERT_OK_AND_ASSIGN(FileIdentity id, Env::Default()->IdentifyPath(file_));
  o.only_file = id;
  ASSERT_OK_AND_ASSIGN(Report r, Recover(*journal_, o));
  EXPECT_EQ(ExitCodeOf(r), ExitCode::kOk);
  const uint64_t second_run = Register();
  const Transaction t = Commit(second_run, {{0, 2}});
  Apply(t);
  ASSERT_OK(journal_->MarkApplied(t.lsn));
  Crash();
  EXPECT_EQ(ExitCodeOf(MustRecover(Options())), ExitCode::kOk);
  ExpectFileIs(committed_);  // block 0 at version 2, block 1 at version 1
}

// The same without recovering first: the first run's transaction must not outlive the
// second run's newer one, or a later replay would roll block 0 back to version 1. (It did
// when the journal kept records per mapping; it now keeps them per file.)
TEST_F(RecoveryTest, NewerRunWithoutRecoveryIsNotRolledBackByALaterReplay) {
  const uint64_t first_run = Register();
  Commit(first_run, {{0, 1}});
  Crash();
  OpenJournal();
  const uint64_t second_run = Register();
  const Transaction t = Commit(second_run, {{0, 2}});
  Apply(t);
  ASSERT_OK(journal_->MarkApplied(t.lsn));  // deleted: no older txn of *its* mapping shares 0
  Crash();
  MustRecover(Options());
  ExpectFileIs(committed_);  // block 0 at version 2
}

}  // namespace
}  // namespace umap::recovery
