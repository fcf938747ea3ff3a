// Lazy sizing on the real fault path (docs/design.md "Cache sizing"): a scan does not grow
// the cache, a reused working set grows it to its size and no further, a phase change
// lowers the virtual capacity, memory pressure and a smaller budget shrink the cache without
// losing a dirty block (also across a crash), several mappings share by marginal gain, and
// the fault path allocates nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "faultinject/fault_env.h"
#include "runtime/fault/mapping.h"
#include "runtime/runtime.h"
#include "runtime/sizing/cache_sizer.h"
#include "runtime/sizing/cgroup_board.h"
#include "runtime/stats/stats_segment.h"
#include "tests/runtime/fake_memory_probe.h"
#include "tests/runtime/test_file.h"

// The fault path runs in the faulting thread (signal mode), so that thread's allocation
// count is the fault path's.
#include "tests/testing/counting_new.h"

namespace umap::runtime {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using testing::FakeMemoryProbe;
using umaptest::PatternByte;

constexpr size_t kBlock = 4096;

uint64_t Blocks(uint64_t bytes) { return bytes / kBlock; }

class LazySizing : public ::testing::Test {
 protected:
  struct Made {
    std::unique_ptr<Runtime> rt;
    char* p = nullptr;
    size_t bytes = 0;
  };

  RuntimeOptions Options(uint32_t start_blocks, size_t cache_bytes = 0) {
    RuntimeOptions o;
    o.cache_bytes = cache_bytes;
    o.lazy_start_bytes = start_blocks * kBlock;
    o.stats_period_ms = 0;
    o.journal_dir = dir_.File("journal");
    o.memory_probe = probe_;
    return o;
  }

  // A pattern file of `blocks` blocks, mapped.
  char* MapFile(Runtime& rt, const std::string& name, uint64_t blocks, bool writable) {
    const int fd =
        umaptest::MakePatternFile(dir_.File(name), blocks * kBlock, writable ? O_RDWR : O_RDONLY);
    EXPECT_GE(fd, 0);
    auto p = rt.Map(nullptr, blocks * kBlock, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                    MAP_SHARED, fd, 0);
    ::close(fd);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? static_cast<char*>(*p) : nullptr;
  }

  static void Read(const char* p, uint64_t block) {
    // In the first half of the block (writers in these tests use the second).
    const uint64_t off = block * kBlock + (block * 97) % (kBlock / 2);
    ASSERT_EQ(static_cast<volatile const char*>(p)[off], PatternByte(off)) << "block " << block;
  }

  // Random accesses over blocks [0, w) of p until `done` says so or `seconds` pass.
  template <typename Done>
  static void AccessUntil(const char* p, uint64_t w, double seconds, std::mt19937_64& rng,
                          Done done) {
    const auto end = steady_clock::now() + std::chrono::duration<double>(seconds);
    while (steady_clock::now() < end && !done()) {
      for (int i = 0; i < 2000; ++i) Read(p, rng() % w);
    }
  }

  // The runtime's one mapping.
  static Mapping* OnlyMapping(Runtime& rt) {
    Mapping* m = nullptr;
    rt.WhileMappingsPinned([&] { rt.ForEachMapping([&](Mapping& x) { m = &x; }); });
    return m;
  }

  // Reads lone blocks `spacing` apart (random misses: no read-ahead around them) with the
  // sizer running in short bursts, until it has parked one for which `wanted(block)` holds;
  // returns it (0: none in 10 s). The sizer is stopped on return, so the block stays parked.
  template <typename Wanted>
  static uint64_t ParkALoneBlock(CacheSizer* sizer, Mapping& m, const char* p,
                                 uint64_t blocks, uint64_t spacing, Wanted wanted) {
    const auto end = steady_clock::now() + std::chrono::seconds(10);
    while (steady_clock::now() < end) {
      sizer->Start();
      for (uint64_t b = spacing; b < blocks; b += spacing) Read(p, b);
      std::this_thread::sleep_for(milliseconds(50));
      sizer->Stop();
      for (uint64_t b = spacing; b < blocks; b += spacing) {
        if (m.table().Load(b).parked() && wanted(b)) return b;
      }
    }
    return 0;
  }

  void ExpectGrowthKeepsUpWithAReusedSet();

