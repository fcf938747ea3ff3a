#include "runtime/stats/stats_segment.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "tools/umap_stat_reader.h"

namespace umap::runtime {
namespace {

// A pid that belonged to a process that has exited and been reaped.
pid_t DeadPid() {
  const pid_t p = ::fork();
  if (p == 0) _exit(0);
  ::waitpid(p, nullptr, 0);
  return p;
}

TEST(StatsSegmentTest, CreatesAnOwnerOnlySegmentNamedForThisProcess) {
  testing::TempDir dir;
  ::umask(022);
  auto seg = StatsSegment::Create(dir.path());
  ASSERT_TRUE(seg.ok()) << seg.status();
  const std::string expected = dir.path() + "/" + StatsSegment::NamePrefix(::getpid()) + "0";
  EXPECT_EQ((*seg)->path(), expected);
  struct stat st;
  ASSERT_EQ(::stat(expected.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, ::getuid());
  EXPECT_EQ(static_cast<size_t>(st.st_size), sizeof(StatsLayout));
  // A second runtime of the same process takes the next name.
  auto second = StatsSegment::Create(dir.path());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)->path(), dir.path() + "/" + StatsSegment::NamePrefix(::getpid()) + "1");
  seg->reset();
  EXPECT_FALSE(std::filesystem::exists(expected)) << "removed at destruction";
}

TEST(StatsSegmentTest, PublishedFieldsReadBackThroughTheReader) {
  testing::TempDir dir;
  auto seg = StatsSegment::Create(dir.path());
  ASSERT_TRUE(seg.ok());
  StatsLayout* l = (*seg)->Begin();
  EXPECT_EQ(l->seq % 2, 1u);  // odd while writing
  l->cache_bytes_used = 12345;
  StatsSegment::CopyField(l->mappings[0].path, kStatsPathBytes, "/mnt/gv0/m.bin");
  l->mappings_listed = 1;
  (*seg)->End();
  auto snap = tools::ReadSegment((*seg)->path(), ::getpid());
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->layout->cache_bytes_used, 12345u);
  EXPECT_STREQ(snap->layout->mappings[0].path, "/mnt/gv0/m.bin");
  EXPECT_EQ(snap->layout->seq % 2, 0u);
  EXPECT_EQ(snap->layout->pid, ::getpid());
  EXPECT_EQ(snap->layout->state, kStatsRunning);
}

TEST(StatsSegmentTest, LongPathsKeepTheirTail) {
  char field[16];
  StatsSegment::CopyField(field, sizeof(field), "/a/very/long/path/name.bin");
  EXPECT_STREQ(field, "...ath/name.bin");  // 15 characters and the NUL
  EXPECT_EQ(std::strlen(field), 15u);
  EXPECT_EQ(std::strncmp(field, "...", 3), 0);
  StatsSegment::CopyField(field, sizeof(field), "short");
  EXPECT_STREQ(field, "short");
}

TEST(StatsSegmentTest, SegmentsOfProcessesThatAreGoneAreRemovedAtCreation) {
  testing::TempDir dir;
  const std::string stale = dir.path() + "/" + StatsSegment::NamePrefix(DeadPid()) + "0";
  { std::ofstream(stale) << std::string(sizeof(StatsLayout), '\0'); }
  const std::string not_ours = dir.path() + "/other-file";
  { std::ofstream(not_ours) << "x"; }
  auto seg = StatsSegment::Create(dir.path());
  ASSERT_TRUE(seg.ok());
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(not_ours));
}

TEST(StatsSegmentTest, ReaderRefusesSegmentsItCannotTrust) {
  testing::TempDir dir;
  auto seg = StatsSegment::Create(dir.path());
  ASSERT_TRUE(seg.ok());
  // Wrong mode: anybody could have written it.
  ASSERT_EQ(::chmod((*seg)->path().c_str(), 0644), 0);
  auto r = tools::ReadSegment((*seg)->path(), ::getpid());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("not a 0600 regular file"), std::string::npos);
  ASSERT_EQ(::chmod((*seg)->path().c_str(), 0600), 0);
  // The pid it names is not the one asked for.
  r = tools::ReadSegment((*seg)->path(), ::getppid());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  // Left by an earlier process with this pid: a different start time.
  StatsLayout* l = (*seg)->Begin();
  l->process_start_ticks += 1;
  (*seg)->End();
  r = tools::ReadSegment((*seg)->path(), ::getpid());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("stale"), std::string::npos) << r.status();
  // Another version of the layout.
  l = (*seg)->Begin();
  l->process_start_ticks -= 1;
  l->version = kStatsVersion + 1;
  (*seg)->End();
  r = tools::ReadSegment((*seg)->path(), ::getpid());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("a different Umap version"), std::string::npos);
}

TEST(StatsSegmentTest, ReadProcessSaysWhyThereIsNothingToShow) {
  testing::TempDir dir;
  auto none = tools::ReadProcess(::getpid(), dir.path());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("has no Umap stats segment"), std::string::npos);
  auto gone = tools::ReadProcess(DeadPid(), dir.path());
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("no process"), std::string::npos);
  auto a = StatsSegment::Create(dir.path());
  auto b = StatsSegment::Create(dir.path());
  ASSERT_TRUE(a.ok() && b.ok());
  auto both = tools::ReadProcess(::getpid(), dir.path());
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->size(), 2u);
  EXPECT_EQ((*both)[0].layout->runtime_index, 0u);
  EXPECT_EQ((*both)[1].layout->runtime_index, 1u);
  EXPECT_EQ(tools::ListProcesses(dir.path()), std::vector<pid_t>{::getpid()});
}

}  // namespace
}  // namespace umap::runtime
