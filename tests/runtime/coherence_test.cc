// Coherence modes with real processes (docs/consistency.md): each writer is a process of its
// own (coherence_writer, through the public C API), as two jobs sharing a file are.
//   - overlapping partitioned writers: the second fails at once with EBUSY, and the log names
//     the first (pid and host, from its owner record);
//   - disjoint partitioned writers both map, write and umsync: the file holds both;
//   - read-only refuses a write with SIGSEGV and one line saying why; the file is unchanged;
//   - a partitioned writer's store outside its declared ranges: the same;
//   - a reader of a range another process writes is told its view may be stale;
//   - two mappings of one process conflict like two processes;
//   - shared-write takes no lock and says so, once.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/recovery/subprocess.h"
#include "tests/runtime/test_file.h"
#include "umap/umap.h"

namespace umaptest {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBlock = 4096;
constexpr size_t kFileBytes = 64 * kBlock;

// The first offset where the file differs from `want` ("" when equal), for the message.
std::string FirstDifference(const std::vector<char>& got, const std::vector<char>& want) {
  if (got.size() != want.size()) {
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return "offset " + std::to_string(i) + ": " + std::to_string(int(got[i])) + " != " +
             std::to_string(int(want[i]));
    }
  }
  return "";
}

std::string HostName() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

struct Writer {
  pid_t pid = -1;
  std::string out, err;
};

class CoherenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.File("shared.dat");
    int fd = MakePatternFile(file_, kFileBytes);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }

  // Starts a coherence_writer on the file; `hold` names the file whose creation releases it.
  Writer Start(const std::string& name, std::vector<std::string> args) {
    Writer w;
    w.out = dir_.File(name + ".out");
    w.err = dir_.File(name + ".err");
    std::vector<std::string> argv = {UMAP_COHERENCE_WRITER, file_};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--journal", dir_.File(name + ".journal")});
    w.pid = recoverytest::Spawn(argv, {}, w.out, w.err);
    return w;
  }
  // Waits until the writer printed `line` (or ended); true when it did.
  bool WaitFor(const Writer& w, const std::string& line, int timeout_ms = 20000) {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < end) {
      if (recoverytest::Slurp(w.out).find(line) != std::string::npos) return true;
      int st;
      if (::waitpid(w.pid, &st, WNOHANG) == w.pid) {
        reaped_ = st;
        return recoverytest::Slurp(w.out).find(line) != std::string::npos;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  recoverytest::ProcResult Finish(const Writer& w) {
    if (reaped_ >= 0) {
      recoverytest::ProcResult r;
      if (WIFEXITED(reaped_)) r.exit_code = WEXITSTATUS(reaped_);
      if (WIFSIGNALED(reaped_)) r.signal = WTERMSIG(reaped_);
      r.out = recoverytest::Slurp(w.out);
      r.err = recoverytest::Slurp(w.err);
      reaped_ = -1;
      return r;
    }
    return recoverytest::Wait(w.pid, w.out, w.err);
  }
  void Release(const std::string& hold) {
    int fd = ::open(hold.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }

  TempDir dir_;
  std::string file_;
  int reaped_ = -1;
};

TEST_F(CoherenceTest, OverlappingPartitionedWriterFailsFastWithEbusyNamingTheHolder) {
  const std::string hold = dir_.File("release-a");
  Writer a = Start("a", {"--mode", "partitioned-write", "--range", "0:65536", "--write",
                         "0:65536:A", "--sync", "--hold", hold});
  ASSERT_TRUE(WaitFor(a, "synced")) << recoverytest::Slurp(a.err);

  const auto t0 = Clock::now();
  Writer b = Start("b", {"--mode", "partitioned-write", "--range", "32768:65536", "--write",
                         "32768:65536:B", "--sync"});
  recoverytest::ProcResult rb = Finish(b);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(rb.exit_code, 3) << rb.out << rb.err;
  EXPECT_NE(rb.out.find("map-error " + std::to_string(EBUSY)), std::string::npos) << rb.out;
  // The message names the holder: its pid and host, from its owner record.
  EXPECT_NE(rb.err.find("is held by pid " + std::to_string(a.pid) + " on " + HostName()),
            std::string::npos)
      << rb.err;
  EXPECT_NE(rb.err.find("cannot map bytes [32768, 98304) for partitioned-write: a write lock on "
                        "bytes [0, 65536) is held by"),
            std::string::npos)
      << rb.err;
  EXPECT_LT(seconds, 5.0) << "fail fast: no waiting for the holder";

  Release(hold);
  recoverytest::ProcResult ra = Finish(a);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  // B wrote nothing: the file holds A's bytes and the original pattern.
  std::vector<char> want = Pattern(kFileBytes);
  std::memset(want.data(), 'A', 65536);
  EXPECT_EQ(FirstDifference(ReadAll(file_), want), "");
}

TEST_F(CoherenceTest, DisjointPartitionedWritersBothSucceedAndTheFileHoldsBoth) {
  const std::string hold = dir_.File("release");
  Writer a = Start("a", {"--mode", "partitioned-write", "--range", "0:65536", "--write",
                         "0:65536:A", "--sync", "--hold", hold});
  Writer b = Start("b", {"--mode", "partitioned-write", "--range", "65536:65536", "--write",
                         "65536:65536:B", "--sync", "--hold", hold});
  ASSERT_TRUE(WaitFor(a, "synced")) << recoverytest::Slurp(a.err);
  ASSERT_TRUE(WaitFor(b, "synced")) << recoverytest::Slurp(b.err);
  Release(hold);
  recoverytest::ProcResult ra = Finish(a);
  recoverytest::ProcResult rb = Finish(b);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  std::vector<char> want = Pattern(kFileBytes);
  std::memset(want.data(), 'A', 65536);
  std::memset(want.data() + 65536, 'B', 65536);
  EXPECT_EQ(FirstDifference(ReadAll(file_), want), "");
}

TEST_F(CoherenceTest, ReadOnlyMappingRefusesWritesWithSigsegvAndSaysWhy) {
  Writer r = Start("r", {"--mode", "read-only", "--write", "8192:10:R", "--sync"});
  recoverytest::ProcResult rr = Finish(r);
  EXPECT_EQ(rr.signal, SIGSEGV) << "exit " << rr.exit_code << ": " << rr.out << rr.err;
  EXPECT_NE(rr.out.find("mapped"), std::string::npos);
  EXPECT_EQ(rr.out.find("written"), std::string::npos) << "the store must not have happened";
  EXPECT_NE(rr.err.find("SIGSEGV: a write at"), std::string::npos) << rr.err;
  EXPECT_NE(rr.err.find("(file offset 8192 of " + file_ + ") was refused: the mapping is "
                        "read-only"),
            std::string::npos)
      << rr.err;
  EXPECT_EQ(FirstDifference(ReadAll(file_), Pattern(kFileBytes)), "")
      << "a read-only mapping never writes back";
}

TEST_F(CoherenceTest, WriteOutsideTheDeclaredRangesRaisesSigsegvAndSaysWhy) {
  Writer w = Start("w", {"--mode", "partitioned-write", "--range", "0:4096", "--write",
                         "0:4096:W", "--write", "16384:1:X", "--sync"});
  recoverytest::ProcResult rw = Finish(w);
  EXPECT_EQ(rw.signal, SIGSEGV) << rw.out << rw.err;
  EXPECT_NE(rw.err.find("(file offset 16384 of " + file_ + ") was refused: this "
                        "partitioned-write mapping did not declare"),
            std::string::npos)
      << rw.err;
  EXPECT_EQ(FirstDifference(ReadAll(file_), Pattern(kFileBytes)), "") << "nothing was synced";
}

TEST_F(CoherenceTest, AReaderOfARangeAnotherProcessWritesIsToldItsViewMayBeStale) {
  const std::string hold = dir_.File("release");
  Writer a = Start("a", {"--mode", "partitioned-write", "--range", "0:8192", "--sync", "--hold",
                         hold});
  ASSERT_TRUE(WaitFor(a, "synced")) << recoverytest::Slurp(a.err);
  Writer r = Start("r", {"--mode", "read-only"});
  recoverytest::ProcResult rr = Finish(r);
  EXPECT_EQ(rr.exit_code, 0) << rr.err;
  EXPECT_NE(rr.err.find("is being written by another writer: a write lock on bytes [0, 8192) "
                        "is held by pid " + std::to_string(a.pid)),
            std::string::npos)
      << rr.err;
  EXPECT_NE(rr.err.find("view of those bytes may be stale"), std::string::npos) << rr.err;
  Release(hold);
  EXPECT_EQ(Finish(a).exit_code, 0);
}

TEST_F(CoherenceTest, SharedWriteTakesNoLockAndSaysSoOnce) {
  const std::string hold = dir_.File("release");
  Writer a = Start("a", {"--mode", "partitioned-write", "--sync", "--hold", hold});
  ASSERT_TRUE(WaitFor(a, "synced")) << recoverytest::Slurp(a.err);
  Writer s = Start("s", {"--mode", "shared-write", "--write", "0:1:S", "--sync"});
  recoverytest::ProcResult rs = Finish(s);
  EXPECT_EQ(rs.exit_code, 0) << rs.err;  // nothing stopped it: that is the mode's risk
  EXPECT_NE(rs.err.find("mapped shared-write: no lock stops another writer"), std::string::npos)
      << rs.err;
  Release(hold);
  EXPECT_EQ(Finish(a).exit_code, 0);
}

// In one process, through the C API: two mappings of the same file have caches of their own,
// so they conflict like two processes.
class CoherenceInProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    umap_config c;
    ASSERT_EQ(umap_config_init(&c), 0);
    c.cache_bytes = 64 * kBlock;
    c.journal_dir = nullptr;
    rt_ = umap_runtime_create(&c);
    ASSERT_NE(rt_, nullptr) << std::strerror(errno);
    fd_ = MakePatternFile(dir_.File("f"), kFileBytes);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    ::close(fd_);
    if (rt_ != nullptr) {
      EXPECT_EQ(umap_runtime_destroy(rt_), 0);
    }
  }
  char* Map(umap_coherence mode, std::vector<umap_range> ranges) {
    umap_map_options o = {};
    o.coherence = mode;
    o.write_ranges = ranges.data();
    o.write_range_count = ranges.size();
    return static_cast<char*>(umap_ex2(rt_, nullptr, kFileBytes, PROT_READ | PROT_WRITE,
                                       MAP_SHARED, fd_, 0, &o));
  }
  TempDir dir_;
  umap_runtime* rt_ = nullptr;
  int fd_ = -1;
};