  std::shared_ptr<FakeMemoryProbe> probe_ = std::make_shared<FakeMemoryProbe>(8ull << 30, 0);
  umaptest::TempDir dir_;
};

TEST_F(LazySizing, ScanOfAFile64TimesTheStartStaysAtTheStart) {
  const uint32_t start = 64;
  auto rt = Runtime::Create(Options(start));
  ASSERT_TRUE(rt.ok()) << rt.status();
  const uint64_t blocks = 64 * start;
  char* p = MapFile(**rt, "scan", blocks, false);
  ASSERT_NE(p, nullptr);
  for (uint64_t b = 0; b < blocks; ++b) Read(p, b);
  const umap_stats s = (*rt)->Stats();
  EXPECT_EQ(s.lazy_sizing, 1);
  EXPECT_EQ(s.cache_remisses, 0u) << "a scan touches each block once";
  EXPECT_EQ(s.cache_grows, 0u);
  EXPECT_EQ(Blocks(s.cache_capacity_bytes), start);
  const uint64_t shadows = (*rt)->geometry().shadow_blocks;
  EXPECT_LE(Blocks(s.cache_bytes_peak), start + shadows) << "it never held more than its start";
  EXPECT_GE(s.blocks_read, blocks);
  ASSERT_TRUE((*rt)->Unmap(p, blocks * kBlock).ok());
}

TEST_F(LazySizing, RandomWorkingSetGrowsToItAndStopsWithinABatch) {
  const uint32_t start = 64;
  const uint64_t w = 1024;
  auto rt = Runtime::Create(Options(start));
  ASSERT_TRUE(rt.ok()) << rt.status();
  char* p = MapFile(**rt, "ws", 4 * w, false);
  ASSERT_NE(p, nullptr);
  std::mt19937_64 rng(1);
  uint64_t capacity = 0, same = 0;
  for (int round = 0; round < 200 && same < 5; ++round) {
    for (int i = 0; i < 5000; ++i) Read(p, rng() % w);
    const uint64_t c = Blocks((*rt)->Stats().cache_capacity_bytes);
    same = c == capacity && c >= w ? same + 1 : 0;
    capacity = c;
  }
  const umap_stats s = (*rt)->Stats();
  const uint64_t batch = std::max<uint64_t>((1 << 20) / kBlock, w / 8);
  EXPECT_GE(capacity, w) << "grew to the working set";
  EXPECT_LE(capacity, w + batch) << "and stopped within one batch of it";
  EXPECT_GT(s.cache_grows, 0u);
  EXPECT_GT(s.cache_remisses, 0u);
  // Once it fits, nothing misses any more: another pass reads nothing.
  const uint64_t read = (*rt)->Stats().blocks_read;
  for (int i = 0; i < 20000; ++i) Read(p, rng() % w);
  EXPECT_LE((*rt)->Stats().blocks_read - read, w / 16) << "only parked blocks left early";
  ASSERT_TRUE((*rt)->Unmap(p, 4 * w * kBlock).ok());
}

// Uniform random reads over W blocks by 4 threads from a cache of W/64: every block is
// missed once (the cold misses) and every block evicted before the cache reached W is
// missed again. Here (a small set of a local file) growth keeps up either way, early
// growth or not (2-6% of W missed again); the benchmark's 128 MiB set is where early
// growth shows (docs/design.md "Lazy expansion"). This bounds the cost of warming up.
void LazySizing::ExpectGrowthKeepsUpWithAReusedSet() {
  const uint64_t w = 8192;
  auto rt = Runtime::Create(Options(w / 64));
  ASSERT_TRUE(rt.ok()) << rt.status();
  char* p = MapFile(**rt, "reused", w, false);
  ASSERT_NE(p, nullptr);
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([p, t] {
      std::mt19937_64 rng(3 + t);
      for (int i = 0; i < 10 * static_cast<int>(w); ++i) Read(p, rng() % w);
    });
  }
  for (auto& r : readers) r.join();
  const umap_stats s = (*rt)->Stats();
  EXPECT_GE(Blocks(s.cache_capacity_bytes), w) << "grew to the working set";
  EXPECT_LE(s.blocks_read, w + w / 8) << "cold misses plus at most an eighth of the set again";
  ASSERT_TRUE((*rt)->Unmap(p, w * kBlock).ok());
}

TEST_F(LazySizing, GrowthKeepsUpWithAReusedSet) { ExpectGrowthKeepsUpWithAReusedSet(); }

