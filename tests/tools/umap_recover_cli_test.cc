// The umap-recover binary end to end: options, exit codes, messages and "writes nothing" for
// each refusal; journals made by recovery_kill_worker (a process that commits and dies).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "journal/format.h"
#include "journal/wal_damage.h"
#include "rocksdb/db.h"
#include "rocksdb/file_system.h"
#include "tests/recovery/kill_workload.h"
#include "tests/recovery/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "tests/tools/json_check.h"

namespace umap::tools {
namespace {

using ::recoverytest::Contents;
using ::recoverytest::FileState;
using ::recoverytest::ProcResult;
using ::recoverytest::ReadFile;
using ::recoverytest::StateAfter;
using ::recoverytest::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;

class UmapRecoverCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.File("data");
    journal_ = dir_.File("journal");
    ASSERT_TRUE(WriteFile(file_, Contents({}, recoverytest::kKillBlocks)));
  }

  // A journal with `rounds` committed, never applied transactions (WAL only).
  void Backlog(uint64_t rounds) {
    ProcResult w = recoverytest::Run(
        {UMAP_KILL_WORKER_BIN, "backlog", file_, journal_, std::to_string(rounds)}, dir_.path());
    ASSERT_EQ(w.exit_code, 0) << w.err;
  }
  // As Backlog, but the process dies after the last commit's WAL sync returned, before the
  // commit was acknowledged (recorded in UMAP-COMMITTED): the crash a torn tail comes from.
  void BacklogDyingBeforeLastAck(uint64_t rounds) {
    ProcResult w = recoverytest::Run(
        {UMAP_KILL_WORKER_BIN, "backlog", file_, journal_, std::to_string(rounds)}, dir_.path(),
        {"UMAP_CRASH_AT=journal.before_mark:" + std::to_string(rounds)});
    ASSERT_EQ(w.signal, SIGKILL) << w.exit_code << w.err;
  }

  ProcResult Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {UMAP_RECOVER_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    return recoverytest::Run(argv, dir_.path());
  }
  ProcResult Recover(std::vector<std::string> args = {}) {
    args.insert(args.begin(), {"--journal", journal_});
    return Cli(args);
  }

  // Runs fn on the journal's RocksDB directly (to damage it).
  template <typename Fn>
  void WithRawDb(Fn fn) {
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(rocksdb::Options(), journal_, &db);
    ASSERT_TRUE(s.ok()) << s.ToString();
    fn(db);
    delete db;
  }

  void ExpectFileIs(const FileState& state) {
    const std::string got = ReadFile(file_), want = Contents(state, recoverytest::kKillBlocks);
    EXPECT_TRUE(got == want) << "first difference: " << recoverytest::FirstDiff(got, want);
  }

  umap::testing::TempDir dir_;
  std::string file_, journal_;
};

TEST_F(UmapRecoverCliTest, HelpDescribesEveryOptionSubcommandAndExitCode) {
  ProcResult r = Cli({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* s : {"--journal", "--dry-run", "--json", "--force-path", "--accept-size",
                        "--only", "--verify-after", "--checkpoint-mib", "--progress",
                        "--missing-ok", "--quiet", "--salvage", "--version", "replay", "verify",
                        "status",
                        "Exit codes:", "\n  0  ", "\n  1  ", "\n  2  ", "\n  3  ",
                        "umap-recover.1.md"}) {
    EXPECT_THAT(r.out, HasSubstr(s));
  }
  EXPECT_EQ(Cli({"--version"}).exit_code, 0);
}

TEST_F(UmapRecoverCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Cli({}).exit_code, 2);
  EXPECT_EQ(Cli({"--journal", journal_, "--bogus"}).exit_code, 2);
  ProcResult bad = Recover({"--force-path", "relative=/x"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("absolute"));
}

TEST_F(UmapRecoverCliTest, MissingJournalIsRefusedUnlessMissingOk) {
  ProcResult r = Recover();
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("no journal at " + journal_));
  EXPECT_FALSE(std::filesystem::exists(journal_));
  ProcResult ok = Recover({"--missing-ok"});
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_THAT(ok.out, HasSubstr("no journal: nothing to do"));
}

