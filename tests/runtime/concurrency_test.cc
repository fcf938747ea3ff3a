// Multi-threaded reads and writes through a cache 1/8 of the file, checked against an
// independent reference: each thread owns interleaved 64-byte stripes of the file, keeps the
// bytes it expects in its own shadow copy, and checks every read of its stripes against it.
// Stripes of different threads share blocks, so blocks are faulted, dirtied, captured and
// evicted under contention. The file is compared byte for byte after uunmap.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/runtime/test_file.h"
#include "umap/umap.h"

namespace umaptest {
namespace {

constexpr size_t kStripe = 64;

struct Params {
  size_t block_size;
  unsigned handlers;
  int threads;
};

// An 8 MiB pattern file mapped read-write through a runtime whose cache is 1/8 of it.
class ConcurrencyTest : public ::testing::TestWithParam<Params> {
 protected:
  static constexpr size_t size = 8u << 20;

  void SetUp() override {
    const Params prm = GetParam();
    path = dir.File("f");
    fd = MakePatternFile(path, size);
    ASSERT_GE(fd, 0);
    umap_config c;
    ASSERT_EQ(umap_config_init(&c), 0);
    c.cache_bytes = size / 8;
    c.block_size = prm.block_size;
    c.handler_threads = prm.handlers;
    rt = umap_runtime_create(&c);
    ASSERT_NE(rt, nullptr) << std::strerror(errno);
    p = static_cast<char*>(umap_ex(rt, nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ASSERT_NE(p, MAP_FAILED) << std::strerror(errno);
  }
  void TearDown() override {
    if (fd >= 0) ::close(fd);
    if (rt != nullptr) {
      EXPECT_EQ(umap_runtime_destroy(rt), 0);
    }
  }

  TempDir dir;
  std::string path;
  int fd = -1;
  umap_runtime* rt = nullptr;
  char* p = nullptr;
};

TEST_P(ConcurrencyTest, RandomReadsAndWritesMatchTheReference) {
  const Params prm = GetParam();

  const int T = prm.threads;
  const size_t stripes = size / kStripe;
  std::vector<std::vector<char>> expected(T, Pattern(size));
  std::atomic<int> mismatches{0};
  std::atomic<int> sync_errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < T; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(0x9e3779b97f4a7c15ull * (t + 1) + prm.block_size);
      std::vector<char>& mine = expected[t];
      for (int op = 0; op < 6000; ++op) {
        // A random stripe owned by this thread.
        size_t s = (rng() % (stripes / T)) * T + t;
        size_t off = s * kStripe + rng() % kStripe;
        size_t len = 1 + rng() % (kStripe - off % kStripe);
        switch (rng() % 10) {
          case 0: case 1: case 2: case 3: {  // write
            for (size_t i = 0; i < len; ++i) {
              char v = static_cast<char>(rng());
              p[off + i] = v;
              mine[off + i] = v;
            }
            break;
          }
          case 4:
            if (t == 0 && op % 500 == 0 && umsync(p, size, MS_SYNC) != 0) ++sync_errors;
            break;
          default:  // read
            if (std::memcmp(p + off, mine.data() + off, len) != 0) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(sync_errors.load(), 0);
  umap_stats st;
  ASSERT_EQ(umap_get_stats(rt, &st), 0);
  EXPECT_LE(st.cache_bytes_peak, st.cache_bytes_limit);
  
  EXPECT_LE(st.cache_bytes_limit, size / 8);
  EXPECT_GT(st.dirty_evictions, 0u);
  EXPECT_GT(st.faults_wp, 0u);
  ASSERT_EQ(uunmap(p, size), 0) << std::strerror(errno);

  // Merge the per-thread references: stripe s belongs to thread s % T.
  std::vector<char> want = Pattern(size);
  for (size_t s = 0; s < stripes; ++s) {
    const std::vector<char>& owner = expected[s % T];
    std::memcpy(want.data() + s * kStripe, owner.data() + s * kStripe, kStripe);
  }
  std::vector<char> got = ReadAll(path);
  ASSERT_EQ(got.size(), size);
  size_t first_bad = size, bad = 0, bad_original = 0, bad_blocks = 0, last_block = ~size_t{0};
  std::vector<char> original = Pattern(size);
  for (size_t i = 0; i < size; ++i) {
    if (got[i] == want[i]) continue;
    if (first_bad == size) first_bad = i;
    ++bad;
    bad_original += got[i] == original[i];
    if (i / prm.block_size != last_block) {
      ++bad_blocks;
      last_block = i / prm.block_size;
    }
  }
  EXPECT_EQ(first_bad, size) << "file differs from the reference first at byte " << first_bad
                             << " (block " << first_bad / prm.block_size << "); " << bad
                             << " bytes differ in " << bad_blocks << " blocks, " << bad_original
                             << " of them still hold the original bytes";
}

// Every umsync that returns 0 covers the caller's earlier writes: each thread writes one of
// its stripes, syncs the page, and reads the file back with pread. (A umsync that skipped a
// block whose fault handler had woken the writer but not yet published the block as dirty
// once lost such writes.)
TEST_P(ConcurrencyTest, EachAcknowledgedUmsyncIsInTheFile) {
  const Params prm = GetParam();
  const int T = prm.threads;
  const size_t stripes = size / kStripe;
  std::atomic<int> lost{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < T; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(77 + t);
      char back[kStripe];
      for (int op = 0; op < 300; ++op) {
        size_t s = (rng() % (stripes / T)) * T + t;
        char* at = p + s * kStripe;
        for (size_t i = 0; i < kStripe; ++i) at[i] = static_cast<char>(rng());
        char* page = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(at) & ~uintptr_t{4095});
        if (umsync(page, 4096, MS_SYNC) != 0) {
          ++errors;
          continue;
        }
        if (::pread(fd, back, kStripe, static_cast<off_t>(s * kStripe)) != static_cast<ssize_t>(kStripe) ||
            std::memcmp(back, at, kStripe) != 0) {
          ++lost;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(lost.load(), 0) << "acknowledged umsyncs whose bytes were not in the file";
  ASSERT_EQ(uunmap(p, size), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, ConcurrencyTest,
    ::testing::Values(Params{4096, 2, 4}, Params{4096, 1, 6}, Params{16384, 2, 4},
                      Params{65536, 3, 8}),
    [](const ::testing::TestParamInfo<Params>& i) {
      return "block" + std::to_string(i.param.block_size) + "_handlers" +
             std::to_string(i.param.handlers) + "_threads" + std::to_string(i.param.threads);
    });

}  // namespace
}  // namespace umaptest