TEST_F(LazySizing, GrowthKeepsUpWithAReusedSetAloneInAMemoryCgroup) {
  // In a memory cgroup the runtime takes its share of the room through the cgroup's board
  // (runtime/sizing/cgroup_board.h). Alone there, its ceiling is all of the room: when shares were
  // capped at what each runtime asked (its limit plus a step, published every 100 ms), the
  // cache climbed a step per period and missed most of the set again on the way.
  probe_->InCgroup(absl::StrCat("/umap-test", dir_.path()));
  ExpectGrowthKeepsUpWithAReusedSet();
}

TEST_F(LazySizing, ANewRuntimeAsksItsCgroupBoardForItsStartNotItsHardCap) {
  // What a runtime publishes first is what the others of its cgroup leave it: asking for
  // the pool's hard cap would take the room from them until its next period.
  const std::string id = absl::StrCat("/umap-test", dir_.path());
  probe_->InCgroup(id);
  auto rt = Runtime::Create(Options(64));
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto other = CgroupBoard::Join(id);  // the runtime's board: same cgroup, same directory
  ASSERT_TRUE(other.ok()) << other.status();
  const uint64_t room = uint64_t{1} << 30;
  const CgroupBoard::View v = (*other)->Publish(0, 0, StatsSegment::MonotonicMicros(),
                                                [&](uint64_t) { return room; });
  EXPECT_EQ(v.runtimes, 2u);
  // The runtime asks for its start (64 blocks) plus at most a growth step (1 MiB): the
  // newcomer gets half of the rest.
  EXPECT_GE(v.share, (room - (2u << 20)) / 2);
}

TEST_F(LazySizing, PhaseChangeToASmallerSetLowersTheVirtualCapacity) {
  const uint64_t w1 = 2048, w2 = 256;
  auto rt = Runtime::Create(Options(64));
  ASSERT_TRUE(rt.ok()) << rt.status();
  char* p = MapFile(**rt, "phase", 2 * w1, false);
  ASSERT_NE(p, nullptr);
  std::mt19937_64 rng(2);
  // Phase 1 until the cache holds the set and a few epochs judged it.
  AccessUntil(p, w1, 20, rng, [&] { return Blocks((*rt)->Stats().cache_capacity_bytes) >= w1; });
  AccessUntil(p, w1, 2, rng, [] { return false; });
  const uint64_t v1 = Blocks((*rt)->Stats().cache_virtual_bytes);
  EXPECT_GE(v1, w1 / 2) << "the big set needs most of it";
  // Phase 2: a set 8x smaller, all hits now: only the parked samples see it.
  // Judged once an epoch puts it below half: an epoch whose parked samples saw no miss at
  // all can put it at 0 for a moment (seen once in CI as an unprivileged user); the next
  // ones must settle between the small set and half the big one.
  uint64_t v2 = v1;
  AccessUntil(p, w2, 20, rng, [&] {
    v2 = Blocks((*rt)->Stats().cache_virtual_bytes);
    return v2 < v1 / 2 && v2 >= w2 / 2;
  });
  EXPECT_LT(v2, v1 / 2) << "the virtual capacity follows the phase";
  RecordProperty("virtual_blocks_before", static_cast<int>(v1));
  RecordProperty("virtual_blocks_after", static_cast<int>(v2));
  EXPECT_GE(v2, w2 / 2);
  EXPECT_GT((*rt)->Stats().sampled_hits, 0u);
  umap_mapping_stats ms;
  ASSERT_TRUE((*rt)->MappingStats(p, &ms));
  EXPECT_EQ(ms.virtual_bytes, v2 * kBlock);
  EXPECT_GT(ms.working_set_bytes, 0u);
  EXPECT_GT(ms.remisses, 0u);
  ASSERT_TRUE((*rt)->Unmap(p, 2 * w1 * kBlock).ok());
}

