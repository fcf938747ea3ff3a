#include "journal/wal_zero_fill.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "faultinject/fault_fs.h"
#include "journal/journal.h"
#include "journal/wal_damage.h"
#include "rocksdb/file_system.h"
#include "tests/journal/journal_test_util.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace umap::journal {
namespace {

using faultinject::FaultFs;
using faultinject::FileClass;
using faultinject::FsFault;
using faultinject::FsOp;

constexpr uint64_t kKiB = 1024;

class WalZeroFillTest : public ::testing::Test {
 protected:
  std::unique_ptr<rocksdb::FSWritableFile> Create(const std::string& name) {
    std::unique_ptr<rocksdb::FSWritableFile> f;
    rocksdb::IOStatus s =
        fs_->NewWritableFile(dir_.File(name), rocksdb::FileOptions(), &f, nullptr);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return f;
  }
  static rocksdb::IOStatus Append(rocksdb::FSWritableFile* f, uint64_t n, char c = 'r') {
    return f->Append(std::string(n, c), rocksdb::IOOptions(), nullptr);
  }
  uint64_t SizeOf(const std::string& name) { return std::filesystem::file_size(dir_.File(name)); }
  // True if every byte of `name` from `from` on is zero.
  bool ZerosFrom(const std::string& name, uint64_t from) {
    std::string data;
    EXPECT_TRUE(rocksdb::ReadFileToString(rocksdb::FileSystem::Default().get(), dir_.File(name),
                                          &data)
                    .ok());
    return data.size() >= from && data.find_first_not_of('\0', from) == std::string::npos;
  }

  umap::testing::TempDir dir_;
  std::shared_ptr<FaultFs> base_ = std::make_shared<FaultFs>(rocksdb::FileSystem::Default());
  std::shared_ptr<WalZeroFillFs> fs_ = std::make_shared<WalZeroFillFs>(base_);
};

TEST(WalFileNameTest, IsANumberAndDotLog) {
  EXPECT_TRUE(IsWalFileName("000012.log"));
  EXPECT_TRUE(IsWalFileName("/j/000012.log"));
  EXPECT_FALSE(IsWalFileName("LOG"));
  EXPECT_FALSE(IsWalFileName("/j/.log"));
  EXPECT_FALSE(IsWalFileName("/j/LOG.old.log"));
  EXPECT_FALSE(IsWalFileName("/j/000012.sst"));
  EXPECT_FALSE(IsWalFileName("/j/MANIFEST-000012"));
}

TEST(ZeroFillPaysOnTest, NotOnFuseOrNetworkFileSystems) {
  EXPECT_TRUE(ZeroFillPaysOnFsType(0xEF53));       // ext2/3/4
  EXPECT_TRUE(ZeroFillPaysOnFsType(0x58465342));   // XFS
  EXPECT_TRUE(ZeroFillPaysOnFsType(0x01021994));   // tmpfs
  EXPECT_FALSE(ZeroFillPaysOnFsType(0x65735546));  // FUSE (GlusterFS)
  EXPECT_FALSE(ZeroFillPaysOnFsType(0x6969));      // NFS
  EXPECT_FALSE(ZeroFillPaysOnFsType(0x0BD00BD0));  // Lustre
  EXPECT_FALSE(ZeroFillPaysOnFsType(0x47504653));  // GPFS
  EXPECT_TRUE(ZeroFillPaysOn("/dev/shm"));
}

// The records land on zeros written ahead of them; the zeros grow in steps that double from
// 64 KiB up to WalZeroFillFs::kStep, so few appends change the file's size.
TEST_F(WalZeroFillTest, AWalIsWrittenIntoZerosThatGrowInDoublingSteps) {
  auto wal = Create("000003.log");
  ASSERT_TRUE(Append(wal.get(), 100).ok());
  EXPECT_EQ(SizeOf("000003.log"), 64 * kKiB);
  EXPECT_TRUE(ZerosFrom("000003.log", 100));
  ASSERT_TRUE(Append(wal.get(), 70 * kKiB).ok());
  EXPECT_EQ(SizeOf("000003.log"), 128 * kKiB);  // one more step of 64 KiB
  uint64_t records = 100 + 70 * kKiB;
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(Append(wal.get(), 100 * kKiB).ok());
    records += 100 * kKiB;
  }
  const uint64_t size = SizeOf("000003.log");
  EXPECT_GT(size, records);
  EXPECT_LE(size, records + WalZeroFillFs::kStep);
  EXPECT_EQ(size % (64 * kKiB), 0u);
  EXPECT_TRUE(ZerosFrom("000003.log", records));
}