TEST_F(UmapRecoverCliTest, ReplaysABacklogAndReportsIt) {
  Backlog(4);
  ProcResult r = Recover();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("4 transactions pending in 1 of 1 mapping"));
  EXPECT_THAT(r.out, HasSubstr("replayed 4 transactions (LSN 1..4)"));
  EXPECT_THAT(r.out, HasSubstr("result: exit 0: every committed transaction is in its file"));
  ExpectFileIs(StateAfter(4));
}

TEST_F(UmapRecoverCliTest, JsonReportIsOneValidDocument) {
  Backlog(3);
  ProcResult r = Recover({"--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(jsoncheck::IsValidJson(r.out)) << r.out;
  for (const char* key : {"\"exit_code\":0", "\"command\":\"replay\"", "\"state\":\"replayed\"",
                          "\"transactions\":{\"pending\":3,\"replayed\":3,\"discarded\":0}",
                          "\"torn\":0", "\"bytes\":{", "\"duration_us\":", "\"unregistered\":true"}) {
    EXPECT_THAT(r.out, HasSubstr(key));
  }
}

TEST_F(UmapRecoverCliTest, DryRunStatusAndVerifyWriteNothing) {
  Backlog(3);
  const std::string before = ReadFile(file_);
  ProcResult dry = Recover({"--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.out;
  EXPECT_THAT(dry.out, HasSubstr("would replay 3 transactions (LSN 1..3)"));
  ProcResult status = Recover({"status"});
  EXPECT_EQ(status.exit_code, 0) << status.out;
  EXPECT_THAT(status.out, HasSubstr("3 transactions pending (LSN 1..3)"));
  EXPECT_THAT(status.out, HasSubstr("recovery needed"));
  ProcResult verify = Cli({"verify", "--journal", journal_});  // options after the subcommand
  EXPECT_EQ(verify.exit_code, 1) << verify.out;
  EXPECT_THAT(verify.out, HasSubstr("differ"));
  EXPECT_THAT(verify.out, HasSubstr("replay rewrites it"));
  EXPECT_EQ(ReadFile(file_), before);
  EXPECT_EQ(Recover().exit_code, 0);
  ExpectFileIs(StateAfter(3));
  ProcResult clean = Recover({"status"});
  EXPECT_THAT(clean.out, HasSubstr("nothing to recover"));
}

TEST_F(UmapRecoverCliTest, ReplacedFileIsRefusedThenRelocatedWithForcePath) {
  Backlog(2);
  const std::string copy = dir_.File("copy");
  ASSERT_TRUE(WriteFile(copy, ReadFile(file_)));
  std::filesystem::rename(copy, file_);  // same path and bytes, another inode
  const std::string before = ReadFile(file_);
  ProcResult r = Recover();
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("REFUSED (identity_mismatch)"));
  EXPECT_THAT(r.out, HasSubstr("is not the journaled file"));
  EXPECT_EQ(ReadFile(file_), before);
  ProcResult forced = Recover({"--force-path", file_ + "=" + file_});
  EXPECT_EQ(forced.exit_code, 0) << forced.out;
  EXPECT_THAT(forced.out, HasSubstr("replayed 2 transactions"));
  ExpectFileIs(StateAfter(2));
}

TEST_F(UmapRecoverCliTest, MissingTargetFileIsRefused) {
  Backlog(2);
  std::filesystem::remove(file_);
  ProcResult r = Recover();
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("REFUSED (missing_file)"));
  EXPECT_THAT(r.out, HasSubstr(file_ + " is missing"));
  EXPECT_FALSE(std::filesystem::exists(file_));
}

TEST_F(UmapRecoverCliTest, ReadOnlyTargetIsRefused) {
  Backlog(2);
  // Root ignores mode bits; an immutable file is read-only even for root. The test files
  // live on the machine's ext4 (TMPDIR); a file system without chattr +i is a set-up error
  // that must show as a failure, never as a pass.
  ASSERT_EQ(std::system(("chattr +i '" + file_ + "' 2>/dev/null").c_str()), 0)
      << "chattr +i failed on " << file_ << ": set TMPDIR to an ext4/xfs directory";
  const std::string before = ReadFile(file_);
  ProcResult r = Recover();
  std::system(("chattr -i '" + file_ + "'").c_str());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("REFUSED (not_writable)"));
  EXPECT_THAT(r.out, HasSubstr("cannot open " + file_ + " for writing"));
  EXPECT_EQ(ReadFile(file_), before);
  EXPECT_EQ(Recover().exit_code, 0);
  ExpectFileIs(StateAfter(2));
}

// Images are checked as the replay streams them: a damaged one stops its file's replay
// there. LSN 1 rewrote blocks 3, 8 and 13; block 3's newest image is LSN 3's, after the
// damage, so only 8 and 13 reach the file.
// A small backlog is one replay round, read and checked whole before any of it is written:
// a damaged image in it leaves the file as it was.
TEST_F(UmapRecoverCliTest, DamagedImageRefusesItsRoundAndWritesNothingOfIt) {
  Backlog(4);
  WithRawDb([&](rocksdb::DB* db) {
    const uint64_t block = recoverytest::RoundBlocks(2)[0];
    std::string bad = journal::EncodeTxnPayload(recoverytest::Image(2, block));
    bad[100] ^= 0x40;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), journal::TxnPayloadKey(2, block), bad).ok());
  });
  ProcResult r = Recover();
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("REFUSED (corrupt_record)"));
  EXPECT_THAT(r.out, HasSubstr("LSN 2 is damaged"));
  EXPECT_THAT(r.out, HasSubstr("stopped before the replay round"));
  ExpectFileIs({});
  ProcResult again = Recover();  // stops at the same record, writes nothing
  EXPECT_EQ(again.exit_code, 2) << again.out;
  ExpectFileIs({});
}