TEST_F(LazySizing, PressureShrinksTheCacheToItsVirtualCapacity) {
  const uint64_t w1 = 2048, w2 = 256;
  auto rt = Runtime::Create(Options(64));
  ASSERT_TRUE(rt.ok()) << rt.status();
  char* p = MapFile(**rt, "pressure", 2 * w1, true);
  ASSERT_NE(p, nullptr);
  std::mt19937_64 rng(3);
  AccessUntil(p, w1, 20, rng, [&] { return Blocks((*rt)->Stats().cache_capacity_bytes) >= w1; });
  uint64_t v = 0;
  AccessUntil(p, w2, 20, rng, [&] {
    v = Blocks((*rt)->Stats().cache_virtual_bytes);
    return v > 0 && v < w1 / 2;
  });
  ASSERT_LT(v, w1 / 2);
  const auto pressed = steady_clock::now();
  probe_->Pressure();
  AccessUntil(p, w2, 10, rng, [&] {
    return Blocks((*rt)->Stats().cache_capacity_bytes) < w1 / 2 &&
           (*rt)->pool().held() <= (*rt)->pool().limit();
  });
  const umap_stats s = (*rt)->Stats();
  EXPECT_EQ(s.memory_pressure_events, 1u);
  EXPECT_LT(Blocks(s.cache_capacity_bytes), w1 / 2);
  EXPECT_LE((*rt)->pool().held(), (*rt)->pool().limit()) << "the real capacity followed";
  EXPECT_GT(s.cache_shrunk_blocks, 0u);
  // The ceiling holds the cache there for the policy's hold (4 s without pressure): the big
  // set does not grow it back before. Checked for 3.5 s after the pressure, however much of
  // that the shrink above took on a loaded machine.
  while (steady_clock::now() - pressed < milliseconds(3500)) {
    for (int i = 0; i < 2000; ++i) Read(p, rng() % w1);
    const uint64_t capacity = Blocks((*rt)->Stats().cache_capacity_bytes);
    if (steady_clock::now() - pressed >= milliseconds(3500)) break;  // the hold may be over
    ASSERT_LE(capacity, w1 / 2) << "grown back within the hold";
  }
  ASSERT_TRUE((*rt)->Unmap(p, 2 * w1 * kBlock).ok());
}

// An ordinary user in a cgroup v1 cannot arm its cgroup's pressure trigger, and watches
// the machine's PSI instead, which also fires when other cgroups reclaim at their own
// limits. While the machine has the room this process's cgroup still allows, such a
// trigger is another cgroup's and leaves the cache alone; when it has not, the cache
// shrinks as for its own pressure.
TEST_F(LazySizing, AMachineWideTriggerActsOnlyWhenTheMachineLacksTheCgroupsRoom) {
  const uint64_t w1 = 2048;
  probe_->InCgroup("machine-wide-test");
  probe_->MachineWide(true);
  auto rt = Runtime::Create(Options(64));
  ASSERT_TRUE(rt.ok()) << rt.status();
  char* p = MapFile(**rt, "machine-wide", 2 * w1, true);
  ASSERT_NE(p, nullptr);
  std::mt19937_64 rng(5);
  AccessUntil(p, w1, 20, rng, [&] { return Blocks((*rt)->Stats().cache_capacity_bytes) >= w1; });
  const uint64_t grown = Blocks((*rt)->Stats().cache_capacity_bytes);
  ASSERT_GE(grown, w1);
  probe_->Pressure();  // the machine has all the room: another cgroup's pressure
  const auto t0 = steady_clock::now();
  while (steady_clock::now() - t0 < milliseconds(600)) {
    for (int i = 0; i < 500; ++i) Read(p, rng() % w1);
  }
  EXPECT_EQ((*rt)->Stats().memory_pressure_events, 0u);
  EXPECT_GE(Blocks((*rt)->Stats().cache_capacity_bytes), grown);
  probe_->SetAvailable(16ull << 20);  // now the machine cannot give what the cgroup allows
  probe_->Pressure();
  AccessUntil(p, w1 / 8, 10, rng,
              [&] { return (*rt)->Stats().memory_pressure_events >= 1; });
  EXPECT_EQ((*rt)->Stats().memory_pressure_events, 1u);
  ASSERT_TRUE((*rt)->Unmap(p, 2 * w1 * kBlock).ok());
}

