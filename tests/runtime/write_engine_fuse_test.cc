// The WriteEngine (base/write_engine.h: the one path of write-backs and applies to a data
// file) on umap-faultfuse descriptors, with io_uring: the writes of one call are in flight
// together at the file system; a write past its deadline is cancelled, cannot be taken back
// on FUSE, is waited for and reported as ETIMEDOUT; an error fails the call with its errno
// and offset and stops further issue; short writes are finished from their last byte; a
// torn write fails the call and leaves its prefix. And an armed crash point leaves the
// writes concurrent: its n-th hit finds n-1 writes issued and still held by the server.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/crash_point.h"
#include "base/posix_error.h"
#include "base/write_engine.h"
#include "tests/faultinject/fault_fuse_fixture.h"
#include "tests/testing/status_matchers.h"

namespace umap {
namespace {

using ::umap::faultinject::FaultFuse;
using ::umaptest::PatternAt;

constexpr size_t kBlock = 4096;
constexpr uint64_t kBlocks = 32;

std::vector<FaultFuse::Request> Writes(FaultFuse& fs) {
  auto h = fs.History("data");
  EXPECT_TRUE(h.ok()) << h.status();
  std::vector<FaultFuse::Request> out;
  for (FaultFuse::Request& r : h.value_or(std::vector<FaultFuse::Request>{})) {
    if (r.op == "write") out.push_back(std::move(r));
  }
  return out;
}

// Writes made of whole blocks, each filled with its own letter.
struct Blocks {
  std::vector<std::string> bytes;
  std::vector<WritePiece> pieces;
  explicit Blocks(const std::vector<uint64_t>& blocks) {
    bytes.reserve(blocks.size());
    for (uint64_t b : blocks) bytes.emplace_back(kBlock, static_cast<char>('A' + b % 26));
    for (size_t i = 0; i < blocks.size(); ++i) {
      pieces.push_back({blocks[i] * kBlock, bytes[i].data(), kBlock});
    }
  }
};

class WriteEngineFuseTest : public ::umaptest::FaultFuseTest {
 protected:
  // Every handle direct: each write the engine issues is one request at the server, and
  // writes to one file are not serialised by the page cache.
  FaultFuse::Options FuseOptions() override {
    FaultFuse::Options o;
    o.direct_io = "all";
    return o;
  }
  void SetUp() override {
    ::umaptest::FaultFuseTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    MakeFile("data", kBlocks * kBlock);
    auto f = Env::Default()->OpenFile(fs_->Path("data"), OpenMode::kReadWrite);
    ASSERT_TRUE(f.ok()) << f.status();
    file_ = *std::move(f);
    ASSERT_OK(fs_->ClearHistory());
  }
  void TearDown() override {
    file_.reset();
    ::umaptest::FaultFuseTest::TearDown();
  }
  std::unique_ptr<WriteEngine> Engine(unsigned depth, uint64_t timeout_ms = 30'000) {
    return std::make_unique<WriteEngine>(
        WriteEngineOptions{/*use_uring=*/true, depth, 512 << 10, timeout_ms * 1000},
        Env::Default());
  }
  // The backing file's block `b`.
  std::string BackingBlock(uint64_t b) { return Backing("data").substr(b * kBlock, kBlock); }

