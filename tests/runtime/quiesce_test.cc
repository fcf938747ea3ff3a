// Runtime::Quiesce / Resume (docs/design.md "Quiesce and resume"): a quiesce leaves nothing
// CRIU cannot dump (no userfaultfd, no io_uring, none of Umap's threads but the control
// thread, the cache sizer's included, no journal lock, no parked block) and every byte
// written before it in the file; a thread touching a quiesced mapping waits and then
// proceeds with the right bytes; a resume refuses a journal or a file that another process
// changed meanwhile (fenced), waits out a locked journal, and restarts lazy sizing; a
// quiesce whose write-back fails leaves the runtime running with nothing lost. The
// end-to-end test with real criu is tests/criu/criu_test.sh.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/posix_error.h"
#include "faultinject/fault_env.h"
#include "journal/journal.h"
#include "runtime/fault/mapping.h"
#include "runtime/runtime.h"
#include "runtime/sizing/cache_sizer.h"
#include "tests/runtime/test_file.h"
#include "tests/testing/status_matchers.h"

namespace umap::runtime {
namespace {

using ::umap::faultinject::Fault;
using ::umap::faultinject::FaultEnv;
using ::umap::faultinject::Op;
using ::umaptest::MakePatternFile;
using ::umaptest::Pattern;
using ::umaptest::ReadAll;

constexpr size_t kBlock = 4096;
constexpr size_t kBlocks = 96;  // 3x the cache: writes evict dirty blocks
constexpr size_t kSize = kBlocks * kBlock;

// --- what the process holds, as CRIU would see it ---

// Targets of /proc/self/fd links that CRIU cannot dump.
std::vector<std::string> UndumpableFds() {
  std::vector<std::string> out;
  DIR* d = ::opendir("/proc/self/fd");
  while (struct dirent* e = d ? ::readdir(d) : nullptr) {
    char target[256] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (::readlink(link.c_str(), target, sizeof(target) - 1) <= 0) continue;
    if (std::strstr(target, "userfaultfd") || std::strstr(target, "io_uring")) {
      out.emplace_back(target);
    }
  }
  if (d != nullptr) ::closedir(d);
  return out;
}

// Names of this process's threads that are Umap's (but the control thread) or io_uring's.
std::vector<std::string> UmapAndIoUringThreads() {
  std::vector<std::string> out;
  DIR* d = ::opendir("/proc/self/task");
  while (struct dirent* e = d ? ::readdir(d) : nullptr) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(f, name);
    if ((name.rfind("umap-", 0) == 0 && name != "umap-ctl") || name.rfind("iou-", 0) == 0) {
      out.push_back(name);
    }
  }
  if (d != nullptr) ::closedir(d);
  return out;
}

// The permissions ("rw-p", "---p") and resident kB of the mapping that starts at base.
struct Vma {
  std::string perms;
  long rss_kb = -1;
};
Vma VmaAt(const void* base) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  char want[32];
  std::snprintf(want, sizeof(want), "%lx-", reinterpret_cast<unsigned long>(base));
  Vma v;
  bool in = false;
  while (std::getline(f, line)) {
    // A mapping's header line has its first colon (in the device) after its first space; a
    // field line ("Rss:   4 kB") before.
    if (line.find(' ') < line.find(':')) {
      in = line.rfind(want, 0) == 0;
      if (in) v.perms = line.substr(line.find(' ') + 1, 4);
    } else if (in && line.rfind("Rss:", 0) == 0) {
      v.rss_kb = std::stol(line.substr(4));
      in = false;
    }
  }
  return v;
}

struct Mode {
  const char* name;
  umap_fault_mode fault;
  umap_policy policy;
  bool defer_file_sync = false;  // the journal sinks have an applier thread to stop too
};

