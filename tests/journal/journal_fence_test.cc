// JournalFence and the Journal behind it: one owner at a time, and a former owner that comes
// back after another took over writes nothing and says why (journal/journal_fence.h).
#include "journal/journal_fence.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/ofd_lock.h"
#include "base/posix_error.h"
#include "tests/journal/journal_test_util.h"

namespace umap::journal {
namespace {

using ::testing::HasSubstr;
using ::umap::testing::StatusIs;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every file of a directory but the owner record, with its bytes.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename();
    if (name != JournalFence::kFileName) out[name] = ReadText(e.path());
  }
  return out;
}

class JournalFenceTest : public ::testing::Test {
 protected:
  std::string Dir() const { return dir_.path(); }
  std::unique_ptr<JournalFence> Acquire(uint64_t expected = 0) {
    absl::StatusOr<std::unique_ptr<JournalFence>> f = JournalFence::Acquire(Dir(), expected);
    EXPECT_OK(f.status());
    return f.ok() ? *std::move(f) : nullptr;
  }
  std::string Me() const { return absl::StrCat("pid ", ::getpid(), " on ", HostName()); }

  testing::TempDir dir_;
};

TEST_F(JournalFenceTest, OwnerRecordIsReadableTextWithEpochAndState) {
  std::unique_ptr<JournalFence> f = Acquire();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->epoch(), 1u);
  const std::string path = Dir() + "/" + JournalFence::kFileName;
  EXPECT_THAT(ReadText(path), HasSubstr(absl::StrCat("umap-journal-owner 1 epoch=1 state=open pid=",
                                                     ::getpid())));
  f->Release();
  EXPECT_THAT(ReadText(path), HasSubstr("epoch=1 state=closed"));
  f.reset();
  EXPECT_EQ(Acquire()->epoch(), 2u) << "every new owner is a new epoch";
}