  std::unique_ptr<File> file_;
};

TEST_F(WriteEngineFuseTest, TheWritesOfOneCallAreInFlightTogether) {
  std::unique_ptr<WriteEngine> e = Engine(8);
  Blocks w({0, 2, 4, 6, 8, 10, 12, 14});
  ASSERT_OK(fs_->Arm("write path=data count=0 stall=forever").status());
  std::atomic<bool> returned{false};
  absl::Status st;
  std::thread writer([&] {
    st = e->Write(file_.get(), w.pieces, [] {});
    returned = true;
  });
  ASSERT_OK(fs_->WaitStalled(8));
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(fs_->Release().value(), 8);
  writer.join();
  ASSERT_OK(st);
  EXPECT_EQ(fs_->Stat("max_inflight_write").value(), 8);
  EXPECT_EQ(e->counters().writes.load(), 8u);
  EXPECT_EQ(e->counters().write_bytes.load(), 8 * kBlock);
  for (uint64_t b = 0; b < 16; ++b) {
    EXPECT_EQ(BackingBlock(b), b % 2 == 0 ? w.bytes[b / 2] : PatternAt(b * kBlock, kBlock)) << b;
  }
}

TEST_F(WriteEngineFuseTest, AdjacentPiecesMergeIntoOneWrite) {
  std::unique_ptr<WriteEngine> e = Engine(8);
  Blocks w({3, 4, 5, 6, 9});
  ASSERT_OK(e->Write(file_.get(), w.pieces, [] {}));
  std::vector<FaultFuse::Request> writes = Writes(*fs_);
  ASSERT_EQ(writes.size(), 2u);
  // The two writes are in flight together; the server may see them in either order.
  std::sort(writes.begin(), writes.end(),
            [](const FaultFuse::Request& a, const FaultFuse::Request& b) {
              return a.offset < b.offset;
            });
  EXPECT_EQ(writes[0].offset, 3 * kBlock);
  EXPECT_EQ(writes[0].len, 4 * kBlock);
  EXPECT_EQ(writes[1].offset, 9 * kBlock);
  EXPECT_EQ(writes[1].len, kBlock);
  EXPECT_EQ(e->counters().writes.load(), 2u);
}

// A hung request on FUSE cannot be cancelled (asynchronous direct I/O), and its buffer is
// the caller's: the engine cancels at the deadline, keeps waiting, and when the server
// answers reports ETIMEDOUT (the caller treats every piece as not written).
TEST_F(WriteEngineFuseTest, AWritePastItsDeadlineIsWaitedForThenReportedAsEtimedout) {
  std::unique_ptr<WriteEngine> e = Engine(8, /*timeout_ms=*/100);
  Blocks w({1, 4, 7});
  ASSERT_OK(fs_->Arm(absl::StrCat("write path=data at=", 4 * kBlock, " stall=forever")).status());
  std::atomic<bool> returned{false};
  absl::Status st;
  std::thread writer([&] {
    st = e->Write(file_.get(), w.pieces, [] {});
    returned = true;
  });
  ASSERT_OK(fs_->WaitStalled(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_FALSE(returned.load()) << "returned while the server still held its buffer";
  EXPECT_EQ(e->counters().write_timeouts.load(), 1u);
  EXPECT_EQ(fs_->Stat("interrupts").value(), 0) << "the cancellation reached the server";
  EXPECT_EQ(fs_->Release().value(), 1);
  writer.join();
  EXPECT_EQ(ErrnoFromStatus(st), ETIMEDOUT) << st;
  EXPECT_NE(st.message().find(absl::StrCat("at offset ", 4 * kBlock, " passed its deadline")),
            std::string::npos)
      << st;
  EXPECT_EQ(e->counters().writes.load(), 3u);
}

TEST_F(WriteEngineFuseTest, AWriteErrorFailsTheCallWithItsErrnoAndOffsetAndStopsIssue) {
  std::unique_ptr<WriteEngine> e = Engine(1);
  Blocks w({0, 2, 4, 6});
  ASSERT_OK(fs_->Arm("write path=data skip=1 error=ENOSPC").status());
  absl::Status st = e->Write(file_.get(), w.pieces, [] {});
  EXPECT_EQ(ErrnoFromStatus(st), ENOSPC) << st;
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find(absl::StrCat("write of 4096 bytes to ", fs_->Path("data"),
                                           " at offset ", 2 * kBlock)),
            std::string::npos)
      << st;
  std::vector<FaultFuse::Request> writes = Writes(*fs_);
  ASSERT_EQ(writes.size(), 2u) << "a write was issued after the error";
  EXPECT_EQ(writes[1].result, -ENOSPC);
  EXPECT_EQ(e->counters().writes.load(), 1u);
  EXPECT_EQ(BackingBlock(2), PatternAt(2 * kBlock, kBlock));
}

TEST_F(WriteEngineFuseTest, ARunOfAdjacentBlocksIsOneWriteRequest) {
  std::unique_ptr<WriteEngine> e = Engine(8);
  Blocks w({20, 21, 22, 23});
  ASSERT_OK(e->Write(file_.get(), w.pieces, [] {}));
  std::vector<FaultFuse::Request> writes = Writes(*fs_);
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0].offset, 20 * kBlock);
  EXPECT_EQ(writes[0].len, 4 * kBlock);
  for (uint64_t b = 20; b < 24; ++b) EXPECT_EQ(BackingBlock(b), w.bytes[b - 20]) << b;
}

// With asynchronous direct I/O the kernel turns a short reply to an io_uring write into
// EIO (fuse_get_res_by_io): the engine reports EIO, and the caller treats every piece as
// not written.
TEST_F(WriteEngineFuseTest, AShortReplyToAnAsynchronousWriteIsEio) {
  std::unique_ptr<WriteEngine> e = Engine(8);
  Blocks w({10, 11, 12, 13});
  ASSERT_OK(fs_->Arm("write path=data short=1000").status());
  absl::Status st = e->Write(file_.get(), w.pieces, [] {});
  EXPECT_EQ(ErrnoFromStatus(st), EIO) << st;
  EXPECT_NE(st.message().find(absl::StrCat("write of ", 4 * kBlock, " bytes")), std::string::npos)
      << st;
  std::vector<FaultFuse::Request> writes = Writes(*fs_);
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0].result, 1000);
}

