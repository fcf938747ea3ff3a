#include "faultinject/fault_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/mem_env.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace umap::faultinject {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using ::umap::testing::StatusIs;
using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

enum class Backend { kMem, kPosix };
void PrintTo(Backend b, std::ostream* os) { *os << (b == Backend::kMem ? "mem" : "posix"); }

// The same tests run over the in-memory Env and over the POSIX Env in a temp dir.
class FaultEnvTest : public ::testing::TestWithParam<Backend> {
 protected:
  FaultEnvTest() {
    if (GetParam() == Backend::kMem) {
      mem_ = NewMemEnv();
      base_ = mem_.get();
    } else {
      base_ = Env::Default();
    }
    env_ = MakeEnv(/*with_truncate_hook=*/true);
  }

  std::unique_ptr<FaultEnv> MakeEnv(bool with_truncate_hook) {
    FaultEnv::Options o;
    if (mem_ && with_truncate_hook) o.truncate = MemEnvTruncator(mem_.get());
    return std::make_unique<FaultEnv>(base_, std::move(o));
  }

  std::string Path(const std::string& name) {
    return GetParam() == Backend::kMem ? "/mem/" + name : dir_.File(name);
  }

  // Creates (or replaces) a file behind the FaultEnv's back: its content counts as durable.
  std::string Create(const std::string& name, const std::string& contents) {
    std::string path = Path(name);
    if (mem_) {
      EXPECT_OK(MemEnvWriteFile(mem_.get(), path, contents));
    } else {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
    }
    return path;
  }

  // The file as the base Env sees it (after a power cut: "after the reboot").
  std::string Contents(const std::string& path) {
    auto f = base_->OpenFile(path, OpenMode::kReadOnly);
    EXPECT_OK(f.status());
    if (!f.ok()) return "";
    auto size = (*f)->Size();
    EXPECT_OK(size.status());
    std::string out(size.value_or(0), '\0');
    auto n = (*f)->ReadAt(0, absl::MakeSpan(out));
    EXPECT_OK(n.status());
    out.resize(n.value_or(0));
    return out;
  }

  std::unique_ptr<File> Open(const std::string& path, FaultEnv* env = nullptr) {
    auto f = (env ? env : env_.get())->OpenFile(path, OpenMode::kReadWrite);
    EXPECT_OK(f.status());
    return f.ok() ? std::move(f).value() : nullptr;
  }

  // Power cut, drop, reboot.
  void Crash(DropOptions options) {
    env_->SimulatePowerCut();
    ASSERT_OK(env_->DropUnsyncedData(options));
    env_->Restart();
  }

  ::umap::testing::TempDir dir_;
  std::unique_ptr<Env> mem_;
  Env* base_ = nullptr;
  std::unique_ptr<FaultEnv> env_;
};

INSTANTIATE_TEST_SUITE_P(Backends, FaultEnvTest, ::testing::Values(Backend::kMem, Backend::kPosix),
                         [](const auto& info) {
                           return info.param == Backend::kMem ? "Mem" : "Posix";
                         });

std::string Str(absl::Span<const char> s) { return std::string(s.data(), s.size()); }

// ---- Pass-through -----------------------------------------------------------------------

TEST_P(FaultEnvTest, WithoutFaultsEveryCallReachesTheTarget) {
  std::string path = Create("f", std::string(100, 'a'));
  auto f = Open(path);
  ASSERT_OK(f->WriteAt(10, std::string("hello")));
  char buf[5];
  ASSERT_OK_AND_ASSIGN(size_t n, f->ReadAt(10, absl::MakeSpan(buf)));
  EXPECT_EQ(Str(absl::MakeSpan(buf, n)), "hello");
  ASSERT_OK(f->Sync());
  ASSERT_OK_AND_ASSIGN(uint64_t size, f->Size());
  EXPECT_EQ(size, 100u);
  EXPECT_EQ(f->name(), path);
  EXPECT_OK(env_->SyncDir(GetParam() == Backend::kMem ? "/mem" : dir_.path()));
  EXPECT_EQ(env_->dir_syncs(), 1u);
  for (int k = 0; k < kNumFaultKinds; ++k) EXPECT_EQ(env_->fired(static_cast<FaultKind>(k)), 0u);
}