TEST_F(CoherenceInProcessTest, TwoMappingsOfOneFileConflictLikeTwoProcesses) {
  char* a = Map(UMAP_COHERENCE_PARTITIONED_WRITE, {{0, 8192}});
  ASSERT_NE(a, MAP_FAILED) << std::strerror(errno);
  errno = 0;
  EXPECT_EQ(Map(UMAP_COHERENCE_PARTITIONED_WRITE, {{4096, 8192}}), MAP_FAILED);
  EXPECT_EQ(errno, EBUSY);
  // Blocks are the unit: a range sharing block 1 with A's conflicts, the next block does not.
  EXPECT_EQ(Map(UMAP_COHERENCE_PARTITIONED_WRITE, {{8191, 2}}), MAP_FAILED);
  char* b = Map(UMAP_COHERENCE_PARTITIONED_WRITE, {{8192, 4096}});
  ASSERT_NE(b, MAP_FAILED) << std::strerror(errno);
  // The default for a writable mapping (AUTO) is partitioned-write of all of it.
  EXPECT_EQ(static_cast<char*>(umap_ex(rt_, nullptr, kFileBytes, PROT_READ | PROT_WRITE,
                                       MAP_SHARED, fd_, 0)),
            MAP_FAILED);
  EXPECT_EQ(errno, EBUSY);
  EXPECT_EQ(uunmap(a, kFileBytes), 0);
  // Unmapping releases the locks.
  char* c = Map(UMAP_COHERENCE_PARTITIONED_WRITE, {{4096, 4096}});
  EXPECT_NE(c, MAP_FAILED) << std::strerror(errno);
  if (c != MAP_FAILED) {
    EXPECT_EQ(uunmap(c, kFileBytes), 0);
  }
  EXPECT_EQ(uunmap(b, kFileBytes), 0);
}

TEST_F(CoherenceInProcessTest, BadRequestsAreInvalid) {
  errno = 0;
  EXPECT_EQ(Map(UMAP_COHERENCE_PARTITIONED_WRITE, {{0, 0}}), MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(Map(UMAP_COHERENCE_PARTITIONED_WRITE, {{kFileBytes - 4096, 8192}}), MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
  umap_map_options o = {};
  o.coherence = UMAP_COHERENCE_PARTITIONED_WRITE;
  EXPECT_EQ(umap_ex2(rt_, nullptr, kFileBytes, PROT_READ, MAP_SHARED, fd_, 0, &o), MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
  o.write_range_count = 1;  // without the array
  EXPECT_EQ(umap_ex2(rt_, nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0, &o),
            MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(CoherenceInProcessTest, ReadersTakeNoLock) {
  char* r1 = Map(UMAP_COHERENCE_READ_ONLY, {});
  char* r2 = Map(UMAP_COHERENCE_READ_ONLY, {});
  ASSERT_NE(r1, MAP_FAILED);
  ASSERT_NE(r2, MAP_FAILED);
  char* w = Map(UMAP_COHERENCE_PARTITIONED_WRITE, {});
  ASSERT_NE(w, MAP_FAILED) << "readers do not stop a writer: they are told they may be stale";
  EXPECT_EQ(std::memcmp(r1, r2, kFileBytes), 0);
  EXPECT_EQ(uunmap(w, kFileBytes), 0);
  EXPECT_EQ(uunmap(r2, kFileBytes), 0);
  EXPECT_EQ(uunmap(r1, kFileBytes), 0);
}

}  // namespace
}  // namespace umaptest