TEST_F(WalZeroFillTest, OtherFilesAreNotZeroFilled) {
  auto manifest = Create("MANIFEST-000001");
  ASSERT_TRUE(Append(manifest.get(), 100).ok());
  EXPECT_EQ(SizeOf("MANIFEST-000001"), 100u);
}

// Only the newest WAL may end in zeros: the older one is cut back to its records (and
// synced) before the next is created, and is not zero-filled again.
TEST_F(WalZeroFillTest, TheOlderWalIsCutBackToItsRecordsBeforeTheNextIsCreated) {
  auto older = Create("000003.log");
  ASSERT_TRUE(Append(older.get(), 100).ok());
  ASSERT_EQ(SizeOf("000003.log"), 64 * kKiB);
  auto newer = Create("000004.log");
  EXPECT_EQ(SizeOf("000003.log"), 100u);
  ASSERT_TRUE(Append(older.get(), 10).ok());
  EXPECT_EQ(SizeOf("000003.log"), 110u);
  ASSERT_TRUE(Append(newer.get(), 10).ok());
  EXPECT_EQ(SizeOf("000004.log"), 64 * kKiB);
  ASSERT_TRUE(newer->Close(rocksdb::IOOptions(), nullptr).ok());
  EXPECT_EQ(SizeOf("000004.log"), 64 * kKiB) << "a closed WAL keeps its zeros";
  newer.reset();
  EXPECT_EQ(SizeOf("000004.log"), 64 * kKiB) << "also when destroyed";
}

// The zeros are written through the file system below (here FaultFs): a full disk fails
// the append that needed them, and no byte of that record is written.
TEST_F(WalZeroFillTest, AFullDiskForTheZerosFailsTheAppendWithNoSpaceAndWritesNoRecord) {
  auto wal = Create("000003.log");
  ASSERT_TRUE(base_->FailNext(FsOp::kWrite, 1, FsFault::NoSpace().OnlyFor(FileClass::kWal)).ok());
  rocksdb::IOStatus s = Append(wal.get(), 100);
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_EQ(base_->fired(FsOp::kWrite), 1u);
  EXPECT_EQ(SizeOf("000003.log"), 0u);
  ASSERT_TRUE(Append(wal.get(), 100, 'a').ok()) << "the disk has room again";
  EXPECT_EQ(SizeOf("000003.log"), 64 * kKiB);
  EXPECT_TRUE(ZerosFrom("000003.log", 100));
}

class ZeroFilledJournalTest : public ::testing::Test, public JournalFixture {
 protected:
  // The newest WAL file of the journal directory `dir`.
  static std::string NewestWal(const std::string& dir) {
    std::string wal;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (IsWalFileName(e.path().string()) && e.path().string() > wal) wal = e.path().string();
    }
    return wal;
  }
};

// A power cut after synced commits and an unsynced write over the zeros: the WAL keeps its
// zeros (the size was synced with the first commit), the unsynced record reads as zeros
// again, and the journal opens with every commit, no damage reported.
TEST_F(ZeroFilledJournalTest, APowerCutLeavesZerosAfterTheRecordsAndEveryCommitRecovers) {
  OpenJournal();
  const uint64_t m = AddMapping();
  std::vector<Transaction> committed;
  for (char c : {'a', 'b', 'c'}) {
    ASSERT_OK_AND_ASSIGN(Transaction t, CommitBlocks(m, {{static_cast<uint64_t>(c - 'a'), c}}));
    committed.push_back(t);
  }
  ASSERT_OK(journal_->Stage(m, 7, Image('s')));  // unsynced
  const std::string wal = NewestWal(Options().dir);
  ASSERT_OK_AND_ASSIGN(const uint64_t with_staged,
                       WalRecordsEnd(*rocksdb::FileSystem::Default(), wal));
  fs_->SimulatePowerCut();
  journal_.reset();
  ASSERT_OK(fs_->DropUnsyncedData(faultinject::FsDropOptions::DropAll()));
  fs_->Restart();

  ASSERT_OK_AND_ASSIGN(const uint64_t records, WalRecordsEnd(*rocksdb::FileSystem::Default(), wal));
  EXPECT_LT(records, with_staged) << "the staged block's record is gone";
  EXPECT_GE(std::filesystem::file_size(wal), with_staged) << "the zeros kept their size";
  ASSERT_OK_AND_ASSIGN(std::optional<WalDamage> damage,
                       FindWalDamage(*rocksdb::FileSystem::Default(), Options().dir));
  EXPECT_FALSE(damage.has_value()) << DescribeWalDamage(*damage);

  OpenJournal();
  ASSERT_OK_AND_ASSIGN(std::vector<Transaction> pending, journal_->PendingTransactions());
  EXPECT_EQ(pending, committed);
}

}  // namespace
}  // namespace umap::journal