TEST_P(FaultEnvTest, RealErrorsAreNotTaggedAsInjected) {
  auto f = env_->OpenFile(Path("missing"), OpenMode::kReadOnly);
  EXPECT_THAT(f, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(ErrnoFromStatus(f.status()), ENOENT);
  EXPECT_FALSE(IsInjected(f.status()));
  EXPECT_EQ(InjectedKind(f.status()), std::nullopt);
  EXPECT_FALSE(IsInjected(absl::OkStatus()));
}

// ---- Errors with a chosen errno ---------------------------------------------------------

TEST_P(FaultEnvTest, InjectedWriteErrorCarriesTheExactErrnoCodeAndTag) {
  std::string path = Create("f", std::string(64, 'a'));
  auto f = Open(path);
  for (int err : {EIO, ENOSPC, ETIMEDOUT, EINTR, EAGAIN}) {
    SCOPED_TRACE(err);
    ASSERT_OK(env_->FailNext(Op::kWrite, 1, Fault::Error(err)));
    absl::Status s = f->WriteAt(0, std::string("zz"));
    // The same code base/env_posix.cc gives a real error with this errno.
    EXPECT_THAT(s, StatusIs(PosixError(err, "real").code()));
    EXPECT_EQ(ErrnoFromStatus(s), err);
    EXPECT_TRUE(IsInjected(s));
    EXPECT_EQ(InjectedKind(s), FaultKind::kError);
  }
  EXPECT_EQ(Contents(path), std::string(64, 'a')) << "a failed write writes nothing";
  EXPECT_TRUE(env_->UnsyncedRanges(path).empty());
  EXPECT_EQ(env_->fired(FaultKind::kError), 5u);
  EXPECT_OK(f->WriteAt(0, std::string("zz"))) << "FailNext(1) fails one call only";
}

TEST_P(FaultEnvTest, NoSpaceIsResourceExhaustedAndRetryableErrorsAreUnavailable) {
  std::string path = Create("f", "x");
  auto f = Open(path);
  ASSERT_OK(env_->FailNext(Op::kWrite, 1, Fault::Error(ENOSPC)));
  EXPECT_THAT(f->WriteAt(0, std::string("y")), StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_OK(env_->FailNext(Op::kWrite, 1, Fault::Error(EINTR)));
  EXPECT_THAT(f->WriteAt(0, std::string("y")), StatusIs(absl::StatusCode::kUnavailable));
  ASSERT_OK(env_->FailNext(Op::kSync, 1, Fault::Error(ETIMEDOUT)));
  EXPECT_THAT(f->Sync(), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST_P(FaultEnvTest, FailNextFailsExactlyTheNextNCalls) {
  std::string path = Create("f", "abc");
  auto f = Open(path);
  ASSERT_OK(env_->FailNext(Op::kRead, 2, Fault::Error(EIO)));
  char c;
  EXPECT_EQ(ErrnoFromStatus(f->ReadAt(0, absl::MakeSpan(&c, 1)).status()), EIO);
  EXPECT_EQ(ErrnoFromStatus(f->ReadAt(0, absl::MakeSpan(&c, 1)).status()), EIO);
  EXPECT_OK(f->ReadAt(0, absl::MakeSpan(&c, 1)).status());
  EXPECT_OK(f->WriteAt(0, std::string("A"))) << "other ops are unaffected";
  EXPECT_EQ(env_->fired(FaultKind::kError), 2u);
}

TEST_P(FaultEnvTest, OpenSyncAndSyncDirFailures) {
  std::string path = Create("f", "abc");
  ASSERT_OK(env_->FailNext(Op::kOpen, 1, Fault::Error(EACCES)));
  auto opened = env_->OpenFile(path, OpenMode::kReadWrite);
  EXPECT_THAT(opened, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(ErrnoFromStatus(opened.status()), EACCES);
  EXPECT_EQ(InjectedKind(opened.status()), FaultKind::kError);

  auto f = Open(path);
  ASSERT_OK(f->WriteAt(0, std::string("X")));
  ASSERT_OK(env_->FailNext(Op::kSync, 1, Fault::Error(EIO)));
  absl::Status s = f->Sync();
  EXPECT_EQ(ErrnoFromStatus(s), EIO);
  EXPECT_EQ(InjectedKind(s), FaultKind::kError);
  EXPECT_THAT(env_->UnsyncedRanges(path), ElementsAre(Pair(0u, 1u)))
      << "a failed Sync makes nothing durable";
  ASSERT_OK(f->Sync());
  EXPECT_TRUE(env_->UnsyncedRanges(path).empty());

  ASSERT_OK(env_->FailNext(Op::kSyncDir, 1, Fault::Error(EIO)));
  absl::Status d = env_->SyncDir(GetParam() == Backend::kMem ? "/mem" : dir_.path());
  EXPECT_EQ(ErrnoFromStatus(d), EIO);
  EXPECT_TRUE(IsInjected(d));
  EXPECT_EQ(env_->dir_syncs(), 0u);
}

TEST_P(FaultEnvTest, OnlyForLimitsAFaultToMatchingPaths) {
  std::string data = Create("data.bin", "d");
  std::string other = Create("other", "o");
  auto fd = Open(data);
  auto fo = Open(other);
  ASSERT_OK(env_->FailNext(Op::kWrite, 1, Fault::Error(EIO).OnlyFor("data")));
  EXPECT_OK(fo->WriteAt(0, std::string("O"))) << "does not match and is not counted";
  EXPECT_EQ(ErrnoFromStatus(fd->WriteAt(0, std::string("D"))), EIO);
  EXPECT_OK(fd->WriteAt(0, std::string("D")));
}

TEST_P(FaultEnvTest, StickyFaultFailsEveryLaterCallUntilCleared) {
  std::string path = Create("f", "abc");
  auto f = Open(path);
  ASSERT_OK(env_->FailNext(Op::kWrite, 1, Fault::Error(ENOSPC).Sticky()));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ErrnoFromStatus(f->WriteAt(0, std::string("x"))), ENOSPC);
  }
  env_->Clear(Op::kWrite);
  EXPECT_OK(f->WriteAt(0, std::string("x")));
  EXPECT_EQ(env_->fired(FaultKind::kError), 4u);
}

TEST_P(FaultEnvTest, ClearDisarmsAnOp) {
  std::string path = Create("f", "a");
  auto f = Open(path);
  ASSERT_OK(env_->FailNext(Op::kWrite, 5, Fault::Error(EIO)));
  ASSERT_OK(env_->FailNext(Op::kSync, 5, Fault::Error(EIO)));
  env_->Clear(Op::kWrite);
  EXPECT_OK(f->WriteAt(0, std::string("b")));
  EXPECT_EQ(ErrnoFromStatus(f->Sync()), EIO);
  env_->ClearAll();
  EXPECT_OK(f->Sync());
}

TEST_P(FaultEnvTest, RulesThatCannotApplyAreInvalidArgument) {
  EXPECT_THAT(env_->FailNext(Op::kRead, 1, Fault::TornWrite(EIO)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(env_->FailNext(Op::kWrite, 1, Fault::ShortRead(EIO)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(env_->FailNext(Op::kWrite, 1, Fault::SyncLosesData()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(env_->FailNext(Op::kWrite, 1, Fault::Error(0)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(env_->FailNext(Op::kWrite, 0, Fault::Error(EIO)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(env_->FailOneIn(Op::kWrite, 0, 1, Fault::Error(EIO)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Fault cut = Fault::Error(EIO);
  cut.kind = FaultKind::kPowerCut;
  EXPECT_THAT(env_->FailNext(Op::kWrite, 1, cut), StatusIs(absl::StatusCode::kInvalidArgument));
}

// ---- 1 in n, from a seed ----------------------------------------------------------------

std::vector<bool> FailurePattern(File* f, int calls) {
  std::vector<bool> failed;
  for (int i = 0; i < calls; ++i) {
    absl::Status s = f->WriteAt(0, std::string("w"));
    if (!s.ok()) {
      EXPECT_EQ(ErrnoFromStatus(s), ENOSPC);
    }
    failed.push_back(!s.ok());
  }
  return failed;
}

TEST_P(FaultEnvTest, OneInNIsReproducibleFromTheSeed) {
  std::string path = Create("f", "a");
  auto run = [&](uint64_t seed) {
    auto env = MakeEnv(true);
    EXPECT_OK(env->FailOneIn(Op::kWrite, 4, seed, Fault::Error(ENOSPC)));
    auto f = Open(path, env.get());
    return FailurePattern(f.get(), 400);
  };
  std::vector<bool> a = run(42), b = run(42), c = run(43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int failures = static_cast<int>(std::count(a.begin(), a.end(), true));
  EXPECT_GT(failures, 60);
  EXPECT_LT(failures, 140);
}

TEST_P(FaultEnvTest, OneInOneFailsEveryCallUntilCleared) {
  std::string path = Create("f", "a");
  auto f = Open(path);
  ASSERT_OK(env_->FailOneIn(Op::kWrite, 1, 7, Fault::Error(EIO)));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(ErrnoFromStatus(f->WriteAt(0, std::string("b"))), EIO);
  env_->Clear(Op::kWrite);
  EXPECT_OK(f->WriteAt(0, std::string("b")));
}

// ---- Torn writes, short and truncated reads ---------------------------------------------

TEST_P(FaultEnvTest, TornWriteLandsAPrefixThenFails) {
  std::string path = Create("f", std::string(512, 'a'));
  auto f = Open(path);
  ASSERT_OK(env_->FailNext(Op::kWrite, 1, Fault::TornWrite(EIO, 100)));
  absl::Status s = f->WriteAt(0, std::string(300, 'x'));
  EXPECT_EQ(ErrnoFromStatus(s), EIO);
  EXPECT_EQ(InjectedKind(s), FaultKind::kTornWrite);
  EXPECT_EQ(Contents(path), std::string(100, 'x') + std::string(412, 'a'));
  EXPECT_THAT(env_->UnsyncedRanges(path), ElementsAre(Pair(0u, 100u)));
  EXPECT_EQ(env_->fired(FaultKind::kTornWrite), 1u);
}

TEST_P(FaultEnvTest, TornWriteWithoutAPrefixLandsLessThanTheWholeWrite) {
  std::string path = Create("f", "");
  auto f = Open(path);
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(env_->FailNext(Op::kWrite, 1, Fault::TornWrite(ENOSPC)));
    EXPECT_EQ(ErrnoFromStatus(f->WriteAt(0, std::string(1000, 'x'))), ENOSPC);
    ASSERT_OK_AND_ASSIGN(uint64_t size, f->Size());
    EXPECT_LT(size, 1000u);
  }
}

TEST_P(FaultEnvTest, ShortReadFillsAPrefixThenFails) {
  std::string path = Create("f", "0123456789abcdef");
  auto f = Open(path);
  ASSERT_OK(env_->FailNext(Op::kRead, 1, Fault::ShortRead(EIO, 4)));
  std::string buf(10, '#');
  auto r = f->ReadAt(2, absl::MakeSpan(buf));
  EXPECT_EQ(ErrnoFromStatus(r.status()), EIO);
  EXPECT_EQ(InjectedKind(r.status()), FaultKind::kShortRead);
  EXPECT_EQ(buf, "2345######") << "the caller must not use a partly filled buffer";
  EXPECT_EQ(env_->fired(FaultKind::kShortRead), 1u);
}

TEST_P(FaultEnvTest, TruncatedReadReturnsAShortCountWithoutError) {
  std::string path = Create("f", "0123456789abcdef");
  auto f = Open(path);
  ASSERT_OK(env_->FailNext(Op::kRead, 1, Fault::TruncatedRead(3)));
  std::string buf(10, '#');
  ASSERT_OK_AND_ASSIGN(size_t n, f->ReadAt(0, absl::MakeSpan(buf)));
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(buf.substr(0, 3), "012");
  EXPECT_EQ(env_->fired(FaultKind::kTruncatedRead), 1u);
}

// ---- Stalls -----------------------------------------------------------------------------

TEST_P(FaultEnvTest, StallBlocksUntilReleasedThenProceeds) {
  std::string path = Create("f", "data");
  auto f = Open(path);
  ASSERT_OK(env_->FailNext(Op::kRead, 1, Fault::Stall(absl::InfiniteDuration())));
  std::atomic<bool> done{false};
  absl::StatusOr<size_t> result;
  std::string buf(4, '\0');
  std::thread reader([&] {
    result = f->ReadAt(0, absl::MakeSpan(buf));
    done = true;
  });
  ASSERT_TRUE(env_->WaitForStalled(1, absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(done.load());
  EXPECT_EQ(env_->stalled(), 1);
  env_->ReleaseStalls();
  reader.join();
  ASSERT_OK(result.status());
  EXPECT_EQ(buf, "data");
  EXPECT_EQ(env_->stalled(), 0);
  EXPECT_EQ(env_->fired(FaultKind::kStall), 1u);
}

TEST_P(FaultEnvTest, TimedStallThenFailsWithTheChosenErrno) {
  std::string path = Create("f", "data");
  auto f = Open(path);
  ASSERT_OK(env_->FailNext(Op::kWrite, 1, Fault::Stall(absl::Milliseconds(50), ETIMEDOUT)));
  absl::Time start = absl::Now();
  absl::Status s = f->WriteAt(0, std::string("x"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(ErrnoFromStatus(s), ETIMEDOUT);
  EXPECT_EQ(InjectedKind(s), FaultKind::kStall);
  EXPECT_EQ(Contents(path), "data");
}

TEST_P(FaultEnvTest, PowerCutEndsAStallWithEio) {
  std::string path = Create("f", "data");
  auto f = Open(path);
  ASSERT_OK(env_->FailNext(Op::kSync, 1, Fault::Stall(absl::InfiniteDuration())));
  absl::Status s;
  std::thread syncer([&] { s = f->Sync(); });
  ASSERT_TRUE(env_->WaitForStalled(1, absl::Seconds(10)));
  env_->SimulatePowerCut();
  syncer.join();
  EXPECT_EQ(ErrnoFromStatus(s), EIO);
  EXPECT_EQ(InjectedKind(s), FaultKind::kPowerCut);
}

// ---- Power cut --------------------------------------------------------------------------

TEST_P(FaultEnvTest, PowerCutFailsEveryLaterCallWithEio) {
  std::string path = Create("f", "data");
  auto f = Open(path);
  env_->SimulatePowerCut();
  EXPECT_TRUE(env_->frozen());
  char c;
  std::vector<absl::Status> results = {
      f->WriteAt(0, std::string("x")),
      f->ReadAt(0, absl::MakeSpan(&c, 1)).status(),
      f->Sync(),
      f->Size().status(),
      f->Identify().status(),
      env_->OpenFile(path, OpenMode::kReadOnly).status(),
      env_->SyncDir(GetParam() == Backend::kMem ? "/mem" : dir_.path()),
      env_->IdentifyPath(path).status(),
      env_->CreateDir(Path("d"), 0700),
  };
  for (const auto& s : results) {
    EXPECT_EQ(ErrnoFromStatus(s), EIO) << s;
    EXPECT_EQ(InjectedKind(s), FaultKind::kPowerCut) << s;
  }
  EXPECT_EQ(env_->fired(FaultKind::kPowerCut), results.size());
  EXPECT_EQ(Contents(path), "data");
}

TEST_P(FaultEnvTest, DropBeforeAPowerCutIsFailedPrecondition) {
  EXPECT_THAT(env_->DropUnsyncedData(DropMode::kDropAll),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_P(FaultEnvTest, DropAllKeepsSyncedDataAndDropsExactlyTheUnsyncedRanges) {
  std::string path = Create("f", std::string(8192, 'a'));
  auto f = Open(path);
  ASSERT_OK(f->WriteAt(0, std::string(1024, 'b')));
  ASSERT_OK(f->Sync());
  ASSERT_OK(f->WriteAt(2048, std::string(1024, 'c')));   // unsynced overwrite
  ASSERT_OK(f->WriteAt(2560, std::string(1024, 'd')));   // overlaps it
  ASSERT_OK(f->WriteAt(8192, std::string(808, 'e')));    // unsynced append
  EXPECT_THAT(env_->UnsyncedRanges(path), ElementsAre(Pair(2048u, 3584u), Pair(8192u, 9000u)));
  Crash(DropOptions::Of(DropMode::kDropAll));
  EXPECT_EQ(Contents(path), std::string(1024, 'b') + std::string(7168, 'a'));
  EXPECT_TRUE(env_->UnsyncedRanges(path).empty());
}

TEST_P(FaultEnvTest, DropAllAfterSeveralSyncsKeepsTheLastSyncedVersion) {
  std::string path = Create("f", "");
  auto f = Open(path);
  ASSERT_OK(f->WriteAt(0, std::string(600, '1')));
  ASSERT_OK(f->Sync());
  ASSERT_OK(f->WriteAt(100, std::string(100, '2')));
  ASSERT_OK(f->Sync());
  ASSERT_OK(f->WriteAt(150, std::string(1000, '3')));
  Crash(DropOptions::Of(DropMode::kDropAll));
  EXPECT_EQ(Contents(path), std::string(100, '1') + std::string(100, '2') + std::string(400, '1'));
}

TEST_P(FaultEnvTest, KeepModeKeepsEveryUnsyncedWrite) {
  std::string path = Create("f", std::string(100, 'a'));
  auto f = Open(path);
  ASSERT_OK(f->WriteAt(50, std::string(100, 'b')));
  Crash(DropOptions::Of(DropMode::kKeep));
  EXPECT_EQ(Contents(path), std::string(50, 'a') + std::string(100, 'b'));
}

TEST_P(FaultEnvTest, TearKeepsASectorAlignedPrefixOfAnAppend) {
  const std::string data = [] {
    std::string d(4096, '\0');
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<char>('a' + i % 26);
    return d;
  }();
  std::set<size_t> sizes;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    SCOPED_TRACE(seed);
    std::string path = Create(absl::StrCat("torn", seed), std::string(512, 's'));
    env_ = MakeEnv(true);
    auto f = Open(path);
    ASSERT_OK(f->WriteAt(512, data));
    Crash(DropOptions::Tear(seed));
    std::string got = Contents(path);
    ASSERT_GE(got.size(), 512u);
    EXPECT_EQ(got.size() % 512, 0u);
    EXPECT_EQ(got.substr(0, 512), std::string(512, 's')) << "synced data survives";
    EXPECT_EQ(got.substr(512), data.substr(0, got.size() - 512));
    sizes.insert(got.size());
  }
  EXPECT_GE(sizes.size(), 4u) << "different seeds cut at different sectors";
}

TEST_P(FaultEnvTest, TearOfAnOverwriteKeepsAPrefixAndRestoresTheRest) {
  std::set<size_t> kept;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    std::string path = Create("f", std::string(2048, 'o'));
    env_ = MakeEnv(true);
    auto f = Open(path);
    ASSERT_OK(f->WriteAt(100, std::string(1500, 'n')));  // 100..1600: cuts at 512, 1024, 1536
    Crash(DropOptions::Tear(seed));
    std::string got = Contents(path);
    ASSERT_EQ(got.size(), 2048u);
    size_t n = got.find_first_not_of('n', 100) - 100;
    EXPECT_TRUE(n == 0 || n == 412 || n == 924 || n == 1436 || n == 1500) << n;
    EXPECT_EQ(got.substr(0, 100), std::string(100, 'o'));
    EXPECT_EQ(got.substr(100 + n), std::string(2048 - 100 - n, 'o'));
    kept.insert(n);
  }
  EXPECT_GE(kept.size(), 3u);
}

TEST_P(FaultEnvTest, TearWithGarbleFillsTheSectorAfterTheCut) {
  const std::string data(4096, 'd');
  bool saw_garbage = false;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    std::string path = Create(absl::StrCat("g", seed), "");
    env_ = MakeEnv(true);
    auto f = Open(path);
    ASSERT_OK(f->WriteAt(0, data));
    Crash(DropOptions::Tear(seed, /*garble=*/true));
    std::string got = Contents(path);
    EXPECT_EQ(got.size() % 512, 0u);
    size_t clean = got.find_first_not_of('d');
    if (clean == std::string::npos) {
      EXPECT_EQ(got.size(), 4096u) << "only a whole write has no garbled sector";
      continue;
    }
    EXPECT_EQ(got.size(), (clean / 512 + 1) * 512) << "exactly one garbled sector at the end";
    saw_garbage = true;
  }
  EXPECT_TRUE(saw_garbage);
}

TEST_P(FaultEnvTest, TearIsReproducibleFromTheSeed) {
  auto run = [&](const std::string& name, uint64_t seed) {
    std::string path = Create(name, std::string(1000, 'a'));
    env_ = MakeEnv(true);
    auto f = Open(path);
    EXPECT_OK(f->WriteAt(0, std::string(3000, 'b')));
    EXPECT_OK(f->WriteAt(5000, std::string(3000, 'c')));
    Crash(DropOptions::Tear(seed, /*garble=*/true));
    return Contents(path);
  };
  EXPECT_EQ(run("x", 99), run("y", 99));
}

TEST_P(FaultEnvTest, SyncLosesDataKeepsItReadableButAPowerCutDropsIt) {
  std::string path = Create("f", std::string(2000, 'a'));
  auto f = Open(path);
  ASSERT_OK(f->WriteAt(0, std::string(100, 'L')));
  ASSERT_OK(f->WriteAt(1900, std::string(200, 'L')));  // 100 bytes past the durable end
  ASSERT_OK(env_->FailNext(Op::kSync, 1, Fault::SyncLosesData(EIO)));
  absl::Status s = f->Sync();
  EXPECT_EQ(ErrnoFromStatus(s), EIO);
  EXPECT_EQ(InjectedKind(s), FaultKind::kSyncLosesData);
  EXPECT_EQ(Contents(path).substr(0, 100), std::string(100, 'L')) << "still in the page cache";
  ASSERT_OK(f->WriteAt(2500, std::string(10, 'K')));
  ASSERT_OK(f->Sync()) << "a later fsync succeeds";
  EXPECT_THAT(env_->UnsyncedRanges(path), ElementsAre(Pair(0u, 100u), Pair(1900u, 2100u)))
      << "but the lost pages are never written";
  Crash(DropOptions::Of(DropMode::kKeep));
  std::string got = Contents(path);
  ASSERT_EQ(got.size(), 2510u);
  EXPECT_EQ(got.substr(0, 2000), std::string(2000, 'a'));
  EXPECT_EQ(got.substr(2000, 500), std::string(500, '\0')) << "lost append: a hole";
  EXPECT_EQ(got.substr(2500), std::string(10, 'K'));
  EXPECT_EQ(env_->fired(FaultKind::kSyncLosesData), 1u);
}

TEST_P(FaultEnvTest, HandlesOpenedBeforeAPowerCutStayDeadAfterRestart) {
  std::string path = Create("f", "abc");
  auto old = Open(path);
  Crash(DropOptions::Of(DropMode::kDropAll));
  EXPECT_EQ(InjectedKind(old->WriteAt(0, std::string("x"))), FaultKind::kPowerCut);
  auto fresh = Open(path);
  EXPECT_OK(fresh->WriteAt(0, std::string("x")));
  EXPECT_EQ(Contents(path), "xbc");
}

TEST_P(FaultEnvTest, ConcurrentWritersAreAllTrackedAndDropped) {
  std::string path = Create("f", std::string(64 * 1024, 'a'));
  auto f = Open(path);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 64; ++i) {
        uint64_t off = static_cast<uint64_t>((i * 4 + t) * 256);
        EXPECT_OK(f->WriteAt(off, std::string(256, static_cast<char>('A' + t))));
        char buf[8];
        if (i % 16 == 15) {
          EXPECT_OK(f->ReadAt(off, absl::MakeSpan(buf)).status());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_THAT(env_->UnsyncedRanges(path), ElementsAre(Pair(0u, 65536u)));
  Crash(DropOptions::Of(DropMode::kDropAll));
  EXPECT_EQ(Contents(path), std::string(64 * 1024, 'a'));
}

// ---- Backend specifics ------------------------------------------------------------------

TEST(FaultEnvMemTest, DroppingAnAppendWithoutATruncateHookIsFailedPrecondition) {
  auto mem = NewMemEnv();
  ASSERT_OK(MemEnvWriteFile(mem.get(), "/f", "abc"));
  FaultEnv env(mem.get());
  ASSERT_OK_AND_ASSIGN(auto f, env.OpenFile("/f", OpenMode::kReadWrite));
  ASSERT_OK(f->WriteAt(1, std::string("XYZ")));
  env.SimulatePowerCut();
  EXPECT_THAT(env.DropUnsyncedData(DropMode::kDropAll),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(FaultEnvPosixTest, AdoptedDescriptorsAreTrackedByTheirPath) {
  ::umap::testing::TempDir dir;
  std::string path = dir.File("adopted");
  int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "synced", 6), 6);
  FaultEnv env(Env::Default());
  ASSERT_OK_AND_ASSIGN(auto f, env.AdoptFd(fd, OpenMode::kReadWrite));
  ::close(fd);
  EXPECT_EQ(f->fd(), -1);  // every byte must go through the wrapper, never io_uring
  ASSERT_OK(f->WriteAt(6, std::string("-lost")));
  EXPECT_THAT(env.UnsyncedRanges(path), ElementsAre(Pair(6u, 11u)));
  env.SimulatePowerCut();
  ASSERT_OK(env.DropUnsyncedData(DropMode::kDropAll));
  ASSERT_OK_AND_ASSIGN(FileIdentity id, Env::Default()->IdentifyPath(path));
  EXPECT_EQ(id.size, 6u);
}

TEST(FaultEnvPosixTest, OpenFaultOnAdoptFdClosesNothingOfTheCaller) {
  ::umap::testing::TempDir dir;
  std::string path = dir.File("a");
  int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  FaultEnv env(Env::Default());
  ASSERT_OK(env.FailNext(Op::kOpen, 1, Fault::Error(EMFILE).OnlyFor("/a")));
  auto f = env.AdoptFd(fd, OpenMode::kReadWrite);
  EXPECT_EQ(ErrnoFromStatus(f.status()), EMFILE);
  EXPECT_TRUE(IsInjected(f.status()));
  EXPECT_EQ(::write(fd, "x", 1), 1) << "the caller's descriptor is still open";
  ::close(fd);
}

}  // namespace
}  // namespace umap::faultinject