class WriteEngineSyncDioFuseTest : public WriteEngineFuseTest {
 protected:
  FaultFuse::Options FuseOptions() override {
    FaultFuse::Options o = WriteEngineFuseTest::FuseOptions();
    o.async_dio = false;
    return o;
  }
};

// Without asynchronous direct I/O the short count reaches io_uring: a merged write of four
// blocks answered with 1000 bytes is finished by the engine itself, piece by piece from
// byte 1000 on.
TEST_F(WriteEngineSyncDioFuseTest, AShortWriteIsFinishedFromWhereItStopped) {
  std::unique_ptr<WriteEngine> e = Engine(8);
  Blocks w({10, 11, 12, 13});
  ASSERT_OK(fs_->Arm("write path=data short=1000").status());
  ASSERT_OK(e->Write(file_.get(), w.pieces, [] {}));
  for (uint64_t b = 10; b < 14; ++b) EXPECT_EQ(BackingBlock(b), w.bytes[b - 10]) << b;
  std::vector<FaultFuse::Request> writes = Writes(*fs_);
  ASSERT_EQ(writes.size(), 5u);
  EXPECT_EQ(writes[0].offset, 10 * kBlock);
  EXPECT_EQ(writes[0].len, 4 * kBlock);
  EXPECT_EQ(writes[0].result, 1000);
  EXPECT_EQ(writes[1].offset, 10 * kBlock + 1000);
  EXPECT_EQ(writes[1].len, kBlock - 1000);
  for (uint64_t i = 2; i < 5; ++i) {
    EXPECT_EQ(writes[i].offset, (9 + i) * kBlock);
    EXPECT_EQ(writes[i].len, kBlock);
  }
  EXPECT_EQ(e->counters().writes.load(), 1u);
  EXPECT_EQ(e->counters().write_bytes.load(), 4 * kBlock);
}

TEST_F(WriteEngineFuseTest, ATornWriteFailsTheCallAndLeavesItsPrefixInTheFile) {
  std::unique_ptr<WriteEngine> e = Engine(8);
  Blocks w({12});
  ASSERT_OK(fs_->Arm("write path=data tear=100").status());
  absl::Status st = e->Write(file_.get(), w.pieces, [] {});
  EXPECT_EQ(ErrnoFromStatus(st), EIO) << st;
  EXPECT_EQ(BackingBlock(12),
            w.bytes[0].substr(0, 100) + PatternAt(12 * kBlock + 100, kBlock - 100));
}

// apply.mid_write:3 on a server that holds every write 300 ms: when the third hit comes, the
// first two writes are issued and held at the server (and the third is not), not done one
// at a time.
TEST_F(WriteEngineFuseTest, AnArmedCrashPointLeavesTheWritesConcurrent) {
  std::unique_ptr<WriteEngine> e = Engine(8);
  Blocks w({0, 2, 4, 6, 8, 10});
  ASSERT_OK(fs_->Arm("write path=data count=0 stall=300").status());
  std::atomic<int64_t> held_at_hit{-1};
  std::atomic<int64_t> answered_at_hit{-1};
  ASSERT_OK(
      crash_point::Arm("apply.mid_write", 3, crash_point::Action::Call([&](absl::string_view) {
                         // Issued is not yet arrived: the server reads the second
                         // request a moment after io_uring_submit returned.
                         fs_->WaitStalled(2, absl::Seconds(2)).IgnoreError();
                         held_at_hit = fs_->Stat("stalled").value_or(-1);
                         int64_t answered = 0;
                         for (const FaultFuse::Request& r : Writes(*fs_)) {
                           answered += r.result.has_value();
                         }
                         answered_at_hit = answered;
                       })));
  absl::Status st = e->Write(file_.get(), w.pieces, [] { UMAP_CRASH_POINT("apply.mid_write"); });
  crash_point::Disarm();
  ASSERT_OK(st);
  EXPECT_EQ(held_at_hit.load(), 2) << "writes 1 and 2 were not in flight at the third hit";
  EXPECT_EQ(answered_at_hit.load(), 0);
  EXPECT_EQ(fs_->Stat("max_inflight_write").value(), 6);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(BackingBlock(2 * i), w.bytes[i]) << i;
}

