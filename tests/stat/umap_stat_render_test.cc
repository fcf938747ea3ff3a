#include "tools/umap_stat_render.h"

#include <cstring>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "runtime/stats/stats_segment.h"
#include "tests/tools/json_check.h"

namespace umap::tools {
namespace {

using runtime::StatsLayout;
using runtime::StatsSegment;

// A snapshot read `since_ms` after it was published, with one mapping and a read of
// /mnt/gv0/m.bin in flight for `read_age_ms` at publication.
StatsSnapshot Snapshot(uint64_t read_age_ms, uint64_t since_ms = 100) {
  StatsSnapshot s;
  s.path = "/dev/shm/umap-stat.42.0";
  s.layout = std::make_unique<StatsLayout>();
  StatsLayout& l = *s.layout;
  std::memset(&l, 0, sizeof(l));
  l.pid = 42;
  l.period_ms = 250;
  l.state = runtime::kStatsRunning;
  StatsSegment::CopyField(l.fault_mode, sizeof(l.fault_mode), "signal");
  StatsSegment::CopyField(l.uffd_access, sizeof(l.uffd_access), "user-mode-only");
  StatsSegment::CopyField(l.io_engine, sizeof(l.io_engine), "uring");
  StatsSegment::CopyField(l.policy, sizeof(l.policy), "atomic");
  StatsSegment::CopyField(l.journal_mode, sizeof(l.journal_mode), "data");
  l.block_size = 4096;
  l.io_timeout_ms = 20000;
  l.io_retries = 3;
  l.cache_bytes_used = 3 << 20;
  l.cache_bytes_limit = 16 << 20;
  l.published_mono_us = 1'000'000'000;
  s.read_mono_us = l.published_mono_us + since_ms * 1000;
  l.reads_in_flight = 1;
  l.oldest_read.kind = runtime::kStatsIoRead;
  l.oldest_read.offset = 1048576;
  l.oldest_read.length = 524288;
  l.oldest_read.age_us = read_age_ms * 1000;
  StatsSegment::CopyField(l.oldest_read.path, runtime::kStatsPathBytes, "/mnt/gv0/m.bin");
  l.mappings_total = l.mappings_listed = 1;
  StatsSegment::CopyField(l.mappings[0].path, runtime::kStatsPathBytes, "/mnt/gv0/m.bin");
  l.mappings[0].faults = 10;
  l.mappings[0].misses = 7;
  l.mappings[0].hits = 3;
  return s;
}

ProcessStats Process(StatsSnapshot s) {
  ProcessStats p;
  p.pid = 42;
  p.runtimes.push_back(std::move(s));
  return p;
}

TEST(UmapStatRenderTest, ARequestOlderThanTheThresholdIsStalledNamingItsFile) {
  StatOptions o;  // 1 s
  std::string what;
  EXPECT_FALSE(Stalled(Snapshot(800), o, &what));  // 0.9 s with the 0.1 s since publication
  EXPECT_TRUE(Stalled(Snapshot(950), o, &what));   // 1.05 s
  EXPECT_EQ(what, "read of /mnt/gv0/m.bin offset 1048576 length 512.0 KiB in flight for 1.1 s");
  const std::string text = RenderText(Process(Snapshot(2900)), o);
  EXPECT_NE(text.find("runtime 0: signal fault mode, userfaultfd via user-mode-only, uring I/O"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("STALLED    read of /mnt/gv0/m.bin offset 1048576 length 512.0 KiB: in "
                      "flight for 3.0 s (attempt 1 of 4); deadline 20.0 s"),
            std::string::npos)
      << text;
}

TEST(UmapStatRenderTest, AReadByTheFaultingThreadSaysSo) {
  StatsSnapshot s = Snapshot(2000);
  s.layout->oldest_read.attempt = runtime::kStatsInlineRead;
  const ProcessStats p = Process(std::move(s));
  const std::string text = RenderText(p, StatOptions{});
  EXPECT_NE(text.find("STALLED    read of /mnt/gv0/m.bin offset 1048576 length 512.0 KiB: in "
                      "flight for 2.1 s (read by the faulting thread, which waits for the file "
                      "system)\n"),
            std::string::npos)
      << text;
  const std::string j = RenderJson(p, StatOptions{});
  EXPECT_NE(j.find("\"by_faulting_thread\":true,\"attempt\":0,\"stalled\":true"), std::string::npos)
      << j;
}

TEST(UmapStatRenderTest, TheThresholdIsNeverLaterThanHalfTheDeadline) {
  StatOptions o;
  o.stall_ms = 60'000;
  StatsSnapshot s = Snapshot(10'500);  // past half of the 20 s deadline
  std::string what;
  EXPECT_EQ(StallThresholdUs(s, o), 10'000'000u);
  EXPECT_TRUE(Stalled(s, o, &what));
}

TEST(UmapStatRenderTest, AFrozenSegmentSaysSo) {
  const std::string text = RenderText(Process(Snapshot(0, /*since_ms=*/5000)), StatOptions{});
  EXPECT_NE(text.find("NOT UPDATED for 5.0 s"), std::string::npos) << text;
}

TEST(UmapStatRenderTest, JsonIsValidAndCarriesTheVerdict) {
  const std::string j = RenderJson(Process(Snapshot(3000)), StatOptions{});
  EXPECT_TRUE(jsoncheck::IsValidJson(j)) << j;
  EXPECT_NE(j.find("\"oldest_read\":{\"file\":\"/mnt/gv0/m.bin\",\"offset\":1048576,"
                   "\"length\":524288,\"age_ms\":3100,\"by_faulting_thread\":false,\"attempt\":0,"
                   "\"stalled\":true}"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"oldest_write\":null"), std::string::npos);
  EXPECT_NE(j.find("\"hits\":3,\"misses\":7"), std::string::npos);
  EXPECT_EQ(j.substr(j.size() - 16), "\"stalled\":true}\n");
}

TEST(UmapStatRenderTest, PrometheusExpositionHasTypesLabelsAndEscapes) {
  StatsSnapshot s = Snapshot(3000);
  StatsSegment::CopyField(s.layout->mappings[0].path, runtime::kStatsPathBytes, "/a\"b\\c");
  std::vector<ProcessStats> ps;
  ps.push_back(Process(std::move(s)));
  const std::string t = RenderPrometheus(ps, StatOptions{});
  EXPECT_NE(t.find("# TYPE umap_faults_total counter\n"), std::string::npos);
  EXPECT_NE(t.find("umap_cache_bytes{pid=\"42\",runtime=\"0\"} 3145728\n"), std::string::npos) << t;
  EXPECT_NE(t.find("umap_stalled{pid=\"42\",runtime=\"0\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("umap_io_oldest_age_seconds{pid=\"42\",runtime=\"0\",kind=\"read\",file=\"/mnt/"
                   "gv0/m.bin\"} 3.1\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("umap_mapping_misses_total{pid=\"42\",runtime=\"0\",file=\"/a\\\"b\\\\c\"} 7\n"),
            std::string::npos)
      << t;
}

TEST(UmapStatRenderTest, CacheSizingIsShownInEveryFormat) {
  StatsSnapshot s = Snapshot(0);
  StatsLayout& l = *s.layout;
  l.lazy_sizing = 1;
  l.cache_bytes_capacity = 24 << 20;
  l.cache_bytes_ceiling = 200 << 20;
  l.cache_bytes_virtual = 12 << 20;
  l.cache_remisses = 77;
  l.cache_grows = 5;
  l.memory_pressure_events = 2;
  l.memory_limit_bytes = 256 << 20;
  l.memory_used_bytes = 100 << 20;
  l.board_runtimes = 2;
  StatsSegment::CopyField(l.memory_source, runtime::kStatsPathBytes, "cgroup v1 /sys/x");
  l.mappings[0].virtual_bytes = 8 << 20;
  l.mappings[0].max_bytes = 24 << 20;
  l.mappings[0].working_set_bytes = 9 << 20;
  l.mappings[0].remisses = 70;
  const ProcessStats p = Process(std::move(s));
  const std::string text = RenderText(p, StatOptions{});
  EXPECT_NE(text.find("sizing     capacity 24.0 MiB, ceiling 200.0 MiB; re-misses 77, grew 5 "
                      "times, shrunk by 0 blocks; pressure events 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("memory     100.0 MiB used of 256.0 MiB (cgroup v1 /sys/x); shared with 1 "
                      "other runtime\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cache share: virtual 8.0 MiB, max 24.0 MiB, working set 9.0 MiB, "
                      "re-misses 70"),
            std::string::npos)
      << text;
  const std::string j = RenderJson(p, StatOptions{});
  EXPECT_TRUE(jsoncheck::IsValidJson(j)) << j;
  EXPECT_NE(j.find("\"lazy_sizing\":true,\"capacity_bytes\":25165824,\"ceiling_bytes\":209715200"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"working_set_bytes\":9437184"), std::string::npos) << j;
  std::vector<ProcessStats> ps;
  ps.push_back(Process(Snapshot(0)));
  ps[0].runtimes[0].layout->cache_bytes_virtual = 4096;
  const std::string t = RenderPrometheus(ps, StatOptions{});
  EXPECT_NE(t.find("umap_cache_virtual_bytes{pid=\"42\",runtime=\"0\"} 4096\n"), std::string::npos)
      << t;
}

TEST(UmapStatRenderTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(16u << 20), "16.0 MiB");
}

}  // namespace
}  // namespace umap::tools
