// CommitMark (journal/commit_mark.h): the record of the last acknowledged commit beside the
// WAL. A torn write of one slot leaves the other, older mark; a file with no intact slot is
// damage; concurrent commits share writes and the mark never goes backwards; a commit whose
// mark cannot be written fails and poisons the journal.
#include "journal/commit_mark.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "faultinject/fault_fs.h"
#include "rocksdb/file_system.h"
#include "tests/journal/journal_test_util.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace umap::journal {
namespace {

using ::umap::testing::StatusIs;

std::string MarkPath(const std::string& dir) { return dir + "/" + CommitMark::kFileName; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Overwrite(const std::string& path, uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(CommitMarkTest, ANewFileSaysNothingAcknowledgedAndPublishedMarksReadBack) {
  umap::testing::TempDir dir;
  rocksdb::FileSystem& fs = *rocksdb::FileSystem::Default();
  absl::StatusOr<std::optional<CommitMark::Mark>> none = CommitMark::Read(fs, dir.path());
  ASSERT_OK(none.status());
  EXPECT_FALSE(none->has_value());
  absl::StatusOr<std::unique_ptr<CommitMark>> mark = CommitMark::Open(fs, dir.path(), {});
  ASSERT_OK(mark.status());
  EXPECT_EQ(std::filesystem::file_size(MarkPath(dir.path())), 8192u);
  none = CommitMark::Read(fs, dir.path());
  ASSERT_OK(none.status());
  ASSERT_TRUE(none->has_value());
  EXPECT_EQ((*none)->sequence, 0u) << "created, nothing acknowledged yet";
  for (uint64_t i = 1; i <= 5; ++i) ASSERT_OK((*mark)->Publish({10 * i, i}));
  ASSERT_OK((*mark)->Publish({30, 3}));  // an older one is covered: no write, no step back
  absl::StatusOr<std::optional<CommitMark::Mark>> got = CommitMark::Read(fs, dir.path());
  ASSERT_OK(got.status());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->sequence, 50u);
  EXPECT_EQ((*got)->lsn, 5u);
}

// A power cut during a publish leaves its slot old or new (one sector): both states read.
// Any other change to a slot (zeroed, cut, a flipped byte) is damage, never a reason to fall
// back to the other, older slot; a salvage starts the file over.
TEST(CommitMarkTest, OnlyTheStatesACrashLeavesReadAndAnyDamagedSlotIsDamage) {
  umap::testing::TempDir dir;
  rocksdb::FileSystem& fs = *rocksdb::FileSystem::Default();
  const std::string path = MarkPath(dir.path());
  {
    absl::StatusOr<std::unique_ptr<CommitMark>> mark = CommitMark::Open(fs, dir.path(), {});
    ASSERT_OK(mark.status());
    ASSERT_OK((*mark)->Publish({7, 1}));  // generation 1: slot 1
    const std::string after_first = ReadText(path);
    ASSERT_OK((*mark)->Publish({9, 2}));  // generation 2: slot 0
    const std::string after_second = ReadText(path);
    // The second publish undone by a power cut (slot 0 back to generation 0): reads the first.
    Overwrite(path, 0, after_first.substr(0, 512));
    absl::StatusOr<std::optional<CommitMark::Mark>> got = CommitMark::Read(fs, dir.path());
    ASSERT_OK(got.status());
    EXPECT_EQ((*got)->sequence, 7u);
    Overwrite(path, 0, after_second.substr(0, 512));
  }
  absl::StatusOr<std::optional<CommitMark::Mark>> got = CommitMark::Read(fs, dir.path());
  ASSERT_OK(got.status());
  EXPECT_EQ((*got)->sequence, 9u);
  EXPECT_EQ((*got)->lsn, 2u);
  const std::string good = ReadText(path);
  for (const auto& [offset, bytes] : std::vector<std::pair<uint64_t, std::string>>{
           {20, "garbage"},                  // the newest slot changed
           {4096 + 20, "garbage"},           // the older one
           {4096, std::string(512, '\0')},   // the older one zeroed
           {0, std::string(8192, '\0')}}) {  // all of it
    std::ofstream(path, std::ios::binary) << good;
    Overwrite(path, offset, bytes);
    got = CommitMark::Read(fs, dir.path());
    EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kDataLoss)) << offset;
    EXPECT_NE(std::string(got.status().message()).find(path), std::string::npos);
  }
  std::ofstream(path, std::ios::binary) << good.substr(0, 2067);  // cut
  EXPECT_THAT(CommitMark::Read(fs, dir.path()).status(), StatusIs(absl::StatusCode::kDataLoss));
  // A salvage starts it over.
  absl::StatusOr<std::unique_ptr<CommitMark>> reset =
      CommitMark::Open(fs, dir.path(), CommitMark::Mark{3, 1});
  ASSERT_OK(reset.status());
  got = CommitMark::Read(fs, dir.path());
  ASSERT_OK(got.status());
  EXPECT_EQ((*got)->sequence, 3u);
  ASSERT_OK((*reset)->Publish({5, 2}));
  got = CommitMark::Read(fs, dir.path());
  ASSERT_OK(got.status());
  EXPECT_EQ((*got)->sequence, 5u);
}

TEST(CommitMarkTest, ConcurrentPublishersEndAtTheHighestMark) {
  umap::testing::TempDir dir;
  rocksdb::FileSystem& fs = *rocksdb::FileSystem::Default();
  absl::StatusOr<std::unique_ptr<CommitMark>> mark = CommitMark::Open(fs, dir.path(), {});
  ASSERT_OK(mark.status());
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 50; ++i) EXPECT_OK((*mark)->Publish({i * 8 + t + 1, i * 8 + t + 1}));
    });
  }
  for (std::thread& t : threads) t.join();
  absl::StatusOr<std::optional<CommitMark::Mark>> got = CommitMark::Read(fs, dir.path());
  ASSERT_OK(got.status());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->sequence, 400u);
  EXPECT_EQ((*got)->lsn, 400u);
}

// The commit's WAL write succeeded but its mark could not be written: the commit is not
// acknowledged (an error, the journal poisoned), and the reopened journal holds it (it is in
// the WAL: an indeterminate commit that survived), with the mark not ahead of the log.
TEST(CommitMarkTest, ACommitWhoseMarkFailsIsNotAcknowledgedAndPoisonsTheJournal) {
  JournalFixture fx;
  fx.OpenJournal();
  const uint64_t m = fx.AddMapping();
  ASSERT_OK(fx.CommitBlocks(m, {{0, 'a'}}).status());
  ASSERT_OK(
      fx.fs_->FailNext(faultinject::FsOp::kWrite, 1,
                       faultinject::FsFault::IOError().OnlyFor(faultinject::FileClass::kOther)));
  absl::StatusOr<Transaction> t = fx.CommitBlocks(m, {{1, 'b'}});
  EXPECT_FALSE(t.ok());
  EXPECT_THAT(fx.journal_->poisoned(), StatusIs(absl::StatusCode::kFailedPrecondition));
  fx.fs_->ClearAll();
  fx.Reopen();
  EXPECT_EQ(fx.Pending(), (std::vector<uint64_t>{1, 2}));
}

}  // namespace
}  // namespace umap::journal