class WriteEnginePageCacheFuseTest : public WriteEngineFuseTest {
 protected:
  FaultFuse::Options FuseOptions() override { return FaultFuse::Options(); }  // odirect
};

// The runtime writes back through the file's buffered descriptor. On a FUSE file system
// mounted without direct I/O (GlusterFS's default) the kernel then sends the writes of one
// file to the server one at a time (the page-cache write path holds the inode lock for a
// whole request): io_depth brings no concurrency there.
TEST_F(WriteEnginePageCacheFuseTest, OnAPageCacheHandleTheKernelSendsTheWritesOneAtATime) {
  std::unique_ptr<WriteEngine> e = Engine(8);
  Blocks w({0, 2, 4, 6, 8, 10, 12, 14});
  ASSERT_OK(fs_->Arm("write path=data count=0 stall=50").status());
  ASSERT_OK(e->Write(file_.get(), w.pieces, [] {}));
  EXPECT_EQ(fs_->Stat("max_inflight_write").value(), 1);
  EXPECT_EQ(Writes(*fs_).size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(BackingBlock(2 * i), w.bytes[i]) << i;
}

// On a page-cache handle io_uring runs the write in a worker thread, which the kernel's FUSE
// client makes wait for the server. Cancelling it at the deadline signals that worker, and
// the kernel sends FUSE_INTERRUPT: a server that honours it answers EINTR at once, and the
// engine reports the expired write as ETIMEDOUT (not EINTR, which would read as "retry now").
TEST_F(WriteEnginePageCacheFuseTest, ACancellationTheServerHonoursEndsTheWriteAsEtimedout) {
  std::unique_ptr<WriteEngine> e = Engine(8, /*timeout_ms=*/100);
  Blocks w({6});
  ASSERT_OK(fs_->Arm("write path=data stall=forever intr=1").status());
  absl::Status st = e->Write(file_.get(), w.pieces, [] {});
  EXPECT_EQ(ErrnoFromStatus(st), ETIMEDOUT) << st;
  EXPECT_EQ(fs_->Stat("interrupts").value(), 1);
  std::vector<FaultFuse::Request> writes = Writes(*fs_);
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_TRUE(writes[0].interrupted);
  EXPECT_EQ(writes[0].result, -EINTR);
  EXPECT_EQ(BackingBlock(6), PatternAt(6 * kBlock, kBlock));
  EXPECT_EQ(e->counters().write_timeouts.load(), 1u);
}

// A server that ignores the interrupt (hung): the engine waits for it, then ETIMEDOUT.
TEST_F(WriteEnginePageCacheFuseTest, AHungWriteThatIgnoresTheInterruptIsWaitedFor) {
  std::unique_ptr<WriteEngine> e = Engine(8, /*timeout_ms=*/100);
  Blocks w({6});
  ASSERT_OK(fs_->Arm("write path=data stall=forever").status());
  std::atomic<bool> returned{false};
  absl::Status st;
  std::thread writer([&] {
    st = e->Write(file_.get(), w.pieces, [] {});
    returned = true;
  });
  ASSERT_OK(fs_->WaitStalled(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(fs_->Stat("interrupts").value(), 1);
  EXPECT_EQ(fs_->Release("", EIO).value(), 1);
  writer.join();
  EXPECT_EQ(ErrnoFromStatus(st), ETIMEDOUT) << st;
  EXPECT_EQ(BackingBlock(6), PatternAt(6 * kBlock, kBlock));
}

}  // namespace
}  // namespace umap
