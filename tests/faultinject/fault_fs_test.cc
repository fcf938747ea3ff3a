#include "faultinject/fault_fs.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/options.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace rocksdb {
// Readable gtest output for statuses.
void PrintTo(const Status& s, std::ostream* os) { *os << s.ToString(); }
void PrintTo(const IOStatus& s, std::ostream* os) { *os << s.ToString(); }
}  // namespace rocksdb

namespace umap::faultinject {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::umap::testing::StatusIs;

// rocksdb::Status assertions: the exact code and subcode.
MATCHER(RocksOk, "is OK") {
  *result_listener << arg.ToString();
  return arg.ok();
}
MATCHER_P2(RocksIs, code, subcode, "has the given code and subcode") {
  *result_listener << arg.ToString();
  return arg.code() == code && arg.subcode() == subcode;
}
const auto kIOError = rocksdb::Status::kIOError;
const auto kNoSub = rocksdb::Status::kNone;
const auto kNoSpaceSub = rocksdb::Status::kNoSpace;

class FaultFsTest : public ::testing::Test {
 protected:
  FaultFsTest()
      : fs_(std::make_shared<FaultFs>(rocksdb::FileSystem::Default())),
        env_(rocksdb::NewCompositeEnv(fs_)) {}
  ~FaultFsTest() override { db_.reset(); }

  // ---- A real DB on the fault file system ----

  rocksdb::Options DbOptions() {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.env = env_.get();
    o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
    o.max_background_jobs = 2;
    return o;
  }

  rocksdb::Status OpenDb() {
    db_.reset();
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(DbOptions(), dbname_, &db);
    db_.reset(db);
    return s;
  }

  rocksdb::Status Put(const std::string& k, const std::string& v, bool sync) {
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    return db_->Put(wo, k, v);
  }

  // The value, "NOT_FOUND", or the error.
  std::string Get(const std::string& k) {
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), k, &v);
    if (s.IsNotFound()) return "NOT_FOUND";
    return s.ok() ? v : s.ToString();
  }

  // Cut the power under an open DB, close it, drop what did not survive, reboot.
  void CrashDb(const FsDropOptions& drop = FsDropOptions::DropAll()) {
    fs_->SimulatePowerCut();
    db_.reset();  // every write it attempts while closing is refused
    ASSERT_OK(fs_->DropUnsyncedData(drop));
    fs_->Restart();
  }

  std::string WalPath() {
    std::vector<std::string> children;
    EXPECT_TRUE(fs_->GetChildren(dbname_, rocksdb::IOOptions(), &children, nullptr).ok());
    std::sort(children.begin(), children.end());
    std::string wal;
    for (const auto& c : children) {
      if (ClassifyFile(c) == FileClass::kWal) wal = dbname_ + "/" + c;
    }
    return wal;
  }

  // ---- Raw files ----

  std::unique_ptr<rocksdb::FSWritableFile> Create(const std::string& path) {
    std::unique_ptr<rocksdb::FSWritableFile> f;
    EXPECT_THAT(fs_->NewWritableFile(path, rocksdb::FileOptions(), &f, nullptr), RocksOk());
    return f;
  }
  rocksdb::IOStatus Append(rocksdb::FSWritableFile* f, const std::string& data) {
    return f->Append(data, rocksdb::IOOptions(), nullptr);
  }
  rocksdb::IOStatus SyncDir(const std::string& dir) {
    std::unique_ptr<rocksdb::FSDirectory> d;
    rocksdb::IOStatus s = fs_->NewDirectory(dir, rocksdb::IOOptions(), &d, nullptr);
    if (!s.ok()) return s;
    return d->Fsync(rocksdb::IOOptions(), nullptr);
  }
  // Contents through the base file system, or "MISSING".
  std::string Read(const std::string& path) {
    std::string data;
    rocksdb::IOStatus s = rocksdb::ReadFileToString(fs_->target(), path, &data);
    return s.ok() ? data : "MISSING";
  }
  void Crash(const FsDropOptions& drop = FsDropOptions::DropAll()) {
    fs_->SimulatePowerCut();
    ASSERT_OK(fs_->DropUnsyncedData(drop));
    fs_->Restart();
  }

  ::umap::testing::TempDir dir_;
  const std::string dbname_ = dir_.File("db");
  std::shared_ptr<FaultFs> fs_;
  std::unique_ptr<rocksdb::Env> env_;
  std::unique_ptr<rocksdb::DB> db_;
};

// ---- (a) sync decides what survives a power cut ------------------------------------------