TEST_F(UmapRecoverCliTest, NewerJournalFormatIsRefused) {
  Backlog(1);
  WithRawDb([&](rocksdb::DB* db) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), journal::FormatKey(),
                        journal::EncodeFormat({journal::kFormatVersion + 1}))
                    .ok());
  });
  ProcResult r = Recover();
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("newer than version"));
  ExpectFileIs({});
}

// The journal's WAL file with records (Backlog leaves exactly one).
std::string WalOf(const std::string& journal) {
  std::string wal;
  for (const auto& e : std::filesystem::directory_iterator(journal)) {
    if (e.path().extension() == ".log" && std::filesystem::file_size(e.path()) > 0) {
      wal = e.path().string();
    }
  }
  return wal;
}

// Where the records of `wal` end (zeros follow them up to the file's size).
uint64_t RecordsEnd(const std::string& wal) {
  absl::StatusOr<uint64_t> end = journal::WalRecordsEnd(*rocksdb::FileSystem::Default(), wal);
  EXPECT_TRUE(end.ok()) << end.status();
  return end.value_or(0);
}

// A WAL cut inside its last record, a commit whose process died before acknowledging it:
// RocksDB's point-in-time recovery drops it, and the committed prefix is replayed. Both
// ways a crash leaves it: the file cut there, or zeros after the cut (the WAL is written
// into zeros, and the file system kept its size but not the last record's bytes).
TEST_F(UmapRecoverCliTest, TruncatedWalTailReplaysTheCommittedPrefix) {
  for (bool zeros_after : {false, true}) {
    SCOPED_TRACE(zeros_after ? "zeros after the cut" : "file cut");
    journal_ = dir_.File(zeros_after ? "journal-zeros" : "journal-cut");
    ASSERT_TRUE(WriteFile(file_, Contents({}, recoverytest::kKillBlocks)));
    BacklogDyingBeforeLastAck(4);
    const std::string wal = WalOf(journal_);
    ASSERT_FALSE(wal.empty());
    const uint64_t cut = RecordsEnd(wal) - 100;
    const uint64_t size = std::filesystem::file_size(wal);
    std::filesystem::resize_file(wal, cut);
    if (zeros_after) std::filesystem::resize_file(wal, size);  // the new bytes read as zeros
    ProcResult r = Recover();
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("replayed 3 transactions (LSN 1..3)"));
    ExpectFileIs(StateAfter(3));
  }
}

