// Journal behaviour, one line of the contract per test (journal/journal.h).
#include "journal/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/crash_point.h"
#include "base/crc32c.h"
#include "base/posix_error.h"
#include "journal/format.h"
#include "rocksdb/db.h"
#include "tests/journal/journal_test_util.h"

namespace umap::journal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::umap::testing::StatusIs;

class JournalTest : public ::testing::Test, public JournalFixture {
 protected:
  void SetUp() override { OpenJournal(); }

  // Writes one raw record into the closed journal with RocksDB itself.
  void RawPut(const std::string& key, const std::string& value) {
    journal_.reset();
    rocksdb::DB* db = nullptr;
    rocksdb::Options o;
    o.create_if_missing = true;
    ASSERT_TRUE(rocksdb::DB::Open(o, Options().dir, &db).ok());
    EXPECT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
    EXPECT_TRUE(db->Close().ok());
    delete db;
  }
  // The keys with `tag` in the closed journal, read with RocksDB itself.
  std::vector<std::string> RawKeys(RecordTag tag) {
    journal_.reset();
    rocksdb::DB* db = nullptr;
    std::vector<std::string> keys;
    EXPECT_TRUE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(), Options().dir, &db).ok());
    if (db == nullptr) return keys;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    const std::string end = TagEnd(tag);
    for (it->Seek(TagBegin(tag)); it->Valid() && it->key().compare(end) < 0; it->Next()) {
      keys.push_back(it->key().ToString());
    }
    it.reset();  // before its database
    delete db;
    return keys;
  }
};

// ---- open, directory, lock ---------------------------------------------------------------