class QuiesceTest : public ::testing::TestWithParam<Mode> {
 protected:
  RuntimeOptions Options(const std::string& journal) {
    RuntimeOptions o;
    o.cache_bytes = 48 * kBlock;  // 32 resident blocks (+ shadows)
    o.block_size = kBlock;
    o.env = &env_;
    o.fault_mode = GetParam().fault;
    o.policy = GetParam().policy;
    o.defer_file_sync = GetParam().defer_file_sync;
    o.journal_dir = journal;
    o.stats_period_ms = 50;
    return o;
  }
  void SetUp() override {
    auto rt = Runtime::Create(Options(dir_.File("journal")));
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    fd_ = MakePatternFile(dir_.File("f"), kSize);
    ASSERT_GE(fd_, 0);
    auto p = rt_->Map(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    ASSERT_TRUE(p.ok()) << p.status();
    p_ = static_cast<char*>(*p);
    want_ = Pattern(kSize);
  }
  bool atomic() const { return GetParam().policy == UMAP_POLICY_ATOMIC; }
  // After a umsync: the file holds `want`. With defer_file_sync the sink's applier writes it
  // shortly after the umsync returned (within its idle delay), so this waits up to 10 s.
  void ExpectFileAfterSync(const std::vector<char>& want) {
    std::vector<char> got = ReadAll(dir_.File("f"));
    for (int i = 0; i < 1000 && GetParam().defer_file_sync && got != want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      got = ReadAll(dir_.File("f"));
    }
    EXPECT_EQ(got, want);
  }
  // Opens the quiesced runtime's journal as another process would, keeping its staged
  // records (a plain open discards them, which a resume then refuses).
  // A writable open takes the journal over (a new owner epoch: journal/journal_fence.h), so
  // a resume after it is fenced; a read-only open only looks.
  absl::StatusOr<std::unique_ptr<journal::Journal>> OpenJournal(bool writable = false) {
    journal::JournalOptions jo;
    jo.dir = dir_.File("journal");
    jo.keep_staged = true;
    jo.read_only = !writable;
    return journal::Journal::Open(jo);
  }
  void TearDown() override {
    env_.ClearAll();
    rt_.reset();
    if (fd_ >= 0) ::close(fd_);
  }
  // Writes one byte into every block (through the cache: most are evicted dirty).
  void Scribble(char tag) {
    for (size_t b = 0; b < kBlocks; ++b) {
      p_[b * kBlock + 17] = static_cast<char>(tag + b);
      want_[b * kBlock + 17] = static_cast<char>(tag + b);
    }
  }

  ::umaptest::TempDir dir_;
  FaultEnv env_{Env::Default()};
  std::unique_ptr<Runtime> rt_;
  int fd_ = -1;
  char* p_ = nullptr;
  std::vector<char> want_;
};

TEST_P(QuiesceTest, KeepsEveryWriteAndLeavesNothingCriuCannotDump) {
  Scribble('a');
  EXPECT_FALSE(UndumpableFds().empty()) << "the running runtime holds a userfaultfd";
  ASSERT_OK(rt_->Quiesce());
  EXPECT_EQ(rt_->state(), RuntimeState::kQuiesced);
  // Relaxed: every write is in the file, applied. Atomic: none, since none was synced; they
  // wait in the journal as staged blocks.
  EXPECT_EQ(ReadAll(dir_.File("f")), atomic() ? Pattern(kSize) : want_);
  EXPECT_TRUE(UndumpableFds().empty()) << ::testing::PrintToString(UndumpableFds());
  EXPECT_TRUE(WaitForIoUringThreadsToExit().ok());
  EXPECT_TRUE(UmapAndIoUringThreads().empty()) << ::testing::PrintToString(UmapAndIoUringThreads());
  const Vma v = VmaAt(p_);
  EXPECT_EQ(v.perms, "---p") << "inaccessible, so no access reads a zero page";
  EXPECT_EQ(v.rss_kb, 0) << "no cached page left for the dump";
  // The journal is closed and holds no transaction.
  auto j = OpenJournal();
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)->stats().pending_txns, 0u);
  if (atomic()) {
    EXPECT_EQ((*j)->stats().staged_blocks, kBlocks);
  }
  j->reset();

  ASSERT_OK(rt_->Resume());
  EXPECT_EQ(rt_->state(), RuntimeState::kRunning);
  EXPECT_EQ(VmaAt(p_).perms, "rw-p");
  EXPECT_EQ(std::vector<char>(p_, p_ + kSize), want_) << "read back from the file / journal";
  Scribble('k');
  ASSERT_OK(rt_->Sync(p_, kSize));
  ExpectFileAfterSync(want_);
  EXPECT_GT(rt_->Stats().io_reads, 0u);
}

