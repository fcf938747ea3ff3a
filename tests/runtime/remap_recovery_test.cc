// Mapping a file again with the same journal directory replays the committed transactions an
// earlier, killed run left unapplied, before the new mapping reads anything: a worker is
// killed by the crash point right after its first umsync committed (before it applied), and
// a new runtime must then see round 1 through the mapping, and in the file after uunmap.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/runtime/kill_workload.h"
#include "tests/runtime/test_file.h"
#include "umap/umap.h"

namespace umaptest {
namespace {

TEST(RemapRecovery, CommittedButUnappliedUmsyncIsReplayedWhenTheFileIsMappedAgain) {
  const uint64_t kBlocks = 256;
  killtest::Workload w{7, kBlocks, 4096, 100};
  TempDir dir;
  const std::string file = dir.File("data"), journal = dir.File("journal");
  std::vector<char> initial(kBlocks * 4096), round1;
  for (uint64_t b = 0; b < kBlocks; ++b) w.Fill(0, b, initial.data() + b * 4096);
  round1 = initial;
  for (uint64_t b : w.RoundBlocks(1)) w.Fill(1, b, round1.data() + b * 4096);
  std::ofstream(file, std::ios::binary).write(initial.data(), static_cast<std::streamsize>(initial.size()));

  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setenv("UMAP_CRASH_AT", "journal.after_commit", 1);
    ::execl(UMAP_KILL_WORKER, UMAP_KILL_WORKER, file.c_str(), journal.c_str(),
            dir.File("oracle").c_str(), "atomic", "7", "256", "100", "1048576",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  ASSERT_EQ(ReadAll(file), initial) << "the crash point fires before the apply";

  umap_config c;
  ASSERT_EQ(umap_config_init(&c), 0);
  c.cache_bytes = 1 << 20;
  c.journal_dir = journal.c_str();
  umap_runtime* rt = umap_runtime_create(&c);
  ASSERT_NE(rt, nullptr);
  int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char* p = static_cast<char*>(umap_ex(rt, nullptr, kBlocks * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(p, MAP_FAILED) << std::strerror(errno);
  EXPECT_EQ(std::memcmp(p, round1.data(), round1.size()), 0)
      << "the mapping shows the committed round 1";
  ASSERT_EQ(uunmap(p, kBlocks * 4096), 0);
  ::close(fd);
  EXPECT_EQ(umap_runtime_destroy(rt), 0);
  EXPECT_EQ(ReadAll(file), round1);
}

// The journal of a killed run with one byte flipped in the middle of its WAL: the runtime
// refuses to map the file over it (EIO, the damage logged) and writes nothing, so that
// umap-recover can still see what was lost.
TEST(RemapRecovery, AFileIsNotMappedOverADamagedJournal) {
  const uint64_t kBlocks = 256;
  TempDir dir;
  const std::string file = dir.File("data"), journal = dir.File("journal");
  std::vector<char> initial(kBlocks * 4096, 'i');
  std::ofstream(file, std::ios::binary).write(initial.data(), static_cast<std::streamsize>(initial.size()));
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setenv("UMAP_CRASH_AT", "journal.after_commit:6", 1);
    ::execl(UMAP_KILL_WORKER, UMAP_KILL_WORKER, file.c_str(), journal.c_str(),
            dir.File("oracle").c_str(), "atomic", "7", "256", "100", "1048576",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  std::string wal;
  for (const auto& e : std::filesystem::directory_iterator(journal)) {
    if (e.path().extension() == ".log" && std::filesystem::file_size(e.path()) > 0) {
      wal = e.path().string();
    }
  }
  ASSERT_FALSE(wal.empty());
  std::vector<char> bytes = ReadAll(wal);
  bytes[bytes.size() / 3] ^= 0x01;
  std::ofstream(wal, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const std::vector<char> file_before = ReadAll(file);

  umap_config c;
  ASSERT_EQ(umap_config_init(&c), 0);
  c.cache_bytes = 1 << 20;
  c.journal_dir = journal.c_str();
  umap_runtime* rt = umap_runtime_create(&c);
  ASSERT_NE(rt, nullptr);
  int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  errno = 0;
  void* p = umap_ex(rt, nullptr, kBlocks * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  EXPECT_EQ(p, MAP_FAILED);
  EXPECT_EQ(errno, EIO);
  ::close(fd);
  EXPECT_EQ(umap_runtime_destroy(rt), 0);
  EXPECT_EQ(ReadAll(file), file_before);
  EXPECT_EQ(ReadAll(wal), bytes) << "the damaged WAL is left as found";
}

// A run's WAL cut short in the middle (a torn copy) behind umsyncs it acknowledged, in both
// policies and with deferred file sync: mapping the file over that journal fails with EIO
// (RocksDB alone would open the prefix and the map would succeed, replaying older images
// only, or nothing), and writes nothing.
TEST(RemapRecovery, AFileIsNotMappedOverAWalCutShortBehindAcknowledgedUmsyncs) {
  const uint64_t kBlocks = 256;
  for (const char* policy : {"atomic", "relaxed"}) {
    for (const char* defer : {"0", "1"}) {
      SCOPED_TRACE(std::string(policy) + " UMAP_DEFER_FILE_SYNC=" + defer);
      TempDir dir;
      const std::string file = dir.File("data"), journal = dir.File("journal");
      std::vector<char> initial(kBlocks * 4096, 'i');
      std::ofstream(file, std::ios::binary)
          .write(initial.data(), static_cast<std::streamsize>(initial.size()));
      pid_t child = ::fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        ::setenv("UMAP_CRASH_AT", "journal.after_commit:8", 1);
        ::setenv("UMAP_DEFER_FILE_SYNC", defer, 1);
        ::execl(UMAP_KILL_WORKER, UMAP_KILL_WORKER, file.c_str(), journal.c_str(),
                dir.File("oracle").c_str(), policy, "7", "256", "100", "1048576",
                static_cast<char*>(nullptr));
        ::_exit(127);
      }
      int status = 0;
      ASSERT_EQ(::waitpid(child, &status, 0), child);
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
      std::string wal;
      for (const auto& e : std::filesystem::directory_iterator(journal)) {
        if (e.path().extension() == ".log" && std::filesystem::file_size(e.path()) > 0) {
          wal = e.path().string();
        }
      }
      ASSERT_FALSE(wal.empty());
      // The records end where the zeros the WAL is written into begin.
      const std::vector<char> bytes = ReadAll(wal);
      size_t records_end = bytes.size();
      while (records_end > 0 && bytes[records_end - 1] == 0) --records_end;
      std::filesystem::resize_file(wal, records_end / 2);
      const std::vector<char> file_before = ReadAll(file), wal_before = ReadAll(wal);

      umap_config c;
      ASSERT_EQ(umap_config_init(&c), 0);
      c.cache_bytes = 1 << 20;
      c.journal_dir = journal.c_str();
      umap_runtime* rt = umap_runtime_create(&c);
      ASSERT_NE(rt, nullptr);
      int fd = ::open(file.c_str(), O_RDWR);
      ASSERT_GE(fd, 0);
      errno = 0;
      void* p = umap_ex(rt, nullptr, kBlocks * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      EXPECT_EQ(p, MAP_FAILED);
      EXPECT_EQ(errno, EIO);
      ::close(fd);
      EXPECT_EQ(umap_runtime_destroy(rt), 0);
      EXPECT_EQ(ReadAll(file), file_before);
      EXPECT_EQ(ReadAll(wal), wal_before) << "the cut WAL is left as found";
    }
  }
}

}  // namespace
}  // namespace umaptest