TEST_F(FaultFsTest, SyncedPutSurvivesAPowerCut) {
  ASSERT_THAT(OpenDb(), RocksOk());
  ASSERT_THAT(Put("k", "v", /*sync=*/true), RocksOk());
  CrashDb();
  EXPECT_EQ(fs_->counters().files_deleted, 0u) << "RocksDB synced the WAL's directory";
  ASSERT_THAT(OpenDb(), RocksOk());
  EXPECT_EQ(Get("k"), "v");
}

TEST_F(FaultFsTest, UnsyncedPutVanishesAtAPowerCutAndTheDbStillOpens) {
  ASSERT_THAT(OpenDb(), RocksOk());
  ASSERT_THAT(Put("synced", "1", /*sync=*/true), RocksOk());
  ASSERT_THAT(Put("unsynced", "2", /*sync=*/false), RocksOk());
  EXPECT_EQ(Get("unsynced"), "2");
  EXPECT_GT(fs_->UnsyncedBytes(WalPath()), 0u);
  CrashDb();
  EXPECT_GT(fs_->counters().bytes_dropped, 0u);
  ASSERT_THAT(OpenDb(), RocksOk()) << "point-in-time recovery opens after the drop";
  EXPECT_EQ(Get("synced"), "1");
  EXPECT_EQ(Get("unsynced"), "NOT_FOUND");
}

TEST_F(FaultFsTest, ConcurrentSyncedWritersAllSurvive) {
  ASSERT_THAT(OpenDb(), RocksOk());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        EXPECT_THAT(Put(absl::StrCat("t", t, "-", i), "v", /*sync=*/true), RocksOk());
      }
    });
  }
  for (auto& t : threads) t.join();
  CrashDb();
  ASSERT_THAT(OpenDb(), RocksOk());
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 50; ++i) EXPECT_EQ(Get(absl::StrCat("t", t, "-", i)), "v");
  }
}

TEST_F(FaultFsTest, DroppingFilesNoDirectorySyncCoveredKeepsTheDbOpenable) {
  ASSERT_THAT(OpenDb(), RocksOk());
  ASSERT_THAT(Put("a", "1", /*sync=*/true), RocksOk());
  ASSERT_THAT(db_->Flush(rocksdb::FlushOptions()), RocksOk());  // new SST, MANIFEST edits
  ASSERT_THAT(Put("b", "2", /*sync=*/true), RocksOk());
  CrashDb();
  ASSERT_THAT(OpenDb(), RocksOk());
  EXPECT_EQ(Get("a"), "1");
  EXPECT_EQ(Get("b"), "2");
}

// ---- (b) injected NoSpace / IOError on the WAL --------------------------------------------
// Debian's RocksDB asserts on some writes after a WAL error: after one, the tests only
// close and reopen (as the journal must).

TEST_F(FaultFsTest, NoSpaceOnWalAppendFailsThePutWithNoSpace) {
  ASSERT_THAT(OpenDb(), RocksOk());
  ASSERT_THAT(Put("a", "1", /*sync=*/true), RocksOk());
  ASSERT_OK(fs_->FailNext(FsOp::kAppend, 1, FsFault::NoSpace().Sticky().OnlyFor(FileClass::kWal)));
  EXPECT_THAT(Put("b", "2", /*sync=*/true), RocksIs(kIOError, kNoSpaceSub));
  EXPECT_GE(fs_->fired(FsOp::kAppend), 1u);
  db_.reset();
  fs_->ClearAll();
  ASSERT_THAT(OpenDb(), RocksOk());
  EXPECT_EQ(Get("a"), "1");
  EXPECT_EQ(Get("b"), "NOT_FOUND") << "no byte of the failed record reached the WAL";
}

TEST_F(FaultFsTest, NoSpaceOnWalSyncFailsThePutAndItsDataIsNotDurable) {
  ASSERT_THAT(OpenDb(), RocksOk());
  ASSERT_THAT(Put("a", "1", /*sync=*/true), RocksOk());
  ASSERT_OK(fs_->FailNext(FsOp::kSync, 1, FsFault::NoSpace().OnlyFor(FileClass::kWal)));
  EXPECT_THAT(Put("b", "2", /*sync=*/true), RocksIs(kIOError, kNoSpaceSub));
  EXPECT_EQ(fs_->fired(FsOp::kSync), 1u);
  EXPECT_GT(fs_->UnsyncedBytes(WalPath()), 0u);
  CrashDb();  // the failed commit is indeterminate; a power cut makes it absent
  ASSERT_THAT(OpenDb(), RocksOk());
  EXPECT_EQ(Get("a"), "1");
  EXPECT_EQ(Get("b"), "NOT_FOUND");
}