TEST_F(LazySizing, SmallerBudgetShrinksTheCache) {
  auto rt = Runtime::Create(Options(64));
  ASSERT_TRUE(rt.ok()) << rt.status();
  const uint64_t w = 8192;  // 32 MiB
  char* p = MapFile(**rt, "budget", w, false);
  ASSERT_NE(p, nullptr);
  std::mt19937_64 rng(4);
  AccessUntil(p, w, 30, rng, [&] { return Blocks((*rt)->Stats().cache_capacity_bytes) >= w; });
  ASSERT_GE(Blocks((*rt)->Stats().cache_capacity_bytes), w);
  // Something else takes the machine's memory: the machine is 8 MiB past what the budget
  // allows. (The fake's usage does not fall as the cache gives memory back, so the cache
  // keeps giving: every 100 ms another 8 MiB, down to the pool's minimum.)
  const uint64_t limit = 8ull << 30;
  const uint64_t margin = limit / 8 + (*rt)->io().UnrealizedBufferBytes();
  probe_->Set(limit, limit - margin + (8 << 20));
  const auto end = steady_clock::now() + std::chrono::seconds(10);
  while (steady_clock::now() < end && (*rt)->pool().held() > Blocks(8 << 20)) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_LE((*rt)->pool().held(), Blocks(8 << 20));
  EXPECT_LE((*rt)->pool().limit(), Blocks(8 << 20));
  for (uint64_t b = 0; b < w; b += 7) Read(p, b);
  ASSERT_TRUE((*rt)->Unmap(p, w * kBlock).ok());
}

TEST_F(LazySizing, TwoMappingsShareByMarginalGainNotFirstCome) {
  // A hard cap of 1536 blocks. Mapping A re-reads a 768-block set; mapping B reads a
  // 64k-block file uniformly (a gentle curve: more cache barely helps). B starts first and
  // fills the cache; A must still end up holding its set.
  const uint64_t wa = 768, fb = 65536;
  auto rt = Runtime::Create(Options(64, 1600 * kBlock));
  ASSERT_TRUE(rt.ok()) << rt.status();
  char* a = MapFile(**rt, "a", 2 * wa, false);
  char* b = MapFile(**rt, "b", fb, false);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::atomic<bool> stop{false};
  std::thread tb([&] {
    std::mt19937_64 r(5);
    while (!stop.load()) {
      for (int i = 0; i < 500; ++i) Read(b, r() % fb);
    }
  });
  std::this_thread::sleep_for(milliseconds(1500));
  std::mt19937_64 rng(6);
  Mapping* ma = nullptr;
  (*rt)->WhileMappingsPinned([&] {
    (*rt)->ForEachMapping([&](Mapping& m) {
      if (m.base() == a) ma = &m;
    });
  });
  ASSERT_NE(ma, nullptr);
  // Usually a few seconds; the bound is for a loaded machine.
  AccessUntil(a, wa, 60, rng, [&] { return ma->resident_blocks() >= wa * 9 / 10; });
  AccessUntil(a, wa, 2, rng, [] { return false; });
  stop = true;
  tb.join();
  EXPECT_GE(ma->resident_blocks(), wa * 9 / 10) << "A holds its working set";
  EXPECT_GE(ma->quota(), wa * 9 / 10) << "its share";
  ASSERT_TRUE((*rt)->Unmap(a, 2 * wa * kBlock).ok());
  ASSERT_TRUE((*rt)->Unmap(b, fb * kBlock).ok());
}

// Signal mode reads the start of a sequential stream in one run with the blocks after it.
// A parked block after it holds its cache block and its data already: the run must end
// there, not read it again into a second cache block.
TEST_F(LazySizing, AReadRunStopsAtAParkedBlock) {
  RuntimeOptions o = Options(1024);
  o.fault_mode = UMAP_FAULT_SIGNAL;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const uint64_t blocks = 4096, spacing = 64;
  char* p = MapFile(**rt, "run", blocks, false);
  ASSERT_NE(p, nullptr);
  Mapping* m = OnlyMapping(**rt);
  ASSERT_NE(m, nullptr);
  CacheSizer* sizer = (*rt)->sizer();
  ASSERT_NE(sizer, nullptr);
  auto missing = [&](uint64_t b) {
    const CacheEntryTable::Entry e = m->table().Load(b);
    return !e.present() && !e.parked() && !e.filling() && !e.stashed();
  };
  // A parked block whose two blocks before are still missing.
  const uint64_t parked = ParkALoneBlock(sizer, *m, p, blocks, spacing, [&](uint64_t b) {
    return missing(b - 1) && missing(b - 2);
  });
  ASSERT_NE(parked, 0u) << "the sizer parked no block in 10 s";
  const uint32_t held = (*rt)->pool().held();
  // A miss two blocks before it starts a stream; the next miss reads a run.
  Read(p, parked - 2);
  Read(p, parked - 1);
  const CacheEntryTable::Entry e = m->table().Load(parked);
  EXPECT_TRUE(e.parked() && !e.present()) << "entry 0x" << std::hex << e.v;
  EXPECT_EQ((*rt)->pool().held(), held + 2) << "one cache block for each of the two misses";
  Read(p, parked);  // served from its park buffer
  EXPECT_GT((*rt)->Stats().sampled_hits, 0u);
  ASSERT_TRUE((*rt)->Unmap(p, blocks * kBlock).ok());
  EXPECT_EQ((*rt)->pool().held(), 0u) << "no cache block leaked";
  EXPECT_EQ(sizer->parks().in_use(), 0u) << "no park buffer leaked";
}

