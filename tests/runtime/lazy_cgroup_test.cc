// The default runtime in real memory cgroups (cgroup v1 or v2, as the machine has): a job
// scanning and re-reading a file four times its memory limit is not OOM-killed, with lazy
// sizing and with a fixed cache taken from the budget, while a fixed 1 GiB cache is (so the
// limit bites); and two jobs in one cgroup end up with comparable shares of it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/memory_cgroup.h"
#include "tests/testing/capability.h"

namespace umap::runtime {
namespace {

using umap_bench::MemoryCgroup;

// A file whose word k holds k + 1 (what lazy_cgroup_worker checks), out of the page cache.
std::string MakeFile(const std::string& dir, const std::string& name, uint64_t bytes) {
  const std::string path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) return "";
  std::vector<uint64_t> chunk(1 << 17);  // 1 MiB
  for (uint64_t off = 0; off < bytes; off += chunk.size() * 8) {
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = off / 8 + i + 1;
    if (::pwrite(fd, chunk.data(), chunk.size() * 8, static_cast<off_t>(off)) !=
        static_cast<ssize_t>(chunk.size() * 8)) {
      ::close(fd);
      return "";
    }
  }
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return path;
}

struct Worker {
  pid_t pid = -1;
  int out = -1;
  std::string output;
  int status = 0;
};

// Starts lazy_cgroup_worker inside `cg` with `env` (NAME=VALUE) added.
Worker Start(const MemoryCgroup& cg, const std::vector<std::string>& args,
             const std::vector<std::string>& env = {}) {
  int p[2];
  Worker w;
  if (::pipe(p) != 0) return w;
  w.pid = ::fork();
  if (w.pid == 0) {
    ::dup2(p[1], 1);
    ::close(p[0]);
    if (!cg.Join().ok()) ::_exit(120);
    for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv = {const_cast<char*>(UMAP_LAZY_CGROUP_WORKER)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(UMAP_LAZY_CGROUP_WORKER, argv.data());
    ::_exit(127);
  }
  ::close(p[1]);
  w.out = p[0];
  return w;
}

void Finish(Worker* w) {
  char buf[4096];
  ssize_t n;
  while ((n = ::read(w->out, buf, sizeof buf)) > 0) w->output.append(buf, static_cast<size_t>(n));
  ::close(w->out);
  ::waitpid(w->pid, &w->status, 0);
}

// The figure `key` of the last report line at or before time `t` (seconds).
uint64_t FigureAt(const std::string& output, const std::string& key, double t) {
  std::istringstream in(output);
  std::string line;
  uint64_t v = 0;
  while (std::getline(in, line)) {
    double lt;
    if (std::sscanf(line.c_str(), "t=%lf", &lt) != 1 || lt > t) continue;
    const size_t at = line.find(" " + key + "=");
    if (at != std::string::npos) v = std::strtoull(line.c_str() + at + key.size() + 2, nullptr, 10);
  }
  return v;
}

class LazyCgroup : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat("/var/tmp/umap-lazy-cgroup-", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<MemoryCgroup> Cgroup(const std::string& name, uint64_t limit) {
    auto parent = MemoryCgroup::DefaultParent();
    if (!parent.ok()) return parent.status();
    return MemoryCgroup::Create(*parent, absl::StrCat("umap-lazy-", ::getpid(), "-", name), limit);
  }

  std::string dir_;
};

TEST_F(LazyCgroup, JobWithTheDefaultRuntimeStaysWithinItsMemoryLimit) {
  UMAP_SKIP_WITHOUT("memory-cgroup");
  // A 256 MiB file in a 64 MiB cgroup: a scan, then 3 s of random reads over 96 MiB.
  const uint64_t limit = 64 << 20;
  const std::string file = MakeFile(dir_, "data", 256 << 20);
  ASSERT_FALSE(file.empty());
  struct Case {
    const char* name;
    std::vector<std::string> env;
    bool survives;
  };
  const Case cases[] = {
      {"lazy", {}, true},
      {"fixed-from-budget", {"UMAP_LAZY_SIZING=0"}, true},
      // The control: a fixed cache the limit cannot hold. It must be killed, or this test
      // would not show anything.
      {"fixed-1g", {"UMAP_LAZY_SIZING=0", "UMAP_CACHE_BYTES=1G"}, false},
  };
  for (const Case& c : cases) {
    auto cg = Cgroup(c.name, limit);
    ASSERT_TRUE(cg.ok()) << cg.status();
    Worker w = Start(*cg, {file, std::to_string(96 << 20), "3"}, c.env);
    ASSERT_GT(w.pid, 0);
    Finish(&w);
    auto kills = cg->OomKills();
    ASSERT_TRUE(kills.ok()) << kills.status();
    auto peak = cg->Peak();
    if (c.survives) {
      EXPECT_TRUE(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0)
          << c.name << ": status " << w.status << "\n"
          << w.output;
      EXPECT_EQ(*kills, 0u) << c.name;
      EXPECT_NE(w.output.find("done reads="), std::string::npos) << c.name << "\n" << w.output;
      const uint64_t cap = FigureAt(w.output, "capacity", 1e9);
      EXPECT_GT(cap, 0u);
      EXPECT_LT(cap, limit) << c.name << ": the cache never planned past the limit";
      RecordProperty(absl::StrCat(c.name, "_capacity_bytes"), static_cast<int>(cap));
      if (peak.ok()) RecordProperty(absl::StrCat(c.name, "_cgroup_peak"), static_cast<int>(*peak));
    } else {
      EXPECT_TRUE(WIFSIGNALED(w.status) && WTERMSIG(w.status) == SIGKILL)
          << c.name << ": status " << w.status << "\n"
          << w.output;
      EXPECT_GE(*kills, 1u) << c.name;
    }
  }
}

TEST_F(LazyCgroup, TwoJobsInOneCgroupConvergeToComparableShares) {
  UMAP_SKIP_WITHOUT("memory-cgroup");
  // 160 MiB for two jobs each re-reading 128 MiB: neither can have all it wants. The second
  // starts 2 s after the first has filled the room.
  const uint64_t limit = 160 << 20;
  const std::string a = MakeFile(dir_, "a", 160 << 20);
  const std::string b = MakeFile(dir_, "b", 160 << 20);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  auto cg = Cgroup("two", limit);
  ASSERT_TRUE(cg.ok()) << cg.status();
  Worker wa = Start(*cg, {a, std::to_string(128 << 20), "12", "noscan"});
  std::this_thread::sleep_for(std::chrono::seconds(2));
  Worker wb = Start(*cg, {b, std::to_string(128 << 20), "10", "noscan"});
  Finish(&wa);
  Finish(&wb);
  ASSERT_TRUE(WIFEXITED(wa.status) && WEXITSTATUS(wa.status) == 0) << wa.output;
  ASSERT_TRUE(WIFEXITED(wb.status) && WEXITSTATUS(wb.status) == 0) << wb.output;
  auto kills = cg->OomKills();
  ASSERT_TRUE(kills.ok());
  EXPECT_EQ(*kills, 0u);
  // At the end (a at 12 s, b at 10 s of its own clock: the same moment).
  const uint64_t ca = FigureAt(wa.output, "capacity", 11.9);
  const uint64_t cache_block = FigureAt(wb.output, "capacity", 9.9);
  ASSERT_GT(ca + cache_block, 0u);
  const double share_b = static_cast<double>(cache_block) / static_cast<double>(ca + cache_block);
  EXPECT_GE(share_b, 0.3) << "the late job is not starved: " << ca << " vs " << cache_block << "\n"
                          << wa.output << "\n"
                          << wb.output;
  EXPECT_LE(share_b, 0.7) << ca << " vs " << cache_block;
  EXPECT_LE(ca + cache_block, limit);
  RecordProperty("capacity_a", static_cast<int>(ca));
  RecordProperty("capacity_b", static_cast<int>(cache_block));
}

}  // namespace
}  // namespace umap::runtime