TEST_F(FaultFsTest, IOErrorOnWalSyncFailsThePutWithIOError) {
  ASSERT_THAT(OpenDb(), RocksOk());
  ASSERT_THAT(Put("a", "1", /*sync=*/true), RocksOk());
  ASSERT_OK(fs_->FailNext(FsOp::kSync, 1, FsFault::IOError().OnlyFor(FileClass::kWal)));
  EXPECT_THAT(Put("b", "2", /*sync=*/true), RocksIs(kIOError, kNoSub));
  db_.reset();
  ASSERT_THAT(OpenDb(), RocksOk());
  EXPECT_EQ(Get("a"), "1");
  std::string b = Get("b");
  EXPECT_TRUE(b == "2" || b == "NOT_FOUND") << "an errored commit is indeterminate: " << b;
}

// A WAL sync that loses its pages (Linux after a writeback error): the record stays
// readable, so a reopen before any power cut recovers it and flushes it to a synced table
// (what the journal's reopen-after-error relies on); without that reopen a power cut
// loses it, even though a later sync of the same WAL succeeded.
TEST_F(FaultFsTest, WalSyncThatLosesDataIsRecoveredByAReopenBeforeThePowerCut) {
  ASSERT_THAT(OpenDb(), RocksOk());
  ASSERT_THAT(Put("a", "1", /*sync=*/true), RocksOk());
  ASSERT_OK(fs_->FailNext(FsOp::kSync, 1, FsFault::IOError().LosesData().OnlyFor(FileClass::kWal)));
  EXPECT_THAT(Put("b", "2", /*sync=*/true), RocksIs(kIOError, kNoSub));
  EXPECT_GT(fs_->counters().bytes_lost_by_syncs, 0u);
  EXPECT_EQ(fs_->UnsyncedBytes(WalPath()), 0u) << "the pages count as clean";
  db_.reset();
  ASSERT_THAT(OpenDb(), RocksOk());
  EXPECT_EQ(Get("b"), "2") << "read back from the WAL's (page-cache) bytes";
  CrashDb();
  ASSERT_THAT(OpenDb(), RocksOk());
  EXPECT_EQ(Get("a"), "1");
  EXPECT_EQ(Get("b"), "2") << "the reopen flushed it to a synced table";
}

// ---- (c) a torn WAL tail recovers a prefix -------------------------------------------------

TEST_F(FaultFsTest, TornWalTailRecoversAPrefixOfTheWrites) {
  const int kWrites = 40;
  std::set<int> prefixes;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    for (bool garble : {false, true}) {
      SCOPED_TRACE(absl::StrCat("seed ", seed, " garble ", garble));
      db_.reset();
      fs_ = std::make_shared<FaultFs>(rocksdb::FileSystem::Default());
      env_ = rocksdb::NewCompositeEnv(fs_);
      ASSERT_THAT(rocksdb::DestroyDB(dbname_, DbOptions()), RocksOk());
      ASSERT_THAT(OpenDb(), RocksOk());
      ASSERT_THAT(Put("marker", "synced", /*sync=*/true), RocksOk());
      for (int i = 0; i < kWrites; ++i) {
        ASSERT_THAT(Put(absl::StrCat("k", 100 + i), std::string(300, 'a' + i % 26), false),
                    RocksOk());
      }
      CrashDb(FsDropOptions::Tear(seed, garble));
      ASSERT_THAT(OpenDb(), RocksOk());
      EXPECT_EQ(Get("marker"), "synced");
      int present = 0;
      while (present < kWrites && Get(absl::StrCat("k", 100 + present)) != "NOT_FOUND") {
        EXPECT_EQ(Get(absl::StrCat("k", 100 + present)), std::string(300, 'a' + present % 26));
        ++present;
      }
      for (int i = present; i < kWrites; ++i) {
        EXPECT_EQ(Get(absl::StrCat("k", 100 + i)), "NOT_FOUND") << "not a prefix at " << i;
      }
      prefixes.insert(present);
    }
  }
  EXPECT_GE(prefixes.size(), 4u) << "the cuts land at different records";
  EXPECT_TRUE(std::any_of(prefixes.begin(), prefixes.end(),
                          [&](int p) { return p > 0 && p < kWrites; }));
}

// ---- Raw file system behaviour ---------------------------------------------------------------

