// A process that writes a working set through umap with lazy sizing, is squeezed by memory
// pressure (a fake probe's event) so that its dirty blocks leave the cache through the
// write-back sink, reports which blocks left (mincore) on REPORT_FD, and dies:
//   kill    SIGKILL as soon as the write-back thread has written what was evicted
//           (relaxed policy: evicted blocks are committed and applied on their own);
//   commit  umsync, killed by the crash point journal.after_commit (atomic policy: the
//           evicted blocks were staged and go into that umsync's transaction).
// lazy_sizing_test recovers the file and checks it.
//
// usage: lazy_crash_worker DIR atomic|relaxed kill|commit REPORT_FD
// Exit: killed by SIGKILL when all went as planned; 10..19 name the step that failed.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <signal.h>
#include <string>
#include <thread>
#include <vector>

#include "base/crash_point.h"
#include "runtime/runtime.h"
#include "tests/runtime/fake_memory_probe.h"

namespace {

using std::chrono::steady_clock;
using umap::runtime::Runtime;
using umap::runtime::RuntimeOptions;

constexpr size_t kBlock = 4096;
constexpr uint64_t kBlocks = 2048;

uint64_t Blocks(uint64_t bytes) { return bytes / kBlock; }

template <typename Until>
bool WaitFor(Until until, int seconds) {
  const auto end = steady_clock::now() + std::chrono::seconds(seconds);
  while (steady_clock::now() < end) {
    if (until()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return until();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) return 2;
  const std::string dir = argv[1];
  const bool atomic = std::strcmp(argv[2], "atomic") == 0;
  const bool commit = std::strcmp(argv[3], "commit") == 0;
  const int report_fd = std::atoi(argv[4]);
  auto probe = std::make_shared<umap::testing::FakeMemoryProbe>(8ull << 30, 0);
  RuntimeOptions o;
  o.lazy_start_bytes = 64 * kBlock;
  o.stats_period_ms = 0;
  o.journal_dir = dir + "/journal";
  o.policy = atomic ? UMAP_POLICY_ATOMIC : UMAP_POLICY_RELAXED;
  o.memory_probe = probe;
  auto rt = Runtime::Create(o);
  if (!rt.ok()) return 10;
  const int fd = ::open((dir + "/data").c_str(), O_RDWR);
  auto m = (*rt)->Map(nullptr, kBlocks * kBlock, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd < 0 || !m.ok()) return 11;
  char* p = static_cast<char*>(*m);
  // Every block gets its number as new content (several passes: the cache grows to it).
  for (int pass = 0; pass < 4; ++pass) {
    for (uint64_t b = 0; b < kBlocks; ++b) {
      std::memset(p + b * kBlock, static_cast<char>(b % 251 + 1), kBlock);
    }
  }
  if (Blocks((*rt)->Stats().cache_capacity_bytes) < kBlocks / 2) return 12;
  // A smaller hot set for a while, so that the virtual capacity falls; then pressure.
  std::mt19937_64 rng(8);
  const auto until = steady_clock::now() + std::chrono::seconds(30);
  while (steady_clock::now() < until &&
         Blocks((*rt)->Stats().cache_virtual_bytes) >= kBlocks / 2) {
    for (int i = 0; i < 2000; ++i) (void)static_cast<volatile char*>(p)[(rng() % 128) * kBlock];
  }
  probe->Pressure();
  if (!WaitFor([&] {
        return (*rt)->Stats().cache_shrunk_blocks > 0 &&
               (*rt)->pool().held() <= (*rt)->pool().limit();
      }, 30)) {
    return 13;
  }
  if ((*rt)->Stats().dirty_evictions == 0) return 14;
  // Which blocks left the cache: their pages are no longer resident.
  std::vector<unsigned char> vec(kBlocks);
  if (::mincore(p, kBlocks * kBlock, vec.data()) != 0) return 15;
  if (::write(report_fd, vec.data(), vec.size()) != static_cast<ssize_t>(vec.size())) return 16;
  if (!commit) {
    if (!WaitFor([&] {
          const umap_stats s = (*rt)->Stats();
          return s.blocks_written >= s.dirty_evictions;
        }, 30)) {
      return 17;
    }
    ::raise(SIGKILL);
  }
  if (!umap::crash_point::Arm("journal.after_commit", 1, umap::crash_point::Action::Kill()).ok()) {
    return 18;
  }
  (void)(*rt)->Sync(p, kBlocks * kBlock);
  return 19;  // the crash point did not fire
}