// Deleting UMAP-OWNER under a live owner hands the journal to nobody: the next Acquire is
// refused by the directory's own lock (naming the owner's pid) and creates nothing, and the
// owner, whose record file no longer proves anything, is fenced at its next check.
TEST_F(JournalFenceTest, DeletingTheOwnerRecordHandsTheJournalToNobody) {
  std::unique_ptr<JournalFence> a = Acquire();
  ASSERT_NE(a, nullptr);
  const std::string path = Dir() + "/" + JournalFence::kFileName;
  ASSERT_EQ(::unlink(path.c_str()), 0);
  absl::StatusOr<std::unique_ptr<JournalFence>> b = JournalFence::Acquire(Dir(), 0);
  EXPECT_THAT(b, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(ErrnoFromStatus(b.status()), EBUSY);
  EXPECT_THAT(b.status().message(), HasSubstr(absl::StrCat("process ", ::getpid())));
  EXPECT_THAT(b.status().message(), HasSubstr("which no file deleted in it releases"));
  EXPECT_FALSE(std::filesystem::exists(path)) << "the refused Acquire created an owner record";
  absl::Status s = a->Check();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(ErrnoFromStatus(s), ESTALE);
  EXPECT_THAT(s.message(), HasSubstr("was deleted or replaced"));
  EXPECT_TRUE(a->fenced());
}

// A replaced record file (deleted, and a new one written by someone) fences the owner too.
TEST_F(JournalFenceTest, AReplacedOwnerRecordFencesTheOwner) {
  std::unique_ptr<JournalFence> a = Acquire();
  ASSERT_NE(a, nullptr);
  const std::string path = Dir() + "/" + JournalFence::kFileName;
  const std::string text = ReadText(path);
  ASSERT_EQ(::unlink(path.c_str()), 0);
  std::ofstream(path) << text;  // the same bytes, another file
  EXPECT_EQ(ErrnoFromStatus(a->Check()), ESTALE);
}

TEST_F(JournalFenceTest, SecondOwnerIsBusyAndNamesTheFirst) {
  std::unique_ptr<JournalFence> a = Acquire();
  ASSERT_NE(a, nullptr);
  absl::StatusOr<std::unique_ptr<JournalFence>> b = JournalFence::Acquire(Dir(), 0);
  EXPECT_THAT(b, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(ErrnoFromStatus(b.status()), EBUSY);
  EXPECT_THAT(b.status().message(), HasSubstr("is in use by " + Me()));
  EXPECT_OK(a->Check()) << "the first owner is undisturbed";
}

TEST_F(JournalFenceTest, AFormerOwnerWhoseLockWasDroppedIsFencedWhenAnotherTakesOver) {
  std::unique_ptr<JournalFence> a = Acquire();
  ASSERT_NE(a, nullptr);
  EXPECT_OK(a->Check());
  // A's file system loses contact with it and drops its lock; B (here: a second owner object
  // of this process) takes the journal over.
  a->TEST_DropOwnerLock();
  std::unique_ptr<JournalFence> b = Acquire();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->epoch(), 2u);
  absl::Status s = a->Check();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(ErrnoFromStatus(s), ESTALE);
  EXPECT_THAT(s.message(), HasSubstr("is no longer this process's (" + Me()));
  EXPECT_THAT(s.message(), HasSubstr("epoch 1"));
  EXPECT_THAT(s.message(), HasSubstr("epoch 2"));
  EXPECT_TRUE(a->fenced());
  // For good, even once B is gone.
  b.reset();
  EXPECT_THAT(a->Check(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(a->CheckFresh(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(JournalFenceTest, ALostLockAloneFencesTheOwner) {
  std::unique_ptr<JournalFence> a = Acquire();
  ASSERT_NE(a, nullptr);
  a->TEST_DropOwnerLock();
  absl::Status s = a->Check();
  EXPECT_EQ(ErrnoFromStatus(s), ESTALE) << s;
  EXPECT_THAT(s.message(), HasSubstr("the file system dropped its owner lock"));
}

TEST_F(JournalFenceTest, ADamagedRecordFencesTheOwner) {
  std::unique_ptr<JournalFence> a = Acquire();
  ASSERT_NE(a, nullptr);
  const std::string path = Dir() + "/" + JournalFence::kFileName;
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "umap-journal-owner 1 epoch=9", 28, 0), 28);
  ::close(fd);
  absl::Status s = a->Check();
  EXPECT_EQ(ErrnoFromStatus(s), ESTALE) << s;
  EXPECT_THAT(s.message(), HasSubstr("damaged journal owner record"));
}

TEST_F(JournalFenceTest, AReopenKeepsItsEpochUnlessAnotherTookOver) {
  std::unique_ptr<JournalFence> a = Acquire();
  ASSERT_NE(a, nullptr);
  a.reset();  // a reopen after a write error: the old instance goes first
  a = Acquire(/*expected=*/1);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->epoch(), 1u);
  a.reset();
  std::unique_ptr<JournalFence> b = Acquire();  // another process took it over meanwhile
  ASSERT_NE(b, nullptr);
  b.reset();
  absl::StatusOr<std::unique_ptr<JournalFence>> again = JournalFence::Acquire(Dir(), 1);
  EXPECT_THAT(again, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(ErrnoFromStatus(again.status()), ESTALE);
  EXPECT_THAT(again.status().message(), HasSubstr("was taken over by " + Me()));
  EXPECT_THAT(again.status().message(), HasSubstr("epoch 2"));
  // And it wrote nothing: the record still names epoch 2.
  EXPECT_THAT(ReadText(Dir() + "/" + JournalFence::kFileName), HasSubstr("epoch=2 state=open"));
}

class FencedJournalTest : public ::testing::Test, public JournalFixture {};

TEST_F(FencedJournalTest, AFencedJournalCommitsNothingAndLeavesTheNewOwnersFilesAlone) {
  OpenJournal();
  const uint64_t m = AddMapping();
  ASSERT_OK_AND_ASSIGN(Transaction t1, CommitBlocks(m, {{1, 'a'}}));
  // A (journal_) is cut off: its file system drops its owner lock, and another owner takes
  // the directory over (here only its fence: RocksDB refuses a second open in one process).
  journal_->TEST_fence()->TEST_DropOwnerLock();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JournalFence> b, JournalFence::Acquire(Options().dir, 0));
  EXPECT_EQ(b->epoch(), 2u);
  const std::map<std::string, std::string> before = Snapshot(Options().dir);
  // A's last check (at t1's commit) stands for JournalFence::kFreshMicros; a real takeover
  // waits seconds for the file system to drop A's lock.
  std::this_thread::sleep_for(std::chrono::microseconds(JournalFence::kFreshMicros + 1000));

  absl::StatusOr<Transaction> t2 = CommitBlocks(m, {{2, 'b'}});
  EXPECT_THAT(t2, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(ErrnoFromStatus(t2.status()), ESTALE);
  EXPECT_THAT(t2.status().message(), HasSubstr("epoch 2"));
  EXPECT_THAT(journal_->CheckOwner(), StatusIs(absl::StatusCode::kFailedPrecondition));
  // Every other write is refused too (the journal is poisoned), and closing it writes nothing.
  EXPECT_THAT(journal_->Stage(m, 3, Image('c')), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(journal_->MarkApplied(t1.lsn).ok());
  journal_.reset();
  EXPECT_EQ(Snapshot(Options().dir), before) << "the former owner wrote into the directory";

  // The new owner's journal holds t1 only.
  b.reset();
  OpenJournal();
  EXPECT_EQ(journal_->epoch(), 3u);
  EXPECT_EQ(Pending(), std::vector<uint64_t>{t1.lsn});
}

TEST_F(FencedJournalTest, AReadOnlyOpenTakesNoEpoch) {
  OpenJournal();
  ASSERT_OK(CommitBlocks(AddMapping(), {{1, 'a'}}).status());
  journal_.reset();
  const std::string record = Options().dir + "/" + JournalFence::kFileName;
  EXPECT_THAT(ReadText(record), HasSubstr("epoch=1 state=closed"));
  JournalOptions o = Options();
  o.read_only = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Journal> ro, Journal::Open(o));
  EXPECT_EQ(ro->epoch(), 0u);
  EXPECT_OK(ro->CheckOwner());
  ro.reset();
  EXPECT_THAT(ReadText(record), HasSubstr("epoch=1 state=closed")) << "a reader wrote the record";
  OpenJournal();
  EXPECT_EQ(journal_->epoch(), 2u);
}

}  // namespace
}  // namespace umap::journal