// The same cut behind acknowledged commits (a torn copy, a disk that filled during a copy,
// an admin's truncate): RocksDB would open the prefix without a word, so every command
// refuses, naming the WAL file and the LSNs lost, and writes nothing; with zeros after the
// cut too. --salvage then replays what is left (exit 1), and the journal is whole again.
TEST_F(UmapRecoverCliTest, WalCutShortBehindAcknowledgedCommitsIsRefused) {
  for (bool zeros_after : {false, true}) {
    SCOPED_TRACE(zeros_after ? "zeros after the cut" : "file cut");
    journal_ = dir_.File(zeros_after ? "journal-zeros" : "journal-cut");
    ASSERT_TRUE(WriteFile(file_, Contents({}, recoverytest::kKillBlocks)));
    Backlog(8);
    const std::string wal = WalOf(journal_);
    ASSERT_FALSE(wal.empty());
    const uint64_t size = std::filesystem::file_size(wal);
    std::filesystem::resize_file(wal, RecordsEnd(wal) / 2);
    if (zeros_after) std::filesystem::resize_file(wal, size);
    const std::string wal_before = ReadFile(wal), file_before = ReadFile(file_);
    for (std::vector<std::string> cmd : {std::vector<std::string>{"status"},
                                         {"--dry-run"},
                                         {"replay"},
                                         {"--missing-ok", "replay"}}) {
      ProcResult r = Recover(cmd);
      EXPECT_EQ(r.exit_code, 2) << cmd.back() << ": " << r.out << r.err;
      EXPECT_THAT(r.out, HasSubstr("write-ahead log was cut short or lost records"));
      EXPECT_THAT(r.out, HasSubstr("the last acknowledged commit is LSN 8"));
      EXPECT_THAT(r.out, HasSubstr(journal_ + "/UMAP-COMMITTED"));
      EXPECT_THAT(r.out, HasSubstr("its newest write-ahead log, " + wal));
      EXPECT_THAT(r.out, HasSubstr("Acknowledged commits are lost: LSN "));
      EXPECT_THAT(r.out, HasSubstr("..8"));
      EXPECT_THAT(r.out, HasSubstr("--salvage"));
      EXPECT_EQ(ReadFile(wal), wal_before) << cmd.back();
      EXPECT_EQ(ReadFile(file_), file_before) << cmd.back();
    }
    ProcResult salvage = Recover({"--salvage", "replay"});
    EXPECT_EQ(salvage.exit_code, 1) << salvage.out << salvage.err;
    EXPECT_THAT(salvage.out, HasSubstr("salvaged: journal " + journal_ + " is damaged"));
    ProcResult again = Recover({"status"});
    EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
    EXPECT_THAT(again.out, HasSubstr("nothing to recover"));
  }
}

// The record of acknowledged commits itself deleted or zeroed (with a cut log, that would
// hide the loss): refused, whatever the log says.
TEST_F(UmapRecoverCliTest, ADeletedOrZeroedCommitRecordIsDamage) {
  for (bool zeroed : {false, true}) {
    SCOPED_TRACE(zeroed ? "zeroed" : "deleted");
    journal_ = dir_.File(zeroed ? "journal-zeroed" : "journal-deleted");
    Backlog(4);
    const std::string mark = journal_ + "/UMAP-COMMITTED";
    if (zeroed) {
      ASSERT_TRUE(WriteFile(mark, std::string(8192, '\0')));
    } else {
      std::filesystem::remove(mark);
    }
    ProcResult r = Recover({"--missing-ok"});
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_THAT(r.out,
                HasSubstr(zeroed ? "no intact record of the last acknowledged commit"
                                 : "the record of its last acknowledged commit, is missing"));
    ExpectFileIs({});
  }
}

