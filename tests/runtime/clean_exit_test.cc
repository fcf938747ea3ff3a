// What a clean exit leaves behind: nothing of an automatic journal (whether the program
// destroys its runtime or just returns from main after its last uunmap), and an explicit
// journal with nothing pending compacted to its minimum. Real processes (env_config_worker,
// the release library).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/recovery/subprocess.h"
#include "tests/runtime/test_file.h"

namespace umaptest {
namespace {

// Bytes allocated on disk below `dir`.
uint64_t DiskUse(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st;
    if (::lstat(e.path().c_str(), &st) == 0) bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return bytes;
}

// The automatic journal directories of process `pid` (/var/tmp/umap-journal-UID/PID-N, or
// below a fallback /var/tmp/umap-journal-UID.XXXXXX).
std::vector<std::string> AutomaticJournalsOf(pid_t pid) {
  std::vector<std::string> out;
  const std::string root = "umap-journal-" + std::to_string(::geteuid());
  std::error_code ec;
  for (const auto& top : std::filesystem::directory_iterator("/var/tmp", ec)) {
    const std::string name = top.path().filename().string();
    if (name.rfind(root, 0) != 0 || !top.is_directory(ec)) continue;
    for (const auto& e : std::filesystem::directory_iterator(top.path(), ec)) {
      if (e.path().filename().string().rfind(std::to_string(pid) + "-", 0) == 0) {
        out.push_back(e.path().string());
      }
    }
  }
  return out;
}

class CleanExitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.File("data");
    std::ofstream(file_, std::ios::binary) << std::string(32 << 20, 'd');
  }
  pid_t Run(std::vector<std::string> args, std::vector<std::string> env) {
    args.insert(args.begin(), {ENV_CONFIG_WORKER, file_});
    const std::string out = dir_.File("out"), err = dir_.File("err");
    const pid_t pid = recoverytest::Spawn(args, env, out, err);
    recoverytest::ProcResult r = recoverytest::Wait(pid, out, err);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.out, "ok\n");
    return pid;
  }
  TempDir dir_;
  std::string file_;
};

TEST_F(CleanExitTest, AnAutomaticJournalIsRemovedWhenTheProgramEndsCleanly) {
  const pid_t destroyed = Run({"2"}, {"UMAP_JOURNAL_DIR="});
  EXPECT_TRUE(AutomaticJournalsOf(destroyed).empty()) << AutomaticJournalsOf(destroyed)[0];
  // Returning from main after the last uunmap, the runtime never destroyed.
  const pid_t returned = Run({"2", "exit"}, {"UMAP_JOURNAL_DIR="});
  EXPECT_TRUE(AutomaticJournalsOf(returned).empty()) << AutomaticJournalsOf(returned)[0];
}

TEST_F(CleanExitTest, AnExplicitJournalWithNothingPendingShrinksToItsMinimum) {
  const std::string journal = dir_.File("journal");
  Run({"8"}, {"UMAP_JOURNAL_DIR=" + journal});  // 256 MiB through the journal
  EXPECT_LT(DiskUse(journal), uint64_t{1} << 20);
  Run({"8", "exit"}, {"UMAP_JOURNAL_DIR=" + journal});
  EXPECT_LT(DiskUse(journal), uint64_t{1} << 20);
  EXPECT_TRUE(std::filesystem::exists(journal + "/CURRENT")) << "an explicit journal stays";
}

}  // namespace
}  // namespace umaptest
