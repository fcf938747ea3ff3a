// A umsync's memory is bounded: 8 processes, each umsyncing about 39 MiB of scattered dirty
// blocks (atomic policy, its own automatic journal, the default runtime), share one 256 MiB
// memory cgroup and all finish, with every store in the file, without an OOM kill and
// without stalling at the limit. Before the journal's memtables, read-ahead buffers and the
// umsync chunk were cut (docs/durability.md "What a umsync holds in memory"), each writer
// held 40-45 MiB of anonymous memory and the eight stalled at the limit for good.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/memory_cgroup.h"
#include "tests/testing/capability.h"

namespace umap::runtime {
namespace {

using umap_bench::MemoryCgroup;

struct Writer {
  pid_t pid = -1;
  int out = -1;
  std::string output;
  int status = 0;
};

Writer Start(const MemoryCgroup& cg, const std::string& file) {
  Writer w;
  int p[2];
  if (::pipe(p) != 0) return w;
  w.pid = ::fork();
  if (w.pid == 0) {
    ::dup2(p[1], 1);
    ::dup2(p[1], 2);
    ::close(p[0]);
    if (!cg.Join().ok()) ::_exit(120);
    ::setenv("UMAP_POLICY", "atomic", 1);
    ::unsetenv("UMAP_JOURNAL_DIR");  // each its own automatic journal
    const std::string bytes = std::to_string(256 << 20), dirty = std::to_string(39 << 20);
    ::execl(UMAP_UMSYNC_MEMORY_WORKER, UMAP_UMSYNC_MEMORY_WORKER, file.c_str(), bytes.c_str(),
            dirty.c_str(), "2", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(p[1]);
  w.out = p[0];
  return w;
}

TEST(UmsyncMemory, EightWritersUmsyncing39MiBEachFinishInOne256MiBCgroup) {
  UMAP_SKIP_WITHOUT("memory-cgroup");
  const std::string dir = absl::StrCat("/var/tmp/umap-umsync-memory-", ::getpid());
  std::filesystem::create_directories(dir);
  auto parent = MemoryCgroup::DefaultParent();
  ASSERT_TRUE(parent.ok()) << parent.status();
  auto cg = MemoryCgroup::Create(*parent, absl::StrCat("umap-umsync-memory-", ::getpid()),
                                 uint64_t{256} << 20);
  ASSERT_TRUE(cg.ok()) << cg.status();
  std::vector<Writer> writers;
  for (int i = 0; i < 8; ++i) {
    writers.push_back(Start(*cg, absl::StrCat(dir, "/f", i)));
    ASSERT_GT(writers.back().pid, 0);
  }
  // A stall at the limit never ends by itself: whoever is still running after this long
  // is killed and reported. (They finish in 20-40 s on a loaded 2-core machine.)
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(240);
    while (!done && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!done) {
      for (const Writer& w : writers) ::kill(w.pid, SIGKILL);
    }
  });
  for (Writer& w : writers) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(w.out, buf, sizeof buf)) > 0) w.output.append(buf, static_cast<size_t>(n));
    ::close(w.out);
    ::waitpid(w.pid, &w.status, 0);
  }
  done = true;
  watchdog.join();
  auto kills = cg->OomKills();
  ASSERT_TRUE(kills.ok()) << kills.status();
  EXPECT_EQ(*kills, 0u);
  for (size_t i = 0; i < writers.size(); ++i) {
    const Writer& w = writers[i];
    EXPECT_TRUE(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0)
        << "writer " << i << ": status " << w.status << " (SIGKILL: OOM-killed or stalled)\n"
        << w.output;
    EXPECT_NE(w.output.find("done hwm="), std::string::npos) << w.output;
  }
  auto peak = cg->Peak();
  if (peak.ok()) RecordProperty("cgroup_peak", static_cast<int>(*peak >> 20));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace umap::runtime