TEST_F(JournalTest, OpenCreatesTheDirectoryWithMode0700) {
  struct stat st;
  ASSERT_EQ(::stat(Options().dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(JournalTest, OpenWithoutDirectoryIsInvalidArgument) {
  EXPECT_THAT(Journal::Open(JournalOptions{}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(JournalTest, SecondOpenInThisProcessIsUnavailableAndNamesTheDirectory) {
  absl::StatusOr<std::unique_ptr<Journal>> second = Journal::Open(Options());
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(second.status().message(), HasSubstr(Options().dir));
  // The first journal still works: its LOCK was not disturbed.
  const uint64_t m = AddMapping();
  EXPECT_OK(CommitBlocks(m, {{1, 'a'}}).status());
}

TEST_F(JournalTest, OpenHeldByAnotherProcessIsUnavailableAndNamesItsPid) {
  journal_.reset();
  const std::string lock = Options().dir + "/LOCK";
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: async-signal-safe calls only. Takes the lock RocksDB takes (fcntl F_SETLK, write,
    // whole file) and holds it until the parent closes the pipe.
    ::close(to_child[1]);
    ::close(to_parent[0]);
    int fd = ::open(lock.c_str(), O_RDWR);
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    char ok = (fd >= 0 && ::fcntl(fd, F_SETLK, &fl) == 0) ? 'y' : 'n';
    if (::write(to_parent[1], &ok, 1) != 1) ::_exit(1);
    char c;
    while (::read(to_child[0], &c, 1) > 0) {
    }
    ::_exit(0);
  }
  ::close(to_child[0]);
  ::close(to_parent[1]);
  char ok = 'n';
  ASSERT_EQ(::read(to_parent[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');

  absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(Options());
  EXPECT_THAT(j, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(j.status().message(), HasSubstr(Options().dir));
  EXPECT_THAT(j.status().message(), HasSubstr(absl::StrCat("process ", pid)));
  EXPECT_EQ(ErrnoFromStatus(j.status()), EBUSY);

  ::close(to_child[1]);
  ::close(to_parent[0]);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  OpenJournal();  // the holder is gone
}

TEST_F(JournalTest, NewerFormatVersionIsRefusedNamingBothVersions) {
  RawPut(FormatKey(), EncodeFormat(FormatRecord{kFormatVersion + 1}));
  absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(Options());
  EXPECT_THAT(j, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(j.status().message(),
              HasSubstr(absl::StrCat("format version ", kFormatVersion + 1)));
  EXPECT_THAT(j.status().message(), HasSubstr(absl::StrCat("version ", kFormatVersion)));
}

TEST_F(JournalTest, DatabaseWithoutFormatRecordIsDataLoss) {
  journal_.reset();
  std::filesystem::remove_all(Options().dir);
  std::filesystem::create_directory(Options().dir);
  RawPut("some", "other database");
  EXPECT_THAT(Journal::Open(Options()), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(JournalTest, CorruptTransactionHeaderIsDataLossAtOpen) {
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction t, CommitBlocks(m, {{1, 'a'}}));
  RawPut(TxnHeaderKey(t.lsn), "garbage");
  EXPECT_THAT(Journal::Open(Options()), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(JournalTest, PayloadThatDoesNotMatchItsHeaderIsDataLossOnRead) {
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction t, CommitBlocks(m, {{1, 'a'}}));
  // A well-formed payload record, but not the image the header's CRC names.
  RawPut(TxnPayloadKey(t.lsn, 1), EncodeTxnPayload(Image('b')));
  OpenJournal();
  EXPECT_THAT(journal_->ReadTransaction(t.lsn), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(journal_->PendingTransactions(), StatusIs(absl::StatusCode::kDataLoss));
}

// ---- mappings ----------------------------------------------------------------------------

TEST_F(JournalTest, MappingsSurviveReopen) {
  const uint64_t a = AddMapping(Policy::kAtomic, Contents::kData, 4096);
  const uint64_t b = AddMapping(Policy::kRelaxed, Contents::kIntent, 65536);
  const std::vector<MappingInfo> before = journal_->Mappings();
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before[0].id, a);
  EXPECT_EQ(before[1].id, b);
  EXPECT_EQ(before[1].block_size, 65536u);
  EXPECT_EQ(before[1].contents, Contents::kIntent);
  Reopen();
  EXPECT_EQ(journal_->Mappings(), before);
}

TEST_F(JournalTest, MappingIdsAreNeverReused) {
  AddMapping();
  const uint64_t b = AddMapping();
  ASSERT_OK(journal_->UnregisterMapping(b));
  Reopen();
  EXPECT_GT(AddMapping(), b);
}

TEST_F(JournalTest, BlockSizeThatIsNotAPowerOfTwoIsInvalidArgument) {
  EXPECT_THAT(journal_->RegisterMapping(FileIdentity{}, 3000, Policy::kAtomic, Contents::kData),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(JournalTest, IntentWithAtomicPolicyIsInvalidArgument) {
  EXPECT_THAT(journal_->RegisterMapping(FileIdentity{}, 4096, Policy::kAtomic, Contents::kIntent),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(JournalTest, UnregisterUnknownMappingIsNotFound) {
  EXPECT_THAT(journal_->UnregisterMapping(42), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(JournalTest, UnregisterWithUnappliedTransactionsIsFailedPrecondition) {
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction t, CommitBlocks(m, {{1, 'a'}}));
  EXPECT_THAT(journal_->UnregisterMapping(m), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK(journal_->MarkApplied(t.lsn));
  EXPECT_OK(journal_->UnregisterMapping(m));
  EXPECT_THAT(journal_->Mappings(), IsEmpty());
}

TEST_F(JournalTest, UnregisterDiscardsStagedBlocks) {
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 3, Image('s')));
  ASSERT_OK(journal_->UnregisterMapping(m));
  EXPECT_EQ(journal_->stats().staged_bytes, 0u);
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> staged, journal_->ReadStaged(m, 3));
  EXPECT_FALSE(staged.has_value());
}

// ---- staging -----------------------------------------------------------------------------

TEST_F(JournalTest, StageReplacesTheOlderStagedImage) {
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 3, Image('a')));
  ASSERT_OK(journal_->Stage(m, 3, Image('b', 100)));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> staged, journal_->ReadStaged(m, 3));
  EXPECT_EQ(staged, Image('b', 100));
  EXPECT_EQ(journal_->stats().staged_bytes, 100u);
  EXPECT_EQ(journal_->stats().staged_blocks, 1u);
}

TEST_F(JournalTest, StagedBlocksAreNeverCommittedByThemselves) {
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 3, Image('a')));
  EXPECT_THAT(Pending(), IsEmpty());
  Reopen();
  EXPECT_THAT(Pending(), IsEmpty());
}

TEST_F(JournalTest, ReopenDiscardsStagedBlocks) {
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 3, Image('a')));
  Reopen();
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> staged, journal_->ReadStaged(m, 3));
  EXPECT_FALSE(staged.has_value());
  EXPECT_EQ(journal_->stats().staged_bytes, 0u);
  // And a commit of the range finds nothing to take.
  ASSERT_OK_AND_ASSIGN(Transaction t, journal_->Commit(m, {}, 0, 100));
  EXPECT_EQ(t.lsn, kNoLsn);
}

TEST_F(JournalTest, ReopenWithKeepStagedKeepsStagedBlocksAndTheirQuotaUse) {
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 3, Image('a', 100)));
  journal_.reset();
  JournalOptions o = Options();
  o.keep_staged = true;
  ASSERT_OK_AND_ASSIGN(journal_, Journal::Open(o));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> staged, journal_->ReadStaged(m, 3));
  EXPECT_EQ(staged, Image('a', 100));
  EXPECT_EQ(journal_->stats().staged_bytes, 100u);
  ASSERT_OK_AND_ASSIGN(Transaction t, journal_->Commit(m, {}, 0, 10));
  ASSERT_EQ(t.blocks.size(), 1u);
  EXPECT_EQ(t.blocks[0].data, Image('a', 100));
  EXPECT_EQ(journal_->stats().staged_bytes, 0u);
}

// What the runtime opens when a writable reopen fails (a full disk): it must show the staged
// and committed records, refuse every write with EROFS, and write nothing to the directory.
TEST_F(JournalTest, ReadOnlyOpenServesStagedAndPendingRecordsAndWritesNothing) {
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 3, Image('a', 100)));
  ASSERT_OK_AND_ASSIGN(Transaction t, CommitBlocks(m, {{5, 'c'}}));
  journal_.reset();
  auto listing = [&] {
    std::map<std::string, uintmax_t> files;
    for (const auto& e : std::filesystem::directory_iterator(Options().dir)) {
      files[e.path().filename().string()] = e.file_size();
    }
    return files;
  };
  const std::map<std::string, uintmax_t> before = listing();
  JournalOptions o = Options();
  o.read_only = true;
  ASSERT_OK_AND_ASSIGN(journal_, Journal::Open(o));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> staged, journal_->ReadStaged(m, 3));
  EXPECT_EQ(staged, Image('a', 100));
  EXPECT_EQ(Pending(), std::vector<uint64_t>{t.lsn});
  ASSERT_OK_AND_ASSIGN(Transaction read, journal_->ReadTransaction(t.lsn));
  ASSERT_EQ(read.blocks.size(), 1u);
  EXPECT_EQ(read.blocks[0].data, Image('c'));
  EXPECT_EQ(ErrnoFromStatus(journal_->poisoned()), EROFS);
  EXPECT_FALSE(journal_->Stage(m, 4, Image('b', 100)).ok());
  EXPECT_FALSE(CommitBlocks(m, {{6, 'd'}}).ok());
  journal_.reset();
  EXPECT_EQ(listing(), before) << "a read-only open changed the journal directory";
  // A writable open afterwards sees the same state.
  o.read_only = false;
  o.keep_staged = true;
  ASSERT_OK_AND_ASSIGN(journal_, Journal::Open(o));
  EXPECT_EQ(Pending(), std::vector<uint64_t>{t.lsn});
  ASSERT_OK_AND_ASSIGN(staged, journal_->ReadStaged(m, 3));
  EXPECT_EQ(staged, Image('a', 100));
}

TEST_F(JournalTest, ReadOnlyOpenOfAMissingOrEmptyJournalFailsAndCreatesNothing) {
  JournalOptions o = Options();
  o.dir = dir_.File("no-journal");
  o.read_only = true;
  EXPECT_FALSE(Journal::Open(o).ok());
  EXPECT_FALSE(std::filesystem::exists(o.dir));
  ASSERT_TRUE(std::filesystem::create_directory(o.dir));
  EXPECT_FALSE(Journal::Open(o).ok());
}

TEST_F(JournalTest, StagedQuotaExceededIsResourceExhausted) {
  quota_ = 3 * 4096;
  Reopen();
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 1, Image('a')));
  ASSERT_OK(journal_->Stage(m, 2, Image('b')));
  ASSERT_OK(journal_->Stage(m, 3, Image('c')));
  absl::Status s = journal_->Stage(m, 4, Image('d'));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(s.message(), HasSubstr("quota"));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> refused, journal_->ReadStaged(m, 4));
  EXPECT_FALSE(refused.has_value());
  // Replacing a staged image is within the quota; committing frees it.
  EXPECT_OK(journal_->Stage(m, 3, Image('e')));
  ASSERT_OK(journal_->Commit(m, {}, 1, 4).status());
  EXPECT_EQ(journal_->stats().staged_bytes, 0u);
  EXPECT_OK(journal_->Stage(m, 4, Image('d')));
}