// Programs that umsync often are in a umsync most of the time. Parking (the sizer's
// sampling of reuse) must go on for the clean blocks of the range meanwhile; only the
// blocks the umsync captured wait for its outcome. Here a umsync of the whole mapping
// waits in the file's fdatasync while the sizer parks lone blocks of that range.
TEST_F(LazySizing, ParkingGoesOnWhileAUmsyncOfTheRangeWaits) {
  faultinject::FaultEnv env(Env::Default());
  RuntimeOptions o = Options(1024);
  o.fault_mode = UMAP_FAULT_SIGNAL;
  o.env = &env;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const uint64_t blocks = 4096, spacing = 64;
  char* p = MapFile(**rt, "synced", blocks, /*writable=*/true);
  ASSERT_NE(p, nullptr);
  Mapping* m = OnlyMapping(**rt);
  ASSERT_NE(m, nullptr);
  CacheSizer* sizer = (*rt)->sizer();
  ASSERT_NE(sizer, nullptr);
  sizer->Stop();
  const uint64_t written = 1;
  p[written * kBlock + kBlock - 1] = 'w';
  absl::Status st = env.FailNext(faultinject::Op::kSync, 1,
                                 faultinject::Fault::Stall(absl::InfiniteDuration()));
  ASSERT_TRUE(st.ok()) << st;
  absl::Status sync_status;
  std::thread syncer([&] { sync_status = (*rt)->Sync(p, blocks * kBlock); });
  ASSERT_TRUE(env.WaitForStalled(1, absl::Seconds(30))) << "the umsync never reached fdatasync";
  const uint64_t parked =
      ParkALoneBlock(sizer, *m, p, blocks, spacing, [](uint64_t) { return true; });
  EXPECT_NE(parked, 0u) << "no block of the umsync's range was parked in 10 s";
  EXPECT_EQ(env.stalled(), 1) << "the umsync is still waiting";
  env.ReleaseStalls();
  syncer.join();
  EXPECT_TRUE(sync_status.ok()) << sync_status;
  if (parked != 0) Read(p, parked);  // served from its park buffer
  EXPECT_EQ(p[written * kBlock + kBlock - 1], 'w');
  ASSERT_TRUE((*rt)->Unmap(p, blocks * kBlock).ok());
  EXPECT_EQ(sizer->parks().in_use(), 0u) << "no park buffer leaked";
  const std::vector<char> file = umaptest::ReadAll(dir_.File("synced"));
  ASSERT_EQ(file.size(), blocks * kBlock);
  EXPECT_EQ(file[written * kBlock + kBlock - 1], 'w') << "the umsync's write reached the file";
}

TEST_F(LazySizing, FaultPathAllocatesNothing) {
  auto rt = Runtime::Create(Options(64));
  ASSERT_TRUE(rt.ok()) << rt.status();
  const uint64_t blocks = 4096;
  char* p = MapFile(**rt, "alloc", blocks, true);
  ASSERT_NE(p, nullptr);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) Read(p, rng() % blocks);  // warm: the thread's first use
  const uint64_t misses_before = (*rt)->Stats().faults_missing;
  const uint64_t before = umaptest::ThreadAllocations();
  // Misses, re-misses, growth, sampled accesses, parked hits and first writes.
  for (int i = 0; i < 40000; ++i) {
    const uint64_t b = rng() % 2048;
    Read(p, b);
    if (i % 8 == 0) p[b * kBlock + kBlock / 2] = static_cast<char>(i);
  }
  const uint64_t allocations = umaptest::ThreadAllocations() - before;
  const umap_stats s = (*rt)->Stats();
  EXPECT_GT(s.faults_missing - misses_before, 1000u);
  EXPECT_GT(s.cache_remisses, 0u);
  EXPECT_GT(s.sampled_hits, 0u) << "parked hits were among them";
  EXPECT_EQ(allocations, 0u) << "allocations by the faulting thread over "
                             << s.faults_missing - misses_before << " faults";
  ASSERT_TRUE((*rt)->Unmap(p, blocks * kBlock).ok());
}