TEST_F(FaultFsTest, DropTruncatesEachFileToItsLastSyncedSize) {
  std::string path = dir_.File("000007.log");
  auto f = Create(path);
  ASSERT_THAT(Append(f.get(), std::string(100, 's')), RocksOk());
  ASSERT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
  ASSERT_THAT(SyncDir(dir_.path()), RocksOk());
  ASSERT_THAT(Append(f.get(), std::string(50, 'u')), RocksOk());
  EXPECT_EQ(fs_->UnsyncedBytes(path), 50u);
  f.reset();
  Crash();
  EXPECT_EQ(Read(path), std::string(100, 's'));
  EXPECT_EQ(fs_->counters().files_truncated, 1u);
  EXPECT_EQ(fs_->counters().bytes_dropped, 50u);
}

// A file extended with written zeros ahead of its appends (journal/wal_zero_fill.h): once a
// sync covered the extension, a power cut keeps the size, and the unsynced appends over the
// zeros read as zeros again; an extension no sync covered goes with the unsynced appends.
TEST_F(FaultFsTest, ASyncedExtensionKeepsItsSizeAndItsZerosUnderUnsyncedAppends) {
  for (bool synced_extension : {true, false}) {
    SCOPED_TRACE(synced_extension ? "synced extension" : "unsynced extension");
    std::string path = dir_.File(synced_extension ? "000007.log" : "000008.log");
    auto f = Create(path);
    ASSERT_THAT(SyncDir(dir_.path()), RocksOk());
    ASSERT_THAT(Append(f.get(), std::string(100, 's')), RocksOk());
    ASSERT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
    std::unique_ptr<rocksdb::FSRandomRWFile> rw;
    ASSERT_THAT(fs_->NewRandomRWFile(path, rocksdb::FileOptions(), &rw, nullptr), RocksOk());
    ASSERT_THAT(rw->Write(100, std::string(412, '\0'), rocksdb::IOOptions(), nullptr), RocksOk());
    if (synced_extension) {
      ASSERT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
    }
    ASSERT_THAT(Append(f.get(), std::string(50, 'u')), RocksOk());
    EXPECT_EQ(Read(path).size(), 512u);
    f.reset();
    rw.reset();
    Crash();
    EXPECT_EQ(Read(path), synced_extension ? std::string(100, 's') + std::string(412, '\0')
                                           : std::string(100, 's'));
  }
}

TEST_F(FaultFsTest, WritesThroughARandomRWFileAreInjectedAndRefusedAfterThePowerCut) {
  std::string path = dir_.File("000007.log");
  auto f = Create(path);
  std::unique_ptr<rocksdb::FSRandomRWFile> rw;
  ASSERT_THAT(fs_->NewRandomRWFile(path, rocksdb::FileOptions(), &rw, nullptr), RocksOk());
  ASSERT_OK(fs_->FailNext(FsOp::kWrite, 1, FsFault::NoSpace().OnlyFor(FileClass::kWal)));
  EXPECT_THAT(rw->Write(0, std::string(10, '\0'), rocksdb::IOOptions(), nullptr),
              RocksIs(kIOError, kNoSpaceSub));
  EXPECT_EQ(fs_->fired(FsOp::kWrite), 1u);
  EXPECT_THAT(rw->Write(0, std::string(10, '\0'), rocksdb::IOOptions(), nullptr), RocksOk());
  fs_->SimulatePowerCut();
  EXPECT_THAT(rw->Write(10, std::string(10, '\0'), rocksdb::IOOptions(), nullptr),
              RocksIs(kIOError, kNoSub));
  EXPECT_EQ(Read(path).size(), 10u) << "the refused write did not land";
  f.reset();
  rw.reset();
  ASSERT_OK(fs_->DropUnsyncedData(FsDropOptions::DropAll()));
  fs_->Restart();
}

TEST_F(FaultFsTest, SyncThatLosesDataZeroesItsBytesEvenUnderLaterSyncedOnes) {
  std::string path = dir_.File("000007.log");
  auto f = Create(path);
  ASSERT_THAT(SyncDir(dir_.path()), RocksOk());
  ASSERT_THAT(Append(f.get(), std::string(100, 's')), RocksOk());
  ASSERT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
  ASSERT_THAT(Append(f.get(), std::string(50, 'l')), RocksOk());
  ASSERT_OK(fs_->FailNext(FsOp::kSync, 1, FsFault::IOError().LosesData()));
  EXPECT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksIs(kIOError, kNoSub));
  EXPECT_EQ(fs_->UnsyncedBytes(path), 0u) << "the failed sync marked the pages clean";
  EXPECT_EQ(Read(path), std::string(100, 's') + std::string(50, 'l')) << "still readable";
  ASSERT_THAT(Append(f.get(), std::string(30, 'n')), RocksOk());
  ASSERT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk()) << "a later sync succeeds";
  f.reset();
  Crash();
  EXPECT_EQ(Read(path), std::string(100, 's') + std::string(50, '\0') + std::string(30, 'n'));
  EXPECT_EQ(fs_->counters().bytes_lost_by_syncs, 50u);
  EXPECT_EQ(fs_->counters().bytes_zeroed, 50u);
}

