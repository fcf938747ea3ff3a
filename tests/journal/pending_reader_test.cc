// PendingReader: the headers in LSN order, the images in one ordered pass (stepping over
// records it is not asked for, seeking past far ones), each image checked; its snapshot.
#include "journal/pending_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "journal/format.h"
#include "rocksdb/db.h"
#include "tests/journal/journal_test_util.h"

namespace umap::journal {
namespace {

using ::testing::HasSubstr;
using umap::testing::StatusIs;

class PendingReaderTest : public ::testing::Test, public JournalFixture {
 protected:
  void SetUp() override { OpenJournal(); }

  std::unique_ptr<PendingReader> Reader() {
    return journal_->NewPendingReader(PendingReaderOptions());
  }
  std::vector<TxnHeader> Headers(PendingReader& r) {
    std::vector<TxnHeader> out;
    EXPECT_OK(r.ForEachHeader([&](const TxnHeader& h) {
      out.push_back(h);
      return absl::OkStatus();
    }));
    return out;
  }
  // Rewrites a payload of the closed journal with `value`.
  void PutRaw(const std::string& key, const std::string& value) {
    journal_.reset();
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), Options().dir, &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
    delete db;
    OpenJournal();
  }
};

TEST_F(PendingReaderTest, HeadersComeInLsnOrderWithTheirEntries) {
  const uint64_t m = AddMapping();
  ASSERT_OK(CommitBlocks(m, {{3, 'a'}, {1, 'b'}}).status());
  ASSERT_OK(CommitBlocks(m, {{2, 'c'}}).status());
  std::unique_ptr<PendingReader> r = Reader();
  std::vector<TxnHeader> h = Headers(*r);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].lsn, 1u);
  EXPECT_EQ(h[0].mapping_id, m);
  ASSERT_EQ(h[0].blocks.size(), 2u);
  EXPECT_EQ(h[0].blocks[0].block, 1u);
  EXPECT_EQ(h[0].blocks[1].block, 3u);
  EXPECT_EQ(h[1].lsn, 2u);
}

TEST_F(PendingReaderTest, ImagesStreamInKeyOrderSkippingTheOnesNotAskedFor) {
  const uint64_t m = AddMapping();
  std::vector<std::pair<uint64_t, char>> many;
  for (uint64_t b = 0; b < 40; ++b) many.push_back({b, static_cast<char>('A' + b % 26)});
  ASSERT_OK(CommitBlocks(m, many).status());
  ASSERT_OK(CommitBlocks(m, {{7, 'z'}}).status());
  std::unique_ptr<PendingReader> r = Reader();
  std::vector<TxnHeader> h = Headers(*r);
  // Block 0, then 2 (steps over 1), then 35 (seeks past many), then the next transaction.
  for (uint64_t b : {0, 2, 35}) {
    ASSERT_OK_AND_ASSIGN(absl::string_view image, r->ReadImage(1, h[0].blocks[b]));
    EXPECT_EQ(image, Image(static_cast<char>('A' + b % 26)));
  }
  ASSERT_OK_AND_ASSIGN(absl::string_view image, r->ReadImage(2, h[1].blocks[0]));
  EXPECT_EQ(image, Image('z'));
}

TEST_F(PendingReaderTest, TheSnapshotKeepsRecordsDeletedAfterTheReaderWasMade) {
  const uint64_t m = AddMapping();
  ASSERT_OK(CommitBlocks(m, {{0, 'x'}}).status());
  std::unique_ptr<PendingReader> r = Reader();
  ASSERT_OK(journal_->MarkApplied(1));
  EXPECT_TRUE(Pending().empty());
  std::vector<TxnHeader> h = Headers(*r);
  ASSERT_EQ(h.size(), 1u);
  ASSERT_OK_AND_ASSIGN(absl::string_view image, r->ReadImage(1, h[0].blocks[0]));
  EXPECT_EQ(image, Image('x'));
  EXPECT_THAT(Reader()->ReadHeader(1), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(PendingReaderTest, ADamagedImageIsDataLossNamingItsTransactionAndBlock) {
  const uint64_t m = AddMapping();
  ASSERT_OK(CommitBlocks(m, {{4, 'q'}, {5, 'r'}}).status());
  std::string bad = EncodeTxnPayload(Image('r'));
  bad[9] ^= 1;
  PutRaw(TxnPayloadKey(1, 5), bad);
  std::unique_ptr<PendingReader> r = Reader();
  std::vector<TxnHeader> h = Headers(*r);
  EXPECT_OK(r->ReadImage(1, h[0].blocks[0]).status());
  absl::StatusOr<absl::string_view> image = r->ReadImage(1, h[0].blocks[1]);
  EXPECT_THAT(image, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(image.status().message(), HasSubstr("transaction 1, block 5"));
}

TEST_F(PendingReaderTest, AnImageThatDiffersFromItsHeaderOrIsMissingIsDataLoss) {
  const uint64_t m = AddMapping();
  ASSERT_OK(CommitBlocks(m, {{4, 'q'}, {6, 's'}}).status());
  // A valid payload, but not the one the header describes.
  PutRaw(TxnPayloadKey(1, 4), EncodeTxnPayload(Image('Q')));
  std::unique_ptr<PendingReader> r = Reader();
  std::vector<TxnHeader> h = Headers(*r);
  EXPECT_THAT(r->ReadImage(1, h[0].blocks[0]), StatusIs(absl::StatusCode::kDataLoss));
  TxnBlock absent = h[0].blocks[1];
  absent.block = 5;
  absl::StatusOr<absl::string_view> missing = r->ReadImage(1, absent);
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(missing.status().message(), HasSubstr("missing"));
}

TEST_F(PendingReaderTest, ReadTransactionReadsEveryImageOfOneTransaction) {
  const uint64_t m = AddMapping();
  ASSERT_OK(CommitBlocks(m, {{1, 'a'}, {2, 'b'}, {9, 'c'}}).status());
  ASSERT_OK(CommitBlocks(m, {{2, 'd'}}).status());
  ASSERT_OK_AND_ASSIGN(Transaction t, journal_->ReadTransaction(1));
  ASSERT_EQ(t.blocks.size(), 3u);
  EXPECT_EQ(t.blocks[2].block, 9u);
  EXPECT_EQ(t.blocks[2].data, Image('c'));
  EXPECT_THAT(journal_->ReadTransaction(3), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace umap::journal