// A worker process (lazy_crash_worker.cc) writes a working set, is squeezed by memory
// pressure (its dirty blocks leave through the journal), and dies; what it wrote must be in
// the file after recovery. A separate process, started fresh: RocksDB's threads do not
// survive a fork.
enum class Death { kKillAfterShrink, kCrashAfterUmsyncCommit };

void CrashAndRecover(const std::string& dir, umap_policy policy, Death death) {
  const uint64_t w = 2048;
  ASSERT_GE(umaptest::MakePatternFile(dir + "/data", w * kBlock), 0);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipefd[0]);
    const std::string fd = std::to_string(pipefd[1]);
    ::execl(UMAP_LAZY_CRASH_WORKER, UMAP_LAZY_CRASH_WORKER, dir.c_str(),
            policy == UMAP_POLICY_ATOMIC ? "atomic" : "relaxed",
            death == Death::kKillAfterShrink ? "kill" : "commit", fd.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(pipefd[1]);
  std::vector<unsigned char> resident(w);
  size_t got = 0;
  while (got < w) {
    const ssize_t n = ::read(pipefd[0], resident.data() + got, w - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(pipefd[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "worker exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1)
      << " (lazy_crash_worker.cc names the step)";
  ASSERT_EQ(got, w);
  // Recovery: mapping the file again with the same journal replays what was committed.
  RuntimeOptions o;
  o.cache_bytes = 4 << 20;
  o.lazy_sizing = false;
  o.stats_period_ms = 0;
  o.journal_dir = dir + "/journal";
  o.policy = policy;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const int fd = ::open((dir + "/data").c_str(), O_RDWR);
  auto m = (*rt)->Map(nullptr, w * kBlock, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE((*rt)->Unmap(*m, w * kBlock).ok());
  ::close(fd);
  const std::vector<char> file = umaptest::ReadAll(dir + "/data");
  ASSERT_EQ(file.size(), w * kBlock);
  uint64_t evicted = 0;
  for (uint64_t b = 0; b < w; ++b) {
    const bool must = death == Death::kCrashAfterUmsyncCommit || !(resident[b] & 1);
    if (!must) continue;
    evicted += (resident[b] & 1) ? 0 : 1;
    for (size_t i = 0; i < kBlock; i += 512) {
      ASSERT_EQ(file[b * kBlock + i], static_cast<char>(b % 251 + 1))
          << "block " << b << (resident[b] & 1 ? " (resident)" : " (evicted by the shrink)");
    }
  }
  EXPECT_GT(evicted, 0u);
}

TEST_F(LazySizing, ShrunkDirtyBlocksAreInTheFileAfterACrashAtomic) {
  CrashAndRecover(dir_.path(), UMAP_POLICY_ATOMIC, Death::kCrashAfterUmsyncCommit);
}

TEST_F(LazySizing, ShrunkDirtyBlocksAreInTheFileAfterACrashRelaxed) {
  CrashAndRecover(dir_.path(), UMAP_POLICY_RELAXED, Death::kKillAfterShrink);
}

TEST_F(LazySizing, OffMeansAFixedCache) {
  RuntimeOptions o = Options(64, 2 << 20);
  o.lazy_sizing = false;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  EXPECT_EQ((*rt)->sizer(), nullptr);
  const umap_stats s = (*rt)->Stats();
  EXPECT_EQ(s.lazy_sizing, 0);
  EXPECT_EQ(s.cache_capacity_bytes, uint64_t{(*rt)->geometry().cache_blocks} * kBlock);
}

TEST_F(LazySizing, UnsetCacheBytesWithLazyOffTakesTheBudget) {
  // A 1 GiB machine with 600 MiB in use: the fixed cache is the rest less the margin
  // (1/8 of the limit and the I/O buffers not yet touched, at most 32 MiB here).
  probe_->Set(1ull << 30, 600ull << 20);
  RuntimeOptions o = Options(64);
  o.lazy_sizing = false;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const uint64_t cap = (*rt)->Stats().cache_capacity_bytes;
  EXPECT_LE(cap, (1024ull - 600 - 128) << 20);
  EXPECT_GE(cap, (1024ull - 600 - 128 - 32) << 20);
}

}  // namespace
}  // namespace umap::runtime