TEST_F(FaultFsTest, LostBytesCutOffByThePowerCutAreNotZeroedTwice) {
  std::string path = dir_.File("000009.log");
  auto f = Create(path);
  ASSERT_THAT(SyncDir(dir_.path()), RocksOk());
  ASSERT_THAT(Append(f.get(), std::string(10, 's')), RocksOk());
  ASSERT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
  ASSERT_THAT(Append(f.get(), std::string(20, 'l')), RocksOk());
  ASSERT_OK(fs_->FailNext(FsOp::kSync, 1, FsFault::IOError().LosesData()));
  EXPECT_FALSE(f->Sync(rocksdb::IOOptions(), nullptr).ok());
  ASSERT_THAT(Append(f.get(), std::string(5, 'u')), RocksOk());  // never synced
  f.reset();
  Crash();
  EXPECT_EQ(Read(path), std::string(10, 's') + std::string(20, '\0'))
      << "the unsynced tail is cut, the lost range below it zeroed";
  EXPECT_EQ(fs_->counters().bytes_dropped, 5u);
}

TEST_F(FaultFsTest, FsyncCountsAsASyncToo) {
  std::string path = dir_.File("MANIFEST-000001");
  auto f = Create(path);
  ASSERT_THAT(SyncDir(dir_.path()), RocksOk());
  ASSERT_THAT(Append(f.get(), "edit"), RocksOk());
  ASSERT_THAT(f->Fsync(rocksdb::IOOptions(), nullptr), RocksOk());
  EXPECT_EQ(fs_->UnsyncedBytes(path), 0u);
  Crash();
  EXPECT_EQ(Read(path), "edit");
}

TEST_F(FaultFsTest, TearCutsTheUnsyncedTailAtASectorBoundary) {
  std::vector<size_t> sizes;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    std::string path = dir_.File(absl::StrCat(seed, ".log"));
    fs_->Restart();
    auto f = Create(path);
    ASSERT_THAT(Append(f.get(), std::string(700, 's')), RocksOk());
    ASSERT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
    ASSERT_THAT(SyncDir(dir_.path()), RocksOk());
    ASSERT_THAT(Append(f.get(), std::string(3000, 'u')), RocksOk());  // 700..3700
    f.reset();
    Crash(FsDropOptions::Tear(seed));
    std::string got = Read(path);
    ASSERT_GE(got.size(), 700u);
    EXPECT_TRUE(got.size() == 700 || got.size() == 3700 || got.size() % 512 == 0) << got.size();
    EXPECT_EQ(got, (std::string(700, 's') + std::string(3000, 'u')).substr(0, got.size()));
    sizes.push_back(got.size());
  }
  std::sort(sizes.begin(), sizes.end());
  EXPECT_GE(std::unique(sizes.begin(), sizes.end()) - sizes.begin(), 3);
}

TEST_F(FaultFsTest, TearWithGarbleWritesOneSectorOfJunkAfterTheCut) {
  bool saw_junk = false;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(seed);
    std::string path = dir_.File(absl::StrCat(100 + seed, ".log"));
    auto f = Create(path);
    ASSERT_THAT(SyncDir(dir_.path()), RocksOk());
    ASSERT_THAT(Append(f.get(), std::string(4096, 'u')), RocksOk());
    f.reset();
    Crash(FsDropOptions::Tear(seed, /*garble=*/true));
    std::string got = Read(path);
    size_t clean = got.find_first_not_of('u');
    if (clean == std::string::npos) {
      EXPECT_EQ(got.size(), 4096u) << "only an untorn tail has no junk";
      continue;
    }
    EXPECT_EQ(clean % 512, 0u) << "the kept prefix ends at a sector boundary";
    EXPECT_EQ(got.size(), std::min<size_t>(4096, clean + 512)) << "then one junk sector";
    saw_junk = true;
  }
  EXPECT_TRUE(saw_junk);
}

