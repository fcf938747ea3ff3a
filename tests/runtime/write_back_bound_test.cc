// WriteBack::BoundUnsyncedWrites: a sink bound to `n` bytes never has more than n bytes
// written to its file and not fdatasync'ed, within one call and across calls; a failed
// fdatasync between writes fails the call. (GlusterFS's client acknowledges writes early and
// keeps failed ones in a window of at least 512 KiB per file; a write that finds the window
// full waits for an fdatasync, for good if the writer sends none: docs/chaos.md.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/posix_error.h"
#include "runtime/writeback/write_back.h"
#include "umap/env.h"

namespace umap::runtime {
namespace {

constexpr uint64_t kBs = 4096;

// Records writes and syncs; Sync fails while fail_syncs is set.
class RecordingFile final : public File {
 public:
  absl::StatusOr<size_t> ReadAt(uint64_t, absl::Span<char> dst) override { return dst.size(); }
  absl::Status WriteAt(uint64_t offset, absl::Span<const char> src) override {
    events.push_back(absl::StrCat("w", offset / kBs, "x", src.size() / kBs));
    unsynced += src.size();
    max_unsynced = std::max(max_unsynced, unsynced);
    written += src.size();
    return absl::OkStatus();
  }
  absl::Status Sync() override {
    events.push_back("sync");
    unsynced = 0;
    return fail_syncs ? PosixError(ENOSPC, "fdatasync (test)") : absl::OkStatus();
  }
  absl::StatusOr<uint64_t> Size() override { return 1 << 20; }
  absl::StatusOr<FileIdentity> Identify() override { return FileIdentity{}; }
  const std::string& name() const override { return name_; }

  std::vector<std::string> events;
  uint64_t unsynced = 0, max_unsynced = 0, written = 0;
  bool fail_syncs = false;

 private:
  std::string name_ = "recording";
};

// Images of the given blocks (not adjacent, so each is its own write).
std::vector<BlockImage> Images(const std::vector<uint64_t>& blocks, const std::string& bytes) {
  std::vector<BlockImage> out;
  for (uint64_t b : blocks) out.push_back({b, absl::MakeConstSpan(bytes.data(), kBs)});
  return out;
}

TEST(WriteBackBoundTest, NeverMoreThanTheBoundUnsyncedWithinOneCall) {
  RecordingFile f;
  DirectWriteBack sink(&f, kBs);
  sink.BoundUnsyncedWrites(3 * kBs);
  const std::string bytes(kBs, 'x');
  ASSERT_TRUE(sink.Sync(Images({0, 2, 4, 6, 8, 10, 12, 14}, bytes), 0, 16).ok());
  EXPECT_EQ(f.written, 8 * kBs) << "every image written";
  EXPECT_LE(f.max_unsynced, 3 * kBs);
  EXPECT_EQ(f.events.back(), "sync") << "and the umsync's own fdatasync last";
  EXPECT_EQ(f.events, (std::vector<std::string>{"w0x1", "w2x1", "w4x1", "sync", "w6x1", "w8x1",
                                                "w10x1", "sync", "w12x1", "w14x1", "sync"}));
}

TEST(WriteBackBoundTest, UnsyncedBytesOfEarlierCallsCount) {
  RecordingFile f;
  DirectWriteBack sink(&f, kBs);
  sink.BoundUnsyncedWrites(3 * kBs);
  const std::string bytes(kBs, 'x');
  // Evictions write without a sync of their own: the second one's would pass the bound.
  ASSERT_TRUE(sink.Evicted(Images({0, 2}, bytes)).ok());
  ASSERT_TRUE(sink.Evicted(Images({4, 6}, bytes)).ok());
  EXPECT_EQ(f.events, (std::vector<std::string>{"w0x1", "w2x1", "w4x1", "sync", "w6x1"}));
  EXPECT_LE(f.max_unsynced, 3 * kBs);
}

TEST(WriteBackBoundTest, AFailedFdatasyncBetweenWritesFailsTheCallAndWritesNoMore) {
  RecordingFile f;
  DirectWriteBack sink(&f, kBs);
  sink.BoundUnsyncedWrites(2 * kBs);
  f.fail_syncs = true;
  const std::string bytes(kBs, 'x');
  WriteBackResult r = sink.Sync(Images({0, 2, 4, 6}, bytes), 0, 8);
  EXPECT_EQ(ErrnoFromStatus(r.status), ENOSPC) << r.status;
  EXPECT_EQ(f.events, (std::vector<std::string>{"w0x1", "w2x1", "sync"}));
}

TEST(WriteBackBoundTest, AfterAFailureItWritesAgainOnlyOnceAnFdatasyncSucceeds) {
  RecordingFile f;
  DirectWriteBack sink(&f, kBs);
  sink.BoundUnsyncedWrites(4 * kBs);
  const std::string bytes(kBs, 'x');
  f.fail_syncs = true;
  EXPECT_FALSE(sink.Sync(Images({0, 2}, bytes), 0, 4).ok());
  // Still failing: the retry is the fdatasync alone (it makes the client retry what it
  // holds), no write.
  f.events.clear();
  EXPECT_FALSE(sink.Sync(Images({0, 2}, bytes), 0, 4).ok());
  EXPECT_EQ(f.events, (std::vector<std::string>{"sync"}));
  // Storage back: the fdatasync succeeds, then the writes and the umsync's own fdatasync.
  f.fail_syncs = false;
  f.events.clear();
  EXPECT_TRUE(sink.Sync(Images({0, 2}, bytes), 0, 4).ok());
  EXPECT_EQ(f.events, (std::vector<std::string>{"sync", "w0x1", "w2x1", "sync"}));
}

TEST(WriteBackBoundTest, WithoutABoundOneSyncAtTheEnd) {
  RecordingFile f;
  DirectWriteBack sink(&f, kBs);
  const std::string bytes(kBs, 'x');
  ASSERT_TRUE(sink.Sync(Images({0, 2, 4, 6}, bytes), 0, 8).ok());
  EXPECT_EQ(f.events, (std::vector<std::string>{"w0x1", "w2x1", "w4x1", "w6x1", "sync"}));
}

}  // namespace
}  // namespace umap::runtime