TEST_F(JournalTest, StageOnRelaxedMappingIsInvalidArgument) {
  const uint64_t m = AddMapping(Policy::kRelaxed);
  EXPECT_THAT(journal_->Stage(m, 1, Image('a')), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(JournalTest, StageOfOversizedOrEmptyImageIsInvalidArgument) {
  const uint64_t m = AddMapping();
  EXPECT_THAT(journal_->Stage(m, 1, Image('a', 4097)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(journal_->Stage(m, 1, ""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(JournalTest, StageOnUnknownMappingIsNotFound) {
  EXPECT_THAT(journal_->Stage(9, 1, Image('a')), StatusIs(absl::StatusCode::kNotFound));
}

// ---- commit ------------------------------------------------------------------------------

TEST_F(JournalTest, CommitReturnsTheTransactionAndKeepsItPending) {
  const uint64_t m = AddMapping();
  const std::string last = Image('z', 100);  // a short last block
  const std::string b = Image('b');
  const std::vector<BlockWrite> writes = {{7, last}, {2, b}};
  ASSERT_OK_AND_ASSIGN(Transaction t, journal_->Commit(m, writes, 0, 0));
  EXPECT_EQ(t.lsn, 1u);
  EXPECT_EQ(t.mapping_id, m);
  ASSERT_EQ(t.blocks.size(), 2u);
  EXPECT_EQ(t.blocks[0].block, 2u);
  EXPECT_EQ(t.blocks[0].data, b);
  EXPECT_EQ(t.blocks[1].block, 7u);
  EXPECT_EQ(t.blocks[1].length, 100u);
  EXPECT_EQ(t.blocks[1].crc, crc32c::Value(last.data(), last.size()));
  EXPECT_THAT(Pending(), ElementsAre(t.lsn));
  ASSERT_OK_AND_ASSIGN(Transaction read, journal_->ReadTransaction(t.lsn));
  EXPECT_EQ(read, t);
}

TEST_F(JournalTest, CommitWhoseCallerKeepsTheImagesReturnsOnlyTheStagedOnesButJournalsAll) {
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 1, Image('1')));
  const std::string last = Image('z', 100);  // a short last block
  const std::string b = Image('b');
  const std::vector<BlockWrite> writes = {{7, last}, {2, b}};
  ASSERT_OK_AND_ASSIGN(Transaction t, journal_->Commit(m, writes, 0, 5,
                                                       Journal::ImageCopies::kCallerKeeps));
  ASSERT_EQ(t.blocks.size(), 3u);
  EXPECT_EQ(t.blocks[0].block, 1u);
  EXPECT_EQ(t.blocks[0].data, Image('1')) << "a staged image is the journal's: returned";
  EXPECT_EQ(t.blocks[1].block, 2u);
  EXPECT_TRUE(t.blocks[1].data.empty()) << "the caller's image is not copied";
  EXPECT_EQ(t.blocks[1].length, b.size());
  EXPECT_EQ(t.blocks[1].crc, crc32c::Value(b.data(), b.size()));
  EXPECT_EQ(t.blocks[2].block, 7u);
  EXPECT_TRUE(t.blocks[2].data.empty());
  EXPECT_EQ(t.blocks[2].length, 100u);
  EXPECT_EQ(t.blocks[2].crc, crc32c::Value(last.data(), last.size()));
  // The journal holds every image, as a commit that copies them.
  ASSERT_OK_AND_ASSIGN(Transaction read, journal_->ReadTransaction(t.lsn));
  ASSERT_EQ(read.blocks.size(), 3u);
  EXPECT_EQ(read.blocks[0].data, Image('1'));
  EXPECT_EQ(read.blocks[1].data, b);
  EXPECT_EQ(read.blocks[2].data, last);
}

TEST_F(JournalTest, CommitOverTheBatchBoundIsWrittenInBatchesAndReturnedWithoutImages) {
  commit_batch_bytes_ = 3 * 4096;
  Reopen();
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 1, Image('1')));
  ASSERT_OK(journal_->Stage(m, 5, Image('5')));
  ASSERT_OK(journal_->Stage(m, 9, Image('9')));  // outside the range: stays staged
  const std::string last = Image('z', 100);
  std::vector<std::string> images = {Image('2'), Image('3'), Image('4'), Image('8'), last};
  const std::vector<BlockWrite> writes = {
      {2, images[0]}, {3, images[1]}, {4, images[2]}, {8, images[3]}, {11, images[4]}};
  const uint64_t groups = journal_->stats().write_groups;
  ASSERT_OK_AND_ASSIGN(Transaction t, journal_->Commit(m, writes, 0, 6));
  EXPECT_GE(journal_->stats().write_groups - groups, 3u)
      << "7 images over a 3-image bound: two payload batches and the header's";
  EXPECT_TRUE(t.images_in_journal);
  const std::vector<std::pair<uint64_t, std::string>> want = {
      {1, Image('1')}, {2, Image('2')}, {3, Image('3')}, {4, Image('4')},
      {5, Image('5')}, {8, Image('8')}, {11, last}};
  ASSERT_EQ(t.blocks.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& [block, image] = want[i];
    EXPECT_EQ(t.blocks[i].block, block);
    EXPECT_TRUE(t.blocks[i].data.empty()) << "block " << block;
    EXPECT_EQ(t.blocks[i].length, image.size());
    EXPECT_EQ(t.blocks[i].crc, crc32c::Value(image.data(), image.size()));
    std::string got(image.size(), '\0');
    ASSERT_OK(journal_->ReadImage(t.lsn, t.blocks[i], absl::MakeSpan(got)));
    EXPECT_EQ(got, image) << "block " << block;
  }
  EXPECT_EQ(journal_->stats().staged_blocks, 1u) << "the range's staged blocks were taken";
  Reopen();
  ASSERT_OK_AND_ASSIGN(Transaction read, journal_->ReadTransaction(t.lsn));
  ASSERT_EQ(read.blocks.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(read.blocks[i].data, want[i].second);
  ASSERT_OK(journal_->MarkApplied(t.lsn));
  EXPECT_THAT(RawKeys(RecordTag::kTxnPayload), IsEmpty());
}

TEST_F(JournalTest, ReadTransactionCanLeaveTheImagesInTheJournal) {
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction t, CommitBlocks(m, {{1, 'a'}, {4, 'b'}}));
  ASSERT_OK_AND_ASSIGN(Transaction header,
                       journal_->ReadTransaction(t.lsn, Journal::Images::kLeaveInJournal));
  EXPECT_TRUE(header.images_in_journal);
  ASSERT_EQ(header.blocks.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(header.blocks[i].data.empty());
    EXPECT_EQ(header.blocks[i].block, t.blocks[i].block);
    EXPECT_EQ(header.blocks[i].crc, t.blocks[i].crc);
    std::string got(4096, '\0');
    ASSERT_OK(journal_->ReadImage(t.lsn, header.blocks[i], absl::MakeSpan(got)));
    EXPECT_EQ(got, t.blocks[i].data);
  }
}

TEST_F(JournalTest, ReadImageChecksTheEntryItIsGiven) {
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction t, CommitBlocks(m, {{1, 'a'}}));
  std::string got(4096, '\0');
  CommittedBlock entry = t.blocks[0];
  entry.crc ^= 1;
  EXPECT_THAT(journal_->ReadImage(t.lsn, entry, absl::MakeSpan(got)),
              StatusIs(absl::StatusCode::kDataLoss));
  entry = t.blocks[0];
  entry.block = 2;
  EXPECT_THAT(journal_->ReadImage(t.lsn, entry, absl::MakeSpan(got)),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(JournalTest, OpenDeletesPayloadsWithoutAHeaderAndNeverReusesTheirLsn) {
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction t, CommitBlocks(m, {{1, 'a'}}));
  // What a streamed commit cut short leaves: payloads of an LSN above the watermark, no header.
  RawPut(TxnPayloadKey(t.lsn + 40, 3), EncodeTxnPayload(Image('x')));
  RawPut(TxnPayloadKey(t.lsn + 40, 4), EncodeTxnPayload(Image('y')));
  OpenJournal();
  EXPECT_THAT(Pending(), ElementsAre(t.lsn));
  ASSERT_OK_AND_ASSIGN(Transaction next, CommitBlocks(m, {{2, 'b'}}));
  EXPECT_GT(next.lsn, t.lsn + 40);
  EXPECT_THAT(RawKeys(RecordTag::kTxnPayload),
              ElementsAre(TxnPayloadKey(t.lsn, 1), TxnPayloadKey(next.lsn, 2)));
}

TEST_F(JournalTest, AStreamedCommitThatFailsBetweenBatchesCommitsNothing) {
  commit_batch_bytes_ = 2 * 4096;
  Reopen();
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction before, CommitBlocks(m, {{9, 'o'}}));
  // After the first payload batch, every WAL append fails: the next batch or the header.
  ASSERT_OK(crash_point::Arm("journal.mid_stream", 1,
                             crash_point::Action::Call([&](absl::string_view) { FailWalAppends(); })));
  absl::StatusOr<Transaction> t =
      CommitBlocks(m, {{1, 'a'}, {2, 'b'}, {3, 'c'}, {4, 'd'}, {5, 'e'}});
  crash_point::Disarm();
  EXPECT_FALSE(t.ok());
  EXPECT_GT(Injected(), 0u);
  EXPECT_THAT(journal_->poisoned(), StatusIs(absl::StatusCode::kFailedPrecondition));
  HealFs();
  Reopen();
  EXPECT_THAT(Pending(), ElementsAre(before.lsn)) << "nothing of the failed commit is committed";
  ASSERT_OK_AND_ASSIGN(Transaction next, CommitBlocks(m, {{1, 'n'}}));
  EXPECT_GT(next.lsn, before.lsn + 1) << "the failed commit's LSN is not handed out again";
  EXPECT_THAT(RawKeys(RecordTag::kTxnPayload),
              ElementsAre(TxnPayloadKey(before.lsn, 9), TxnPayloadKey(next.lsn, 1)))
      << "the payloads written before the failure are gone";
}

TEST_F(JournalTest, CommitTakesStagedBlocksOfTheRangeAndTheGivenVersionWins) {
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 1, Image('1')));
  ASSERT_OK(journal_->Stage(m, 2, Image('2')));
  ASSERT_OK(journal_->Stage(m, 9, Image('9')));  // outside the range
  ASSERT_OK_AND_ASSIGN(Transaction t, CommitBlocks(m, {{2, 'N'}, {3, 'M'}}, 0, 5));
  BlockFile file;
  Apply(t, &file);
  EXPECT_EQ(file, (BlockFile{{1, Image('1')}, {2, Image('N')}, {3, Image('M')}}));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> s1, journal_->ReadStaged(m, 1));
  EXPECT_FALSE(s1.has_value());
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> s9, journal_->ReadStaged(m, 9));
  EXPECT_EQ(s9, Image('9'));
  EXPECT_EQ(journal_->stats().staged_blocks, 1u);
}

