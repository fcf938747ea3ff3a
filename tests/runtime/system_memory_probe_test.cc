// SystemMemoryProbe on fake /proc and /sys trees (cgroup v1, v2, none), and on this machine.
#include "runtime/sizing/system_memory_probe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/testing/temp_dir.h"

namespace umap::runtime {
namespace {

class FakeTree {
 public:
  void Put(const std::string& rel, const std::string& text) {
    const std::string p = dir_.path() + rel;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p) << text;
  }
  const std::string& root() const { return dir_.path(); }
  FakeTree() {
    Put("/proc/meminfo", "MemTotal:       4194304 kB\nMemFree:  100 kB\nMemAvailable:   3145728 kB\n");
    Put("/proc/self/statm", "10000 2560 100 10 0 500 0\n");
  }

 private:
  umaptest::TempDir dir_;
};

const uint64_t kPage = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));

TEST(SystemMemoryProbe, CgroupV1TakesTheHierarchicalLimit) {
  FakeTree t;
  t.Put("/proc/self/cgroup", "9:name=systemd:/\n4:memory:/batch/job7\n0::/\n");
  t.Put("/proc/self/mountinfo",
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  const std::string d = "/sys/fs/cgroup/memory/batch/job7";
  t.Put(d + "/memory.limit_in_bytes", "9223372036854771712\n");
  t.Put(d + "/memory.usage_in_bytes", "104857600\n");
  t.Put(d + "/memory.stat",
        "cache 5\nhierarchical_memory_limit 268435456\ntotal_inactive_file 1048576\n");
  auto p = SystemMemoryProbe::Create(t.root(), /*pressure=*/false);
  EXPECT_EQ(p->cgroup(), SystemMemoryProbe::Cgroup::kV1);
  EXPECT_EQ(p->cgroup_dir(), t.root() + d);
  auto s = p->Sample();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->cgroup_limited);
  EXPECT_EQ(s->limit, 256u << 20);
  EXPECT_EQ(s->used, (100u << 20) - (1u << 20));
  EXPECT_EQ(s->available, 3ull << 30);
  EXPECT_EQ(s->process_rss, 2560 * kPage);
  EXPECT_EQ(p->cgroup_id(), t.root() + d);
  EXPECT_EQ(p->pressure_fd(), -1);
  EXPECT_NE(p->Describe().find("cgroup v1"), std::string::npos) << p->Describe();
}

TEST(SystemMemoryProbe, CgroupV2TakesTheSmallestLimitUpToTheMount) {
  FakeTree t;
  t.Put("/proc/self/cgroup", "0::/user/job\n");
  t.Put("/proc/self/mountinfo", "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  t.Put("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
  t.Put("/sys/fs/cgroup/user/memory.max", "134217728\n");
  t.Put("/sys/fs/cgroup/user/memory.high", "max\n");
  t.Put("/sys/fs/cgroup/user/job/memory.max", "max\n");
  t.Put("/sys/fs/cgroup/user/job/memory.high", "201326592\n");
  t.Put("/sys/fs/cgroup/user/job/memory.current", "67108864\n");
  t.Put("/sys/fs/cgroup/user/job/memory.stat", "anon 1\ninactive_file 4194304\nactive_file 9\n");
  auto p = SystemMemoryProbe::Create(t.root(), false);
  EXPECT_EQ(p->cgroup(), SystemMemoryProbe::Cgroup::kV2);
  auto s = p->Sample();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->cgroup_limited);
  EXPECT_EQ(s->limit, 128u << 20);
  EXPECT_EQ(s->used, 60u << 20);
}

TEST(SystemMemoryProbe, NoLimitFallsBackToMemAvailable) {
  FakeTree t;
  t.Put("/proc/self/cgroup", "4:memory:/\n");
  t.Put("/proc/self/mountinfo",
        "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  t.Put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  t.Put("/sys/fs/cgroup/memory/memory.stat", "hierarchical_memory_limit 9223372036854771712\n");
  auto p = SystemMemoryProbe::Create(t.root(), false);
  auto s = p->Sample();
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->cgroup_limited);
  EXPECT_EQ(s->limit, 4ull << 30);
  EXPECT_EQ(s->used, 1ull << 30);
  EXPECT_EQ(p->cgroup_id(), "");
}

TEST(SystemMemoryProbe, MissingMeminfoIsAnError) {
  umaptest::TempDir empty;
  auto p = SystemMemoryProbe::Create(empty.path(), false);
  EXPECT_EQ(p->cgroup(), SystemMemoryProbe::Cgroup::kNone);
  auto s = p->Sample();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("MemTotal"), absl::string_view::npos);
}

TEST(SystemMemoryProbe, ThisMachine) {
  auto p = SystemMemoryProbe::Create();
  auto s = p->Sample();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GT(s->limit, 0u);
  EXPECT_GT(s->process_rss, 0u);
  EXPECT_LE(s->used, s->limit + (s->limit >> 3));
  EXPECT_FALSE(p->Describe().empty());
}

}  // namespace
}  // namespace umap::runtime