// "--missing-ok" is "no journal was ever here", never "its files are damaged": with CURRENT
// deleted while the WAL holds commits, or with every RocksDB file gone while UMAP-COMMITTED
// says commits were acknowledged, it refuses (exit 2) and says why.
TEST_F(UmapRecoverCliTest, MissingOkRefusesAJournalWhoseFilesAreGone) {
  Backlog(8);
  std::filesystem::remove(journal_ + "/CURRENT");
  ProcResult r = Recover({"--missing-ok"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("its CURRENT file is missing while"));
  EXPECT_THAT(r.out, HasSubstr("--salvage"));
  ExpectFileIs({});
  for (const auto& e : std::filesystem::directory_iterator(journal_)) {
    const std::string name = e.path().filename().string();
    if (name != "UMAP-COMMITTED" && name != "UMAP-OWNER") std::filesystem::remove(e.path());
  }
  ProcResult gone = Recover({"--missing-ok"});
  EXPECT_EQ(gone.exit_code, 2) << gone.out << gone.err;
  EXPECT_THAT(gone.out, HasSubstr("records acknowledged commits up to LSN 8"));
  ExpectFileIs({});
}

// The salvage that the refusals recommend works for the damage they name: CURRENT deleted
// and a MANIFEST whose bytes are damaged are rebuilt from the table and log files, and every
// commit is replayed (exit 1: a salvage).
TEST_F(UmapRecoverCliTest, SalvageRebuildsAMissingCurrentOrADamagedManifest) {
  Backlog(8);
  std::filesystem::remove(journal_ + "/CURRENT");
  ProcResult r = Recover({"--salvage"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("replayed 8 transactions (LSN 1..8)"));
  ExpectFileIs(StateAfter(8));

  journal_ = dir_.File("journal-manifest");
  ASSERT_TRUE(WriteFile(file_, Contents({}, recoverytest::kKillBlocks)));
  Backlog(4);
  ASSERT_EQ(Recover({"--dry-run"}).exit_code, 0);  // moves the log into a table file
  std::string manifest;
  for (const auto& e : std::filesystem::directory_iterator(journal_)) {
    if (e.path().filename().string().rfind("MANIFEST-", 0) == 0) manifest = e.path().string();
  }
  ASSERT_FALSE(manifest.empty());
  std::string bytes = ReadFile(manifest);
  bytes[bytes.size() / 2] ^= 0x20;
  ASSERT_TRUE(WriteFile(manifest, bytes));
  ProcResult refused = Recover();
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_THAT(refused.out, HasSubstr("DATA_LOSS"));
  EXPECT_THAT(refused.out, HasSubstr("--salvage"));
  ExpectFileIs({});
  ProcResult salvaged = Recover({"--salvage"});
  EXPECT_EQ(salvaged.exit_code, 1) << salvaged.out << salvaged.err;
  EXPECT_THAT(salvaged.out, HasSubstr("replayed 4 transactions (LSN 1..4)"));
  ExpectFileIs(StateAfter(4));
  EXPECT_EQ(Recover().exit_code, 0);
}

// A CURRENT that names no MANIFEST (a byte changed: journal-damage chaos, seed 20261208
// iteration 4944) is damage (exit 2), not an I/O error to rerun (exit 3); --salvage rebuilds.
TEST_F(UmapRecoverCliTest, ACurrentThatNamesNoManifestIsDamage) {
  Backlog(4);
  std::string current = ReadFile(journal_ + "/CURRENT");
  current[10] = static_cast<char>(current[10] ^ 0x40);
  ASSERT_TRUE(WriteFile(journal_ + "/CURRENT", current));
  ProcResult r = Recover();
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("its CURRENT file"));
  EXPECT_THAT(r.out, HasSubstr("--salvage"));
  ExpectFileIs({});
  ProcResult salvaged = Recover({"--salvage"});
  EXPECT_EQ(salvaged.exit_code, 1) << salvaged.out << salvaged.err;
  ExpectFileIs(StateAfter(4));
}

// Real processes in both policies, with and without deferred file sync: umsyncs acknowledged,
// the writer SIGKILLed, its WAL cut in the middle. Recovery refuses (the deferred case holds
// acknowledged umsyncs that exist only in the journal) instead of "nothing to recover".
TEST_F(UmapRecoverCliTest, CutWalAfterAcknowledgedUmsyncsIsRefusedInEveryPolicy) {
  for (const char* policy : {"atomic", "relaxed"}) {
    for (const char* defer : {"0", "1"}) {
      SCOPED_TRACE(std::string(policy) + " defer_file_sync=" + defer);
      journal_ = dir_.File(std::string("journal-") + policy + defer);
      ASSERT_TRUE(WriteFile(file_, Contents({}, recoverytest::kKillBlocks)));
      const std::string out = dir_.File("worker.out"), err = dir_.File("worker.err");
      pid_t pid = recoverytest::Spawn({UMAP_KILL_WORKER_BIN, "hold", file_, journal_, "8", policy},
                                      {std::string("UMAP_DEFER_FILE_SYNC=") + defer}, out, err);
      ASSERT_GT(pid, 0);
      bool ready = false;
      for (int i = 0; i < 600 && !ready; ++i) {
        ready = recoverytest::Slurp(out).find("ready") != std::string::npos;
        if (!ready) ::usleep(50'000);
      }
      ::kill(pid, SIGKILL);
      ProcResult w = recoverytest::Wait(pid, out, err);
      ASSERT_TRUE(ready) << w.err;
      const std::string wal = WalOf(journal_);
      ASSERT_FALSE(wal.empty());
      std::filesystem::resize_file(wal, RecordsEnd(wal) / 2);
      const std::string file_before = ReadFile(file_);
      ProcResult status = Recover({"status"});
      EXPECT_EQ(status.exit_code, 2) << status.out << status.err;
      EXPECT_THAT(status.out, HasSubstr("Acknowledged commits are lost: LSN "));
      ProcResult replay = Recover({"--missing-ok"});
      EXPECT_EQ(replay.exit_code, 2) << replay.out << replay.err;
      EXPECT_EQ(ReadFile(file_), file_before);
    }
  }
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::string bytes = ReadFile(path);
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x10);
  ASSERT_TRUE(WriteFile(path, bytes));
}

// One byte flipped a third into the WAL of 20 acknowledged commits: RocksDB's point-in-time
// recovery alone would keep the first few and drop the rest without an error. Every command
// refuses, names the damage and the LSNs after it, and writes nothing (file and journal).
TEST_F(UmapRecoverCliTest, DamagedWalIsRefusedByEveryCommandAndNothingIsWritten) {
  Backlog(20);
  const std::string wal = WalOf(journal_);
  ASSERT_FALSE(wal.empty());
  FlipByte(wal, RecordsEnd(wal) / 3);
  const std::string wal_before = ReadFile(wal), file_before = ReadFile(file_);
  for (std::vector<std::string> cmd : {std::vector<std::string>{"status"}, {"verify"},
                                       {"--dry-run"}, {"replay"}, {"--json", "status"}}) {
    ProcResult r = Recover(cmd);
    EXPECT_EQ(r.exit_code, 2) << cmd.back() << ": " << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("DATA_LOSS"));
    EXPECT_THAT(r.out, HasSubstr("is damaged: " + std::filesystem::path(wal).filename().string() +
                                 " bytes "));
    EXPECT_THAT(r.out, HasSubstr("intact records follow them"));
    EXPECT_THAT(r.out, HasSubstr("..20)"));  // the LSNs after the damage, up to the last
    EXPECT_THAT(r.out, HasSubstr("acknowledged commits may be lost"));
    EXPECT_THAT(r.out, HasSubstr("--salvage"));
    EXPECT_EQ(ReadFile(wal), wal_before) << cmd.back();
    EXPECT_EQ(ReadFile(file_), file_before) << cmd.back();
  }
}