// Lazy sizing parks sampled resident blocks: their pages are dropped, their data waits in a
// park buffer, their cache block stays held. A quiesce must give those back with the rest
// of the cache, and the blocks' data must come back from the file (or the journal).
TEST_P(QuiesceTest, ParkedBlocksLeaveWithTheCacheAndTheirDataComesBack) {
  CacheSizer* sizer = rt_->sizer();
  ASSERT_NE(sizer, nullptr) << "lazy sizing is on by default";
  Scribble('p');
  ASSERT_OK(rt_->Sync(p_, kSize));
  // Touch a few blocks, let the sizer park some, then stop it, so that what is parked stays
  // parked until the quiesce (which stops it too).
  std::vector<uint64_t> parked;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (parked.empty() && std::chrono::steady_clock::now() < deadline) {
    sizer->Start();
    for (size_t b = 0; b < 16; ++b) {
      EXPECT_EQ(static_cast<volatile char*>(p_)[b * kBlock + 17], want_[b * kBlock + 17]);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sizer->Stop();
    rt_->WhileMappingsPinned([&] {
      rt_->ForEachMapping([&](Mapping& m) {
        for (uint64_t b = 0; b < m.blocks(); ++b) {
          if (m.table().Load(b).parked()) parked.push_back(b);
        }
      });
    });
  }
  ASSERT_FALSE(parked.empty()) << "the sizer parked no block in 10 s";
  ASSERT_GT(sizer->parks().in_use(), 0u);
  const uint64_t parks_before = sizer->figures().parks;

  ASSERT_OK(rt_->Quiesce());
  EXPECT_EQ(sizer->parks().in_use(), 0u) << "every park buffer given back";
  EXPECT_EQ(rt_->Stats().cache_bytes_used, 0u) << "parked blocks' cache blocks given back";
  EXPECT_TRUE(WaitForIoUringThreadsToExit().ok());
  EXPECT_TRUE(UmapAndIoUringThreads().empty()) << ::testing::PrintToString(UmapAndIoUringThreads());
  EXPECT_EQ(VmaAt(p_).rss_kb, 0);
  rt_->WhileMappingsPinned([&] {
    rt_->ForEachMapping([&](Mapping& m) {
      for (uint64_t b : parked) EXPECT_FALSE(m.table().Load(b).parked()) << "block " << b;
    });
  });

  ASSERT_OK(rt_->Resume());
  for (uint64_t b : parked) {
    EXPECT_EQ(std::vector<char>(p_ + b * kBlock, p_ + (b + 1) * kBlock),
              std::vector<char>(want_.begin() + b * kBlock, want_.begin() + (b + 1) * kBlock))
        << "parked block " << b << " after the resume";
  }
  EXPECT_EQ(std::vector<char>(p_, p_ + kSize), want_);
  // Lazy sizing runs again: its thread is back and parks again.
  const auto again = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sizer->figures().parks == parks_before && std::chrono::steady_clock::now() < again) {
    for (size_t b = 0; b < 16; ++b) (void)static_cast<volatile char*>(p_)[b * kBlock];
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(sizer->figures().parks, parks_before) << "no parking after the resume";
  const std::vector<std::string> threads = UmapAndIoUringThreads();
  EXPECT_NE(std::find(threads.begin(), threads.end(), "umap-sizer"), threads.end())
      << ::testing::PrintToString(threads);
  Scribble('q');
  ASSERT_OK(rt_->Sync(p_, kSize));
  ExpectFileAfterSync(want_);
}

TEST_P(QuiesceTest, QuiesceAndResumeAreIdempotent) {
  ASSERT_OK(rt_->Resume());
  ASSERT_OK(rt_->Quiesce());
  ASSERT_OK(rt_->Quiesce());
  ASSERT_OK(rt_->Resume());
  ASSERT_OK(rt_->Resume());
  Scribble('i');
  ASSERT_OK(rt_->Sync(p_, kSize));
  ExpectFileAfterSync(want_);
}

TEST_P(QuiesceTest, AThreadTouchingAQuiescedMappingWaitsAndThenSeesItsBytes) {
  Scribble('b');
  ASSERT_OK(rt_->Quiesce());
  std::atomic<int> done{0};
  char seen = 0;
  std::thread reader([&] {
    seen = p_[40 * kBlock + 17];
    done.fetch_add(1);
  });
  std::thread writer([&] {
    p_[41 * kBlock + 5] = 'W';
    done.fetch_add(1);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(done.load(), 0) << "both wait while the runtime is quiesced";
  ASSERT_OK(rt_->Resume());
  reader.join();
  writer.join();
  EXPECT_EQ(seen, want_[40 * kBlock + 17]);
  want_[41 * kBlock + 5] = 'W';
  ASSERT_OK(rt_->Sync(p_, kSize));
  ExpectFileAfterSync(want_);
}

TEST_P(QuiesceTest, WritersRacingTheQuiesceLoseNothing) {
  // Each thread keeps storing increasing counters into its own block and publishes the last
  // value stored. A store that was done when the quiesce captured its block is in the file;
  // the next one waits. So once quiesced, the file holds exactly the published values.
  constexpr int kThreads = 4;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> published[kThreads];
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    published[t] = 0;
    threads.emplace_back([&, t] {
      auto* slot = reinterpret_cast<volatile uint64_t*>(p_ + (8 + 20 * t) * kBlock);
      for (uint64_t v = 1; !stop.load(std::memory_order_relaxed); ++v) {
        *slot = v;
        published[t].store(v, std::memory_order_release);
        // Other blocks too, so that faults and evictions run during the quiesce.
        p_[((v * 7 + t) % kBlocks) * kBlock + 100] = static_cast<char>(v);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_OK(rt_->Quiesce());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // every writer is parked
  const std::vector<char> file = ReadAll(dir_.File("f"));
  for (int t = 0; t < kThreads; ++t) {
    uint64_t in_file, original;
    std::memcpy(&in_file, file.data() + (8 + 20 * t) * kBlock, sizeof(in_file));
    std::memcpy(&original, want_.data() + (8 + 20 * t) * kBlock, sizeof(original));
    // Atomic: nothing unsynced reached the file; what the threads stored is staged.
    EXPECT_EQ(in_file, atomic() ? original : published[t].load()) << "thread " << t;
    EXPECT_GT(published[t].load(), 0u);
  }
  ASSERT_OK(rt_->Resume());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stop = true;
  for (auto& th : threads) th.join();
  ASSERT_OK(rt_->Sync(p_, kSize));
  // Every thread's last store is in the memory the umsync wrote back: the file holds it
  // (ExpectFileAfterSync).
  std::vector<char> last(p_, p_ + kSize);
  for (int t = 0; t < kThreads; ++t) {
    uint64_t in_memory;
    std::memcpy(&in_memory, last.data() + (8 + 20 * t) * kBlock, sizeof(in_memory));
    EXPECT_EQ(in_memory, published[t].load()) << "thread " << t << " after the resume";
  }
  ExpectFileAfterSync(last);
}

TEST_P(QuiesceTest, UmsyncDuringTheQuiesceWaitsForTheResume) {
  ASSERT_OK(rt_->Quiesce());
  std::atomic<bool> returned{false};
  absl::Status synced;
  std::thread t([&] {
    synced = rt_->Sync(p_, kSize);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(returned.load());
  ASSERT_OK(rt_->Resume());
  t.join();
  EXPECT_TRUE(synced.ok()) << synced;
}

TEST_P(QuiesceTest, AFailedWriteBackLeavesTheRuntimeRunningWithNothingLost) {
  Scribble('c');
  ASSERT_OK(env_.FailNext(Op::kWrite, 1000, Fault::Error(ENOSPC)));
  // Atomic: the quiesce writes nothing unsynced to the file, but it must apply what a
  // umsync committed and could not apply.
  if (atomic()) {
    const absl::Status synced = rt_->Sync(p_, kSize);
    // With defer_file_sync the umsync returns at its commit, before the applier's write
    // fails (or at the failure, if the applier got there first).
    if (GetParam().defer_file_sync && synced.ok()) {
      SUCCEED() << "acknowledged at the commit";
    } else {
      EXPECT_EQ(ErrnoFromStatus(synced), ENOSPC) << synced;
    }
  }
  absl::Status s = rt_->Quiesce();
  EXPECT_EQ(ErrnoFromStatus(s), ENOSPC) << s;
  EXPECT_EQ(rt_->state(), RuntimeState::kRunning);
  EXPECT_FALSE(UndumpableFds().empty());
  EXPECT_EQ(std::vector<char>(p_, p_ + kSize), want_) << "served as before";
  env_.ClearAll();
  ASSERT_OK(rt_->Quiesce());
  EXPECT_EQ(ReadAll(dir_.File("f")), want_);
  ASSERT_OK(rt_->Resume());
}

// A writable open by another process during the checkpoint takes the journal over: while
// it holds it the resume is refused as busy (still quiesced, retriable); once it took it,
// the resume is fenced, since that owner may have replayed into the files.
TEST_P(QuiesceTest, ResumeAfterAnotherOwnerOpenedTheJournalIsFenced) {
  ASSERT_OK(rt_->Quiesce());
  auto j = OpenJournal(/*writable=*/true);
  ASSERT_TRUE(j.ok()) << j.status();
  absl::Status s = rt_->Resume();
  EXPECT_EQ(ErrnoFromStatus(s), EBUSY) << s;
  EXPECT_EQ(rt_->state(), RuntimeState::kQuiesced) << "still quiesced: retry later";
  j->reset();
  s = rt_->Resume();
  EXPECT_EQ(ErrnoFromStatus(s), ESTALE) << s;
  EXPECT_NE(s.message().find("taken over"), std::string::npos) << s;
  EXPECT_EQ(rt_->state(), RuntimeState::kFenced);
}

TEST_P(QuiesceTest, ResumeFencesARuntimeWhoseJournalAnotherWriterUsed) {
  Scribble('d');
  ASSERT_OK(rt_->Quiesce());
  const std::vector<char> at_checkpoint = ReadAll(dir_.File("f"));
  EXPECT_EQ(at_checkpoint, atomic() ? Pattern(kSize) : want_);
  {
    // The job restarted elsewhere from the same journal and wrote on.
    auto other = Runtime::Create(Options(dir_.File("journal")));
    ASSERT_TRUE(other.ok()) << other.status();
    const int fd = ::open(dir_.File("f").c_str(), O_RDWR);
    auto p = (*other)->Map(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_TRUE(p.ok()) << p.status();
    static_cast<char*>(*p)[3] = 'N';
    ASSERT_OK((*other)->Unmap(*p, kSize));
    ::close(fd);
  }
  std::vector<char> newer = at_checkpoint;
  newer[3] = 'N';
  absl::Status s = rt_->Resume();
  EXPECT_EQ(ErrnoFromStatus(s), ESTALE) << s;
  EXPECT_NE(s.message().find("taken over"), std::string::npos) << s;
  EXPECT_EQ(rt_->state(), RuntimeState::kFenced);
  EXPECT_EQ(ErrnoFromStatus(rt_->Sync(p_, kSize)), ESTALE);
  EXPECT_EQ(ErrnoFromStatus(rt_->Resume()), ESTALE);
  EXPECT_EQ(ErrnoFromStatus(rt_->Quiesce()), ESTALE);
  // It released the journal and never writes: another runtime may open it.
  EXPECT_TRUE(OpenJournal().ok());
  ASSERT_OK(rt_->Unmap(p_, kSize));
  EXPECT_EQ(ReadAll(dir_.File("f")), newer);
}

TEST_P(QuiesceTest, ResumeFencesARuntimeWhoseFileChangedSize) {
  ASSERT_OK(rt_->Quiesce());
  ASSERT_EQ(::ftruncate(fd_, kSize + kBlock), 0);
  absl::Status s = rt_->Resume();
  EXPECT_EQ(ErrnoFromStatus(s), ESTALE) << s;
  EXPECT_NE(s.message().find("changed size"), std::string::npos) << s;
  EXPECT_EQ(rt_->state(), RuntimeState::kFenced);
}

TEST_P(QuiesceTest, AFencedRuntimesMappingGivesSigsegvNotStaleBytes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!rt_->Quiesce().ok()) std::_Exit(2);
        if (::ftruncate(fd_, kSize + kBlock) != 0) std::_Exit(3);
        if (ErrnoFromStatus(rt_->Resume()) != ESTALE) std::_Exit(4);
        (void)*static_cast<volatile char*>(p_ + 7);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "fenced runtime");
}

TEST_P(QuiesceTest, AWriteToAReadOnlyMappingStillFaultsAfterAQuiesce) {
  // Umap's SIGSEGV handler, installed by the quiesce, must not retry an access the running
  // mapping forbids.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int ro = ::open(dir_.File("f").c_str(), O_RDONLY);
  ASSERT_GE(ro, 0);
  auto p = rt_->Map(nullptr, kSize, PROT_READ, MAP_SHARED, ro, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  char* r = static_cast<char*>(*p);
  EXPECT_EXIT(
      {
        if (!rt_->Quiesce().ok() || !rt_->Resume().ok()) std::_Exit(2);
        if (r[5] != Pattern(kSize)[5]) std::_Exit(3);
        *static_cast<volatile char*>(r + 5) = 'x';
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
  ASSERT_OK(rt_->Unmap(r, kSize));
  ::close(ro);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, QuiesceTest,
    ::testing::Values(Mode{"signal_atomic", UMAP_FAULT_SIGNAL, UMAP_POLICY_ATOMIC},
                      Mode{"handler_atomic", UMAP_FAULT_HANDLER, UMAP_POLICY_ATOMIC},
                      Mode{"signal_relaxed", UMAP_FAULT_SIGNAL, UMAP_POLICY_RELAXED},
                      Mode{"signal_atomic_deferred", UMAP_FAULT_SIGNAL, UMAP_POLICY_ATOMIC, true},
                      Mode{"signal_relaxed_deferred", UMAP_FAULT_SIGNAL, UMAP_POLICY_RELAXED,
                           true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace umap::runtime
