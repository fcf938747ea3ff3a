// What a user sees when a setting is wrong: a real process configured by the environment
// (env_config_worker, the release library) fails, and its log at the default level names the
// variable or the path and what to do; and sizes that would take more memory than the
// process may use are refused before anything large is allocated (its peak RSS stays small).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/recovery/subprocess.h"
#include "tests/runtime/test_file.h"

namespace umaptest {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Outcome {
  recoverytest::ProcResult proc;
  long max_rss_kib = 0;
};

class ConfigErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.File("data");
    std::ofstream(file_, std::ios::binary) << std::string(1 << 20, 'd');
  }
  // The worker with `env` added (and UMAP_LOG_LEVEL unset: the default level).
  Outcome Run(std::vector<std::string> env) {
    ::unsetenv("UMAP_LOG_LEVEL");
    const std::string out = dir_.File("out"), err = dir_.File("err");
    const pid_t pid = recoverytest::Spawn({ENV_CONFIG_WORKER, file_}, env, out, err);
    Outcome o;
    int st = 0;
    struct rusage ru = {};
    EXPECT_EQ(::wait4(pid, &st, 0, &ru), pid);
    if (WIFEXITED(st)) o.proc.exit_code = WEXITSTATUS(st);
    if (WIFSIGNALED(st)) o.proc.signal = WTERMSIG(st);
    o.proc.out = recoverytest::Slurp(out);
    o.proc.err = recoverytest::Slurp(err);
    o.max_rss_kib = ru.ru_maxrss;
    return o;
  }
  TempDir dir_;
  std::string file_;
};

TEST_F(ConfigErrorTest, AHugeBlockSizeFailsFastNamingTheVariable) {
  Outcome o = Run({"UMAP_BLOCK_SIZE=1G"});
  EXPECT_EQ(o.proc.exit_code, 1) << o.proc.err;
  EXPECT_THAT(o.proc.out, HasSubstr("failed umap_runtime_create errno " + std::to_string(EINVAL)));
  EXPECT_THAT(o.proc.err, HasSubstr("UMAP_BLOCK_SIZE"));
  EXPECT_THAT(o.proc.err, HasSubstr("use at most 64M"));
  EXPECT_LT(o.max_rss_kib, 64 << 10) << "allocated before refusing";
}

TEST_F(ConfigErrorTest, ABlockSizeAboveTheLargestIoFailsBeforeAllocating) {
  Outcome o = Run({"UMAP_BLOCK_SIZE=32M"});
  EXPECT_EQ(o.proc.exit_code, 1) << o.proc.err;
  EXPECT_THAT(o.proc.out, HasSubstr("failed umap_runtime_create errno " + std::to_string(EINVAL)));
  EXPECT_THAT(o.proc.err, HasSubstr("UMAP_IO_MAX_BYTES"));
  EXPECT_THAT(o.proc.err, HasSubstr("UMAP_BLOCK_SIZE"));
  EXPECT_LT(o.max_rss_kib, 64 << 10) << "allocated before refusing";
}

TEST_F(ConfigErrorTest, FixedBuffersBeyondTheMemoryLimitAreRefusedBeforeAllocating) {
  // 64 MiB blocks and I/Os: 4 shadows (256 MiB) and up to 4 x 256 I/O buffers of 64 MiB.
  Outcome o = Run({"UMAP_BLOCK_SIZE=64M", "UMAP_IO_MAX_BYTES=64M", "UMAP_IO_DEPTH=256"});
  EXPECT_EQ(o.proc.exit_code, 1) << o.proc.err;
  EXPECT_THAT(o.proc.out, HasSubstr("failed umap_runtime_create errno " + std::to_string(ENOMEM)));
  EXPECT_THAT(o.proc.err, HasSubstr("nothing was allocated"));
  EXPECT_THAT(o.proc.err, HasSubstr("UMAP_IO_DEPTH"));
  EXPECT_LT(o.max_rss_kib, 64 << 10) << "allocated before refusing";
}

TEST_F(ConfigErrorTest, AJournalDirThatIsAFileIsLoggedWithWhatToDo) {
  const std::string not_dir = dir_.File("plain-file");
  std::ofstream(not_dir) << "x";
  Outcome o = Run({"UMAP_JOURNAL_DIR=" + not_dir});
  EXPECT_THAT(o.proc.out, HasSubstr("failed umap_ex errno " + std::to_string(ENOTDIR)));
  EXPECT_THAT(o.proc.err, HasSubstr("journal directory " + not_dir +
                                    " (journal_dir, UMAP_JOURNAL_DIR) cannot be used"));
  EXPECT_THAT(o.proc.err, HasSubstr("is not a directory: point the journal at a directory"));
}

TEST_F(ConfigErrorTest, AMissingDeepJournalPathIsLoggedWithWhatToDo) {
  const std::string deep = dir_.File("no/such/parents/journal");
  Outcome o = Run({"UMAP_JOURNAL_DIR=" + deep});
  EXPECT_THAT(o.proc.out, HasSubstr("failed umap_ex errno " + std::to_string(ENOENT)));
  EXPECT_THAT(o.proc.err, HasSubstr("journal directory " + deep +
                                    " (journal_dir, UMAP_JOURNAL_DIR) cannot be used"));
  EXPECT_THAT(o.proc.err, HasSubstr("its parents are not): create them"));
  EXPECT_FALSE(std::filesystem::exists(dir_.File("no")));
}

TEST_F(ConfigErrorTest, AGoodConfigurationLogsNoError) {
  Outcome o = Run({"UMAP_JOURNAL_DIR=" + dir_.File("journal")});
  EXPECT_EQ(o.proc.exit_code, 0) << o.proc.out << o.proc.err;
  EXPECT_THAT(o.proc.err, Not(HasSubstr("ERROR")));
}

}  // namespace
}  // namespace umaptest