// --salvage keeps what can be read: the commits before the damage and those after the
// damaged 32 KiB block of the WAL. A preview (status) writes nothing; replay applies them,
// says what was damaged and exits 1; the journal is whole afterwards.
TEST_F(UmapRecoverCliTest, SalvageReplaysTheReadableCommitsAndSaysWhatWasDamaged) {
  Backlog(20);
  const std::string wal = WalOf(journal_);
  FlipByte(wal, RecordsEnd(wal) / 3);
  const std::string wal_before = ReadFile(wal), file_before = ReadFile(file_);
  ProcResult preview = Recover({"--salvage", "status"});
  EXPECT_EQ(preview.exit_code, 1) << preview.out << preview.err;
  EXPECT_THAT(preview.out, HasSubstr("salvaged: journal " + journal_ + " is damaged"));
  EXPECT_THAT(preview.out, HasSubstr("journal damaged: a salvage keeps what is listed above"));
  EXPECT_EQ(ReadFile(wal), wal_before);
  EXPECT_EQ(ReadFile(file_), file_before);

  ProcResult r = Recover({"--salvage", "replay"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("salvaged: journal " + journal_ + " is damaged"));
  EXPECT_THAT(r.out, HasSubstr("replayed, but data was discarded"));
  // Round 20 is in the last WAL block, far from the damage: its blocks hold version 20.
  const std::string after = ReadFile(file_);
  for (uint64_t b : recoverytest::RoundBlocks(20)) {
    EXPECT_EQ(after.substr(b * 4096, 4096), recoverytest::Image(20, b)) << "block " << b;
  }
  ProcResult again = Recover();
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_EQ(ReadFile(file_), after);
}

// A damaged table file (the backlog moved into it by an open) is RocksDB's own refusal.
TEST_F(UmapRecoverCliTest, DamagedTableFileIsRefused) {
  Backlog(4);
  ASSERT_EQ(Recover({"--dry-run"}).exit_code, 0);  // the open moves the log into a table
  std::string sst;
  for (const auto& e : std::filesystem::directory_iterator(journal_)) {
    if (e.path().extension() == ".sst") sst = e.path().string();
  }
  ASSERT_FALSE(sst.empty());
  FlipByte(sst, 100);  // inside the first data block
  ProcResult r = Recover();
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("DATA_LOSS"));
  EXPECT_THAT(r.out, HasSubstr("checksum mismatch"));
  ExpectFileIs({});
}

TEST_F(UmapRecoverCliTest, OnlySelectsOneFile) {
  Backlog(2);
  ProcResult other = Recover({"--only", dir_.File("elsewhere")});
  EXPECT_EQ(other.exit_code, 0);
  EXPECT_THAT(other.out, HasSubstr("2 transactions pending in 0 of 0 mappings"));
  ExpectFileIs({});
  ProcResult mine = Recover({"--only", file_});
  EXPECT_EQ(mine.exit_code, 0);
  ExpectFileIs(StateAfter(2));
}

TEST_F(UmapRecoverCliTest, ProgressLinesWhenNotATerminalAndQuietOnSuccess) {
  Backlog(2);
  ProcResult r = Recover({"--progress", "lines", "--quiet"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("umap-recover: scan 100% 2/2 transactions"));
  EXPECT_THAT(r.err, HasSubstr("umap-recover: replay 100%"));
  EXPECT_THAT(r.err, Not(HasSubstr("\r")));
}

}  // namespace
}  // namespace umap::tools
