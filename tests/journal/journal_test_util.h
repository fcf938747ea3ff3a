// Fixture helpers for Journal tests: a journal in a fresh directory over a FaultFs, and
// verbs that read like the protocol.
#ifndef UMAP_TESTS_JOURNAL_JOURNAL_TEST_UTIL_H_
#define UMAP_TESTS_JOURNAL_JOURNAL_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "faultinject/fault_fs.h"
#include "journal/journal.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace umap::journal {

// A block image of `n` bytes filled with `fill`.
inline std::string Image(char fill, size_t n = 4096) { return std::string(n, fill); }

// A file as a map block -> image; replaying a transaction writes its images.
using BlockFile = std::map<uint64_t, std::string>;

inline void Apply(const Transaction& txn, BlockFile* file) {
  for (const CommittedBlock& b : txn.blocks) (*file)[b.block] = b.data;
}

class JournalFixture {
 public:
  JournalFixture()
      : fs_(std::make_shared<faultinject::FaultFs>(rocksdb::FileSystem::Default())) {}

  JournalOptions Options() const {
    JournalOptions o;
    o.dir = dir_.File("journal");
    o.fs = fs_;
    o.staged_quota_bytes = quota_;
    o.commit_batch_bytes = commit_batch_bytes_;
    return o;
  }
  // Opens the journal (the test fails if it cannot).
  void OpenJournal() {
    absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(Options());
    ASSERT_OK(j.status());
    journal_ = *std::move(j);
  }
  void Reopen() {
    journal_.reset();
    OpenJournal();
  }
  // Registers a file of this test; returns its mapping id.
  uint64_t AddMapping(Policy policy = Policy::kAtomic, Contents contents = Contents::kData,
                      uint32_t block_size = 4096) {
    FileIdentity file{dir_.File(absl::StrCat("file", ++files_)), 1, files_, 1 << 20};
    absl::StatusOr<uint64_t> id = journal_->RegisterMapping(file, block_size, policy, contents);
    EXPECT_OK(id.status());
    return id.ok() ? *id : 0;
  }
  // Commits single-image blocks {block, fill} and no range.
  absl::StatusOr<Transaction> CommitBlocks(uint64_t mapping,
                                           const std::vector<std::pair<uint64_t, char>>& blocks,
                                           uint64_t first = 0, uint64_t end = 0) {
    std::vector<std::string> images;
    std::vector<BlockWrite> writes;
    images.reserve(blocks.size());
    for (const auto& [block, fill] : blocks) images.push_back(Image(fill));
    for (size_t i = 0; i < blocks.size(); ++i) writes.push_back({blocks[i].first, images[i]});
    return journal_->Commit(mapping, writes, first, end);
  }
  std::vector<uint64_t> Pending() const { return journal_->PendingLsns(); }

  // Every WAL sync (Sync and Fsync) fails with `fault` until HealFs.
  void FailWalSyncs(faultinject::FsFault fault) {
    using faultinject::FsOp;
    for (FsOp op : {FsOp::kSync, FsOp::kFsync}) {
      faultinject::FsFault f = fault;
      ASSERT_OK(fs_->FailOneIn(op, 1, 0, std::move(f).OnlyFor(faultinject::FileClass::kWal)));
    }
  }
  // Every WAL append fails with IOError until HealFs.
  void FailWalAppends() {
    ASSERT_OK(fs_->FailOneIn(faultinject::FsOp::kAppend, 1, 0,
                             faultinject::FsFault::IOError().OnlyFor(faultinject::FileClass::kWal)));
  }
  void HealFs() { fs_->ClearAll(); }
  // Calls failed by injection so far.
  uint64_t Injected() const {
    uint64_t n = 0;
    for (uint64_t f : fs_->counters().fired) n += f;
    return n;
  }

  umap::testing::TempDir dir_;
  std::shared_ptr<faultinject::FaultFs> fs_;
  uint64_t quota_ = 1ull << 30;
  size_t commit_batch_bytes_ = JournalOptions{}.commit_batch_bytes;
  std::unique_ptr<Journal> journal_;
  uint64_t files_ = 0;
};

}  // namespace umap::journal

#endif  // UMAP_TESTS_JOURNAL_JOURNAL_TEST_UTIL_H_