TEST_F(FaultFsTest, FilesCreatedSinceTheLastDirFsyncAreDeleted) {
  std::string kept = dir_.File("kept.sst");
  std::string lost = dir_.File("lost.sst");
  auto f = Create(kept);
  ASSERT_THAT(Append(f.get(), "k"), RocksOk());
  ASSERT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
  ASSERT_THAT(SyncDir(dir_.path() + "/"), RocksOk()) << "a trailing slash names the same dir";
  auto g = Create(lost);
  ASSERT_THAT(Append(g.get(), "l"), RocksOk());
  ASSERT_THAT(g->Sync(rocksdb::IOOptions(), nullptr), RocksOk()) << "data synced, entry not";
  EXPECT_THAT(fs_->UnsyncedDirEntries(dir_.path()), ElementsAre("lost.sst"));
  f.reset();
  g.reset();
  Crash();
  EXPECT_EQ(Read(kept), "k");
  EXPECT_EQ(Read(lost), "MISSING");
  EXPECT_EQ(fs_->counters().files_deleted, 1u);
}

TEST_F(FaultFsTest, RenameOverAFileIsUndoneWithoutADirFsync) {
  std::string current = dir_.File("CURRENT");
  std::string tmp = dir_.File("000001.dbtmp");
  auto f = Create(current);
  ASSERT_THAT(Append(f.get(), "old"), RocksOk());
  ASSERT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
  ASSERT_THAT(SyncDir(dir_.path()), RocksOk());
  auto g = Create(tmp);
  ASSERT_THAT(Append(g.get(), "new"), RocksOk());
  ASSERT_THAT(g->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
  g.reset();
  ASSERT_THAT(fs_->RenameFile(tmp, current, rocksdb::IOOptions(), nullptr), RocksOk());
  EXPECT_EQ(Read(current), "new");
  EXPECT_THAT(fs_->UnsyncedDirEntries(dir_.path()), ElementsAre("CURRENT"));
  Crash();
  EXPECT_EQ(Read(current), "old");
  EXPECT_EQ(Read(tmp), "MISSING");
  EXPECT_EQ(fs_->counters().files_restored, 1u);
}

TEST_F(FaultFsTest, RenameFollowedByADirFsyncIsDurable) {
  std::string current = dir_.File("CURRENT");
  std::string tmp = dir_.File("000001.dbtmp");
  auto g = Create(tmp);
  ASSERT_THAT(Append(g.get(), "new"), RocksOk());
  ASSERT_THAT(g->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
  g.reset();
  ASSERT_THAT(fs_->RenameFile(tmp, current, rocksdb::IOOptions(), nullptr), RocksOk());
  ASSERT_THAT(SyncDir(dir_.path()), RocksOk());
  EXPECT_THAT(fs_->UnsyncedDirEntries(dir_.path()), IsEmpty());
  Crash();
  EXPECT_EQ(Read(current), "new");
}

TEST_F(FaultFsTest, PowerCutRefusesEveryWriteOpenSyncAndRename) {
  std::string path = dir_.File("000003.log");
  auto f = Create(path);
  fs_->SimulatePowerCut();
  EXPECT_TRUE(fs_->frozen());
  std::unique_ptr<rocksdb::FSWritableFile> g;
  std::unique_ptr<rocksdb::FSSequentialFile> r;
  std::unique_ptr<rocksdb::FSDirectory> d;
  const rocksdb::IOOptions io;
  std::vector<rocksdb::IOStatus> results = {
      Append(f.get(), "x"),
      f->Sync(io, nullptr),
      f->Fsync(io, nullptr),
      f->Flush(io, nullptr),
      f->Close(io, nullptr),
      fs_->NewWritableFile(dir_.File("n"), rocksdb::FileOptions(), &g, nullptr),
      fs_->NewSequentialFile(path, rocksdb::FileOptions(), &r, nullptr),
      fs_->NewDirectory(dir_.path(), io, &d, nullptr),
      fs_->RenameFile(path, dir_.File("m"), io, nullptr),
      fs_->DeleteFile(path, io, nullptr),
  };
  for (const auto& s : results) EXPECT_THAT(s, RocksIs(kIOError, kNoSub));
  EXPECT_EQ(fs_->counters().refused_after_power_cut, results.size());
  for (int i = 0; i < kNumFsOps; ++i) EXPECT_EQ(fs_->counters().fired[i], 0u);
}

TEST_F(FaultFsTest, DropBeforeAPowerCutIsFailedPrecondition) {
  EXPECT_THAT(fs_->DropUnsyncedData(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

// ---- Arming ---------------------------------------------------------------------------------

TEST_F(FaultFsTest, TransientFaultFailsTheNextNCallsOnly) {
  auto f = Create(dir_.File("000004.log"));
  ASSERT_OK(fs_->FailNext(FsOp::kAppend, 2, FsFault::IOError()));
  EXPECT_THAT(Append(f.get(), "a"), RocksIs(kIOError, kNoSub));
  EXPECT_THAT(Append(f.get(), "a"), RocksIs(kIOError, kNoSub));
  EXPECT_THAT(Append(f.get(), "a"), RocksOk());
  EXPECT_EQ(fs_->fired(FsOp::kAppend), 2u);
  EXPECT_EQ(fs_->UnsyncedBytes(dir_.File("000004.log")), 1u) << "failed appends add nothing";
}

TEST_F(FaultFsTest, StickyFaultFailsEveryLaterCallUntilCleared) {
  auto f = Create(dir_.File("000004.log"));
  ASSERT_OK(fs_->FailNext(FsOp::kSync, 1, FsFault::NoSpace().Sticky()));
  for (int i = 0; i < 5; ++i) {
    EXPECT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksIs(kIOError, kNoSpaceSub));
  }
  fs_->Clear(FsOp::kSync);
  EXPECT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
  EXPECT_EQ(fs_->fired(FsOp::kSync), 5u);
}

TEST_F(FaultFsTest, SkippedSyncsReturnOkButMakeNothingDurable) {
  std::string path = dir_.File("000004.log");
  auto f = Create(path);
  ASSERT_THAT(Append(f.get(), std::string(10, 's')), RocksOk());
  ASSERT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
  ASSERT_THAT(SyncDir(dir_.path()), RocksOk());
  fs_->SkipSyncs(true);
  ASSERT_THAT(Append(f.get(), std::string(5, 'u')), RocksOk());
  EXPECT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksOk());
  EXPECT_THAT(f->Fsync(rocksdb::IOOptions(), nullptr), RocksOk());
  EXPECT_EQ(fs_->UnsyncedBytes(path), 5u);
  auto g = Create(dir_.File("000005.log"));
  EXPECT_THAT(SyncDir(dir_.path()), RocksOk());
  EXPECT_EQ(fs_->UnsyncedDirEntries(dir_.path()), std::set<std::string>{"000005.log"});
  // A rule still fails a skipped sync.
  ASSERT_OK(fs_->FailNext(FsOp::kSync, 1, FsFault::IOError()));
  EXPECT_THAT(f->Sync(rocksdb::IOOptions(), nullptr), RocksIs(kIOError, kNoSub));
  f.reset();
  g.reset();
  Crash();
  EXPECT_EQ(Read(path), std::string(10, 's'));
  EXPECT_EQ(Read(dir_.File("000005.log")), "MISSING");
}

TEST_F(FaultFsTest, RetryableFaultsCarryTheRetryableFlag) {
  auto f = Create(dir_.File("000004.log"));
  ASSERT_OK(fs_->FailNext(FsOp::kAppend, 1, FsFault::IOError().Retryable()));
  rocksdb::IOStatus s = Append(f.get(), "a");
  EXPECT_THAT(s, RocksIs(kIOError, kNoSub));
  EXPECT_TRUE(s.GetRetryable());
  ASSERT_OK(fs_->FailNext(FsOp::kAppend, 1, FsFault::IOError()));
  EXPECT_FALSE(Append(f.get(), "a").GetRetryable());
}

TEST_F(FaultFsTest, FileClassFilterFailsOnlyMatchingFiles) {
  auto sst = Create(dir_.File("000005.sst"));
  auto wal = Create(dir_.File("000006.log"));
  ASSERT_OK(fs_->FailNext(FsOp::kAppend, 1, FsFault::IOError().OnlyFor(FileClass::kWal)));
  EXPECT_THAT(Append(sst.get(), "s"), RocksOk());
  EXPECT_THAT(Append(wal.get(), "w"), RocksIs(kIOError, kNoSub));
  EXPECT_THAT(Append(wal.get(), "w"), RocksOk());
}

TEST_F(FaultFsTest, EachOperationCanBeFailed) {
  const rocksdb::IOOptions io;
  std::string a = dir_.File("000010.log");
  auto f = Create(a);
  std::unique_ptr<rocksdb::FSWritableFile> g;

  ASSERT_OK(fs_->FailNext(FsOp::kNewWritableFile, 1, FsFault::NoSpace()));
  EXPECT_THAT(fs_->NewWritableFile(dir_.File("x"), rocksdb::FileOptions(), &g, nullptr),
              RocksIs(kIOError, kNoSpaceSub));
  EXPECT_EQ(Read(dir_.File("x")), "MISSING");
  ASSERT_OK(fs_->FailNext(FsOp::kNewWritableFile, 1, FsFault::IOError()));
  EXPECT_THAT(fs_->ReopenWritableFile(a, rocksdb::FileOptions(), &g, nullptr),
              RocksIs(kIOError, kNoSub));
  ASSERT_OK(fs_->FailNext(FsOp::kFsync, 1, FsFault::IOError()));
  EXPECT_THAT(f->Fsync(io, nullptr), RocksIs(kIOError, kNoSub));
  ASSERT_OK(fs_->FailNext(FsOp::kClose, 1, FsFault::IOError()));
  EXPECT_THAT(f->Close(io, nullptr), RocksIs(kIOError, kNoSub));
  EXPECT_THAT(f->Close(io, nullptr), RocksOk());
  ASSERT_OK(fs_->FailNext(FsOp::kRenameFile, 1, FsFault::IOError()));
  EXPECT_THAT(fs_->RenameFile(a, dir_.File("b"), io, nullptr), RocksIs(kIOError, kNoSub));
  EXPECT_EQ(Read(a), "") << "a failed rename leaves the source";
  ASSERT_OK(fs_->FailNext(FsOp::kDirFsync, 1, FsFault::IOError()));
  EXPECT_THAT(SyncDir(dir_.path()), RocksIs(kIOError, kNoSub));
  EXPECT_THAT(fs_->UnsyncedDirEntries(dir_.path()), ElementsAre("000010.log"));

  FsCounters c = fs_->counters();
  EXPECT_EQ(c.fired[static_cast<int>(FsOp::kNewWritableFile)], 2u);
  EXPECT_EQ(c.fired[static_cast<int>(FsOp::kFsync)], 1u);
  EXPECT_EQ(c.fired[static_cast<int>(FsOp::kClose)], 1u);
  EXPECT_EQ(c.fired[static_cast<int>(FsOp::kRenameFile)], 1u);
  EXPECT_EQ(c.fired[static_cast<int>(FsOp::kDirFsync)], 1u);
  EXPECT_EQ(c.fired[static_cast<int>(FsOp::kAppend)], 0u);
}

TEST_F(FaultFsTest, OneInNIsReproducibleFromTheSeed) {
  auto pattern = [&](uint64_t seed) {
    auto fs = std::make_shared<FaultFs>(rocksdb::FileSystem::Default());
    std::unique_ptr<rocksdb::FSWritableFile> f;
    EXPECT_THAT(fs->NewWritableFile(dir_.File(absl::StrCat("p", seed)), rocksdb::FileOptions(),
                                    &f, nullptr),
                RocksOk());
    EXPECT_OK(fs->FailOneIn(FsOp::kAppend, 5, seed, FsFault::IOError()));
    std::vector<bool> failed;
    for (int i = 0; i < 300; ++i) failed.push_back(!f->Append("x", rocksdb::IOOptions(), nullptr).ok());
    return failed;
  };
  std::vector<bool> a = pattern(7), b = pattern(7), c = pattern(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  long failures = std::count(a.begin(), a.end(), true);
  EXPECT_GT(failures, 30);
  EXPECT_LT(failures, 90);
}

TEST_F(FaultFsTest, InvalidRulesAreInvalidArgument) {
  EXPECT_THAT(fs_->FailNext(FsOp::kAppend, 0, FsFault::IOError()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(fs_->FailOneIn(FsOp::kAppend, 0, 1, FsFault::IOError()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ClassifyFileTest, NamesRocksDbFiles) {
  EXPECT_EQ(ClassifyFile("/db/000012.log"), FileClass::kWal);
  EXPECT_EQ(ClassifyFile("/db/MANIFEST-000005"), FileClass::kManifest);
  EXPECT_EQ(ClassifyFile("/db/000013.sst"), FileClass::kTable);
  EXPECT_EQ(ClassifyFile("/db/CURRENT"), FileClass::kOther);
  EXPECT_EQ(ClassifyFile("/db/LOG"), FileClass::kOther);
  EXPECT_EQ(ClassifyFile("/db/OPTIONS-000007"), FileClass::kOther);
  EXPECT_EQ(ClassifyFile("/db/000001.dbtmp"), FileClass::kOther);
  EXPECT_EQ(ClassifyFile("000012.log"), FileClass::kWal);
}

}  // namespace
}  // namespace umap::faultinject