TEST_F(JournalTest, CommitOfAGivenBlockDropsItsOlderStagedImageOutsideTheRange) {
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 9, Image('o')));
  ASSERT_OK(CommitBlocks(m, {{9, 'n'}}, 0, 5).status());
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> s9, journal_->ReadStaged(m, 9));
  EXPECT_FALSE(s9.has_value());  // else a later range commit would roll block 9 back
}

TEST_F(JournalTest, CommitWithNothingToCommitWritesNothing) {
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction t, journal_->Commit(m, {}, 0, 100));
  EXPECT_EQ(t.lsn, kNoLsn);
  EXPECT_THAT(t.blocks, IsEmpty());
  EXPECT_EQ(journal_->stats().commits, 0u);
}

TEST_F(JournalTest, CommitOfUnknownMappingIsNotFound) {
  EXPECT_THAT(CommitBlocks(5, {{1, 'a'}}), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(JournalTest, CommitOfOversizedImageIsInvalidArgument) {
  const uint64_t m = AddMapping(Policy::kAtomic, Contents::kData, 1024);
  EXPECT_THAT(CommitBlocks(m, {{1, 'a'}}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(JournalTest, CommitListingABlockTwiceIsInvalidArgument) {
  const uint64_t m = AddMapping();
  EXPECT_THAT(CommitBlocks(m, {{1, 'a'}, {1, 'b'}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(JournalTest, CommitWithInvertedRangeIsInvalidArgument) {
  const uint64_t m = AddMapping();
  EXPECT_THAT(journal_->Commit(m, {}, 5, 4), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(JournalTest, IntentModeKeepsCrcsAndLengthsButNoImages) {
  const uint64_t m = AddMapping(Policy::kRelaxed, Contents::kIntent);
  const std::string image = Image('i', 300);
  const BlockWrite w{4, image};
  ASSERT_OK_AND_ASSIGN(Transaction t, journal_->Commit(m, absl::MakeConstSpan(&w, 1), 0, 0));
  EXPECT_EQ(t.contents, Contents::kIntent);
  ASSERT_EQ(t.blocks.size(), 1u);
  EXPECT_EQ(t.blocks[0].data, image);  // for the caller to apply
  Reopen();
  ASSERT_OK_AND_ASSIGN(Transaction read, journal_->ReadTransaction(t.lsn));
  ASSERT_EQ(read.blocks.size(), 1u);
  EXPECT_EQ(read.blocks[0].block, 4u);
  EXPECT_EQ(read.blocks[0].length, 300u);
  EXPECT_EQ(read.blocks[0].crc, crc32c::Value(image.data(), image.size()));
  EXPECT_THAT(read.blocks[0].data, IsEmpty());
}

// ---- apply, GC, reopen -------------------------------------------------------------------

TEST_F(JournalTest, ReopenRecoversPendingTransactionsAndContinuesLsns) {
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction t1, CommitBlocks(m, {{1, 'a'}}));
  ASSERT_OK_AND_ASSIGN(Transaction t2, CommitBlocks(m, {{2, 'b'}, {3, 'c'}}));
  ASSERT_OK(journal_->MarkApplied(t1.lsn));
  Reopen();
  ASSERT_OK_AND_ASSIGN(std::vector<Transaction> pending, journal_->PendingTransactions());
  EXPECT_THAT(pending, ElementsAre(t2));
  ASSERT_OK_AND_ASSIGN(Transaction t3, CommitBlocks(m, {{1, 'd'}}));
  EXPECT_GT(t3.lsn, t2.lsn);
}

TEST_F(JournalTest, LsnsKeepIncreasingAfterEverythingWasAppliedAndDeleted) {
  const uint64_t m = AddMapping();
  uint64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(Transaction t, CommitBlocks(m, {{1, 'a'}}));
    ASSERT_OK(journal_->MarkApplied(t.lsn));
    last = t.lsn;
  }
  Reopen();
  EXPECT_THAT(Pending(), IsEmpty());
  ASSERT_OK_AND_ASSIGN(Transaction t, CommitBlocks(m, {{1, 'a'}}));
  EXPECT_GT(t.lsn, last);
}

TEST_F(JournalTest, MarkAppliedOfUnknownLsnIsNotFound) {
  EXPECT_THAT(journal_->MarkApplied(77), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(JournalTest, MarkAppliedTwiceIsOk) {
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction t1, CommitBlocks(m, {{1, 'a'}}));
  ASSERT_OK_AND_ASSIGN(Transaction t2, CommitBlocks(m, {{1, 'b'}}));
  ASSERT_OK(journal_->MarkApplied(t2.lsn));  // kept: t1 is older and shares block 1
  EXPECT_OK(journal_->MarkApplied(t2.lsn));
  EXPECT_THAT(Pending(), ElementsAre(t1.lsn, t2.lsn));
  EXPECT_EQ(journal_->stats().unapplied_txns, 1u);
}

TEST_F(JournalTest, NewerTransactionMarkedFirstIsKeptUntilAnOlderOneOnItsBlocksIsApplied) {
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction t1, CommitBlocks(m, {{1, 'a'}, {2, 'a'}}));
  ASSERT_OK_AND_ASSIGN(Transaction t2, CommitBlocks(m, {{2, 'b'}}));
  ASSERT_OK_AND_ASSIGN(Transaction t3, CommitBlocks(m, {{5, 'c'}}));
  ASSERT_OK(journal_->MarkApplied(std::vector<uint64_t>{t2.lsn, t3.lsn}));
  // t3 shares no block with t1: gone. t2 must stay (also across a crash), or replaying t1
  // alone would roll block 2 back to 'a'.
  EXPECT_THAT(Pending(), ElementsAre(t1.lsn, t2.lsn));
  Reopen();
  EXPECT_THAT(Pending(), ElementsAre(t1.lsn, t2.lsn));
  ASSERT_OK(journal_->MarkApplied(std::vector<uint64_t>{t1.lsn, t2.lsn}));
  Reopen();
  EXPECT_THAT(Pending(), IsEmpty());
}

TEST_F(JournalTest, StatsCountCommitsStagedAndPending) {
  const uint64_t m = AddMapping();
  ASSERT_OK(journal_->Stage(m, 1, Image('a', 10)));
  ASSERT_OK(CommitBlocks(m, {{2, 'b'}}).status());
  const Journal::Stats st = journal_->stats();
  EXPECT_EQ(st.commits, 1u);
  EXPECT_EQ(st.staged_bytes, 10u);
  EXPECT_EQ(st.staged_blocks, 1u);
  EXPECT_EQ(st.pending_txns, 1u);
  EXPECT_EQ(st.mappings, 1u);
  EXPECT_GE(st.wal_syncs, 1u);
  EXPECT_GT(st.bytes_written, 4096u);
}

// ---- failures: poisoning -----------------------------------------------------------------

// Every write call of a poisoned journal fails the same way, naming the cause.
void ExpectPoisoned(Journal* j, uint64_t mapping, int err) {
  const std::string image = Image('p');
  const BlockWrite w{1, image};
  for (absl::Status s :
       {j->Commit(mapping, absl::MakeConstSpan(&w, 1), 0, 0).status(),
        j->Stage(mapping, 1, image), j->MarkApplied(1),
        j->RegisterMapping(FileIdentity{}, 4096, Policy::kAtomic, Contents::kData).status(),
        j->UnregisterMapping(mapping), j->poisoned()}) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(s.message(), HasSubstr("poisoned by"));
    EXPECT_THAT(s.message(), HasSubstr("reopen to recover"));
    EXPECT_EQ(ErrnoFromStatus(s), err);
  }
}

TEST_F(JournalTest, WalSyncErrorFailsTheCommitWithEioAndPoisonsTheJournal) {
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction before, CommitBlocks(m, {{1, 'a'}}));
  FailWalSyncs(faultinject::FsFault::IOError());
  absl::StatusOr<Transaction> failed = CommitBlocks(m, {{2, 'b'}});
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(ErrnoFromStatus(failed.status()), EIO);
  const uint64_t injected = Injected();
  ExpectPoisoned(journal_.get(), m, EIO);
  EXPECT_EQ(Injected(), injected);  // RocksDB was not touched again
  // Reads still work.
  EXPECT_OK(journal_->ReadTransaction(before.lsn).status());

  HealFs();
  Reopen();
  // The failed commit is indeterminate: present whole, or absent.
  ASSERT_OK_AND_ASSIGN(std::vector<Transaction> pending, journal_->PendingTransactions());
  ASSERT_GE(pending.size(), 1u);
  EXPECT_EQ(pending[0], before);
  if (pending.size() == 2) {
    BlockFile file;
    Apply(pending[1], &file);
    EXPECT_EQ(file, (BlockFile{{2, Image('b')}}));
  }
  EXPECT_LE(pending.size(), 2u);
  EXPECT_OK(CommitBlocks(m, {{3, 'c'}}).status());
}

TEST_F(JournalTest, WalSyncNoSpaceFailsWithEnospcAndPoisonsTheJournal) {
  const uint64_t m = AddMapping();
  FailWalSyncs(faultinject::FsFault::NoSpace());
  absl::StatusOr<Transaction> failed = CommitBlocks(m, {{2, 'b'}});
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ErrnoFromStatus(failed.status()), ENOSPC);
  ExpectPoisoned(journal_.get(), m, ENOSPC);
  HealFs();
  Reopen();
  EXPECT_OK(journal_->poisoned());
  EXPECT_OK(CommitBlocks(m, {{3, 'c'}}).status());
}

TEST_F(JournalTest, WalAppendErrorOfAnUnsyncedWritePoisonsTheJournal) {
  const uint64_t m = AddMapping();
  FailWalAppends();
  absl::Status s = journal_->Stage(m, 1, Image('a'));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(ErrnoFromStatus(s), EIO);
  ExpectPoisoned(journal_.get(), m, EIO);
  HealFs();
  Reopen();
  EXPECT_OK(CommitBlocks(m, {{3, 'c'}}).status());
}

// ---- disk use ----------------------------------------------------------------------------

uint64_t DiskBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st;
    if (::stat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_blocks) * 512;  // allocated, not apparent, size
    }
  }
  return total;
}

// Sustained commit + apply: 256 KiB transactions (64 blocks of 4 KiB), each marked applied
// right after its commit, 1000 of them (250 MiB through the journal). Applied records must
// be compacted away: the directory stays near two memtables' worth of WAL.
TEST_F(JournalTest, DiskUseStaysBoundedUnderSustainedCommitAndApply) {
  const uint64_t m = AddMapping();
  constexpr int kTxns = 1000, kBlocks = 64;
  constexpr uint64_t kBound = 48ull << 20;
  std::vector<std::string> images(kBlocks);
  std::vector<BlockWrite> writes(kBlocks);
  uint64_t peak = 0, written = 0;
  for (int i = 0; i < kTxns; ++i) {
    for (int b = 0; b < kBlocks; ++b) {
      images[b] = Image(static_cast<char>('a' + (i + b) % 26));
      writes[b] = {static_cast<uint64_t>(b), images[b]};
    }
    ASSERT_OK_AND_ASSIGN(Transaction t, journal_->Commit(m, writes, 0, 0));
    ASSERT_OK(journal_->MarkApplied(t.lsn));
    written += kBlocks * 4096;
    if (i % 20 == 0) peak = std::max(peak, DiskBytes(Options().dir));
  }
  peak = std::max(peak, DiskBytes(Options().dir));
  std::printf("journal disk use: peak %.1f MiB after %.0f MiB committed and applied\n",
              static_cast<double>(peak) / (1 << 20), static_cast<double>(written) / (1 << 20));
  RecordProperty("peak_disk_bytes", std::to_string(peak));
  EXPECT_LT(peak, kBound);
  EXPECT_THAT(Pending(), IsEmpty());
}

}  // namespace
}  // namespace umap::journal
