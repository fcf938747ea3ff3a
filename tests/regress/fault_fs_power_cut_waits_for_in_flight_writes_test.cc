// Regression (found by tests/runtime/durability_property_test.cc: the check that a runtime
// destroyed with FaultEnv and FaultFs frozen writes nothing saw a journal file change after
// the freeze, from a RocksDB background write that was already in flight).
//
// FaultFs checked "frozen" and then called the base FileSystem without any lock, so an
// append that had passed the check when SimulatePowerCut() ran could land afterwards, even
// after DropUnsyncedData() had cut the file back: a "power cut" that kept bytes written
// after it. SimulatePowerCut() now waits for such calls.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "faultinject/fault_fs.h"
#include "rocksdb/file_system.h"
#include "tests/testing/temp_dir.h"

namespace umap::faultinject {
namespace {

// Appends block until `release` is notified, once `entered` says one is inside the base.
class SlowAppendFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  SlowAppendFile(std::unique_ptr<rocksdb::FSWritableFile> t, absl::Notification* entered,
                 absl::Notification* release)
      : FSWritableFileOwnerWrapper(std::move(t)), entered_(entered), release_(release) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    if (!entered_->HasBeenNotified()) entered_->Notify();
    release_->WaitForNotification();
    return target()->Append(data, options, dbg);
  }

 private:
  absl::Notification* entered_;
  absl::Notification* release_;
};

class SlowAppendFs final : public rocksdb::FileSystemWrapper {
 public:
  SlowAppendFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "SlowAppendFs"; }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, r, dbg);
    if (s.ok()) *r = std::make_unique<SlowAppendFile>(std::move(*r), &entered, &release);
    return s;
  }
  absl::Notification entered, release;
};

TEST(RegressFaultFs, PowerCutWaitsForAnAppendInFlightSoNothingLandsAfterTheDrop) {
  umap::testing::TempDir dir;
  const std::string path = dir.File("000007.log");
  auto slow = std::make_shared<SlowAppendFs>();
  FaultFs fs(slow);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  ASSERT_TRUE(fs.NewWritableFile(path, rocksdb::FileOptions(), &file, nullptr).ok());
  // The name is durable (directory synced), so the cut keeps the file and cuts its tail.
  std::unique_ptr<rocksdb::FSDirectory> d;
  ASSERT_TRUE(fs.NewDirectory(dir.path(), rocksdb::IOOptions(), &d, nullptr).ok());
  ASSERT_TRUE(d->Fsync(rocksdb::IOOptions(), nullptr).ok());

  std::thread writer([&] {
    // Passes the frozen check, then blocks inside the base: in flight at the cut.
    (void)file->Append(rocksdb::Slice("unsynced bytes"), rocksdb::IOOptions(), nullptr);
  });
  slow->entered.WaitForNotification();
  std::atomic<bool> cut_done{false};
  std::thread cutter([&] {
    fs.SimulatePowerCut();
    EXPECT_TRUE(fs.DropUnsyncedData().ok());
    cut_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(cut_done) << "the cut returned while an append was still writing";
  slow->release.Notify();
  writer.join();
  cutter.join();
  // The append was never synced: after the cut nothing of it may remain.
  std::error_code ec;
  EXPECT_EQ(std::filesystem::file_size(path, ec), 0u) << ec.message();
  fs.Restart();
  file.reset();
}

}  // namespace
}  // namespace umap::faultinject
