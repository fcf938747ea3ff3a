// umap-stat on real processes: plain_mmap (a program that knows nothing about Umap) run
// with libumap_preload.so, or without it; exit codes and output as docs/operations.md says.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/child_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/tools/json_check.h"

namespace {

using preloadtest::ChildProcess;
using preloadtest::Exit;

struct Output {
  int code = -1;
  std::string out, err;
};

class UmapStatCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.File("m.bin");
    ChildProcess w({PLAIN_MMAP, "write", file_, "1048576", "3"}, {}, dir_.File("w.err"));
    w.CloseStdin();
    ASSERT_EQ(w.Wait().code, 0);
  }

  // plain_mmap hold on the file, with or without the shim; returns once it is mapped.
  std::unique_ptr<ChildProcess> Hold(bool preload) {
    std::vector<std::string> env;
    if (preload) env = {std::string("LD_PRELOAD=") + UMAP_PRELOAD_LIB, "UMAP_PATHS=" + dir_.path()};
    auto p = std::make_unique<ChildProcess>(
        std::vector<std::string>{PLAIN_MMAP, "hold", file_, "1048576"}, env, dir_.File("hold.err"));
    EXPECT_EQ(p->ReadLine().rfind("ready", 0), 0u);
    return p;
  }

  Output Stat(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {UMAP_STAT};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess p(argv, {}, dir_.File("stat.err"));
    p.CloseStdin();
    Output o;
    for (std::string line; !(line = p.ReadLine()).empty();) o.out += line + "\n";
    Exit x = p.Wait();
    o.code = x.code;
    o.err = x.err;
    return o;
  }

  // Runs umap-stat until its stdout contains `want` (the publisher lists a new mapping a
  // moment after the mapping exists), at most 3 s; returns the last run.
  Output StatUntil(const std::vector<std::string>& args, const std::string& want) {
    Output o;
    for (int i = 0; i < 30; ++i) {
      o = Stat(args);
      if (o.out.find(want) != std::string::npos) break;
      usleep(100 * 1000);
    }
    return o;
  }

  umaptest::TempDir dir_;
  std::string file_;
};

TEST_F(UmapStatCliTest, ShowsTheMappingsOfAProcessUnderThePreload) {
  auto hold = Hold(true);
  const std::string pid = std::to_string(hold->pid());
  Output t = StatUntil({pid}, file_);
  EXPECT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("umap-stat: process " + pid + ", 1 runtime"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find(" fault mode, userfaultfd via "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("mappings   1\n    " + file_ + " ro 1.0 MiB at 0: faults"),
            std::string::npos)
      << t.out;
  Output j = Stat({"--json", pid});
  EXPECT_EQ(j.code, 0) << j.err;
  EXPECT_TRUE(jsoncheck::IsValidJson(j.out)) << j.out;
  EXPECT_NE(j.out.find("\"file\":\"" + file_ + "\",\"writable\":false,\"length\":1048576"),
            std::string::npos)
      << j.out;
  EXPECT_NE(j.out.find("\"stalled\":false}\n"), std::string::npos);
  Output all = Stat({"--all"});
  EXPECT_NE(all.out.find("umap-stat: process " + pid + ","), std::string::npos) << all.out;
}

TEST_F(UmapStatCliTest, AProcessWithoutUmapHasNothingToShow) {
  auto hold = Hold(false);
  Output o = Stat({std::to_string(hold->pid())});
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.err.find("has no Umap stats segment"), std::string::npos) << o.err;
  EXPECT_EQ(o.out, "");
}

TEST_F(UmapStatCliTest, AProcessThatIsGoneIsAnError) {
  const pid_t p = ::fork();
  if (p == 0) _exit(0);
  ::waitpid(p, nullptr, 0);
  Output o = Stat({std::to_string(p)});
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.err.find("no process " + std::to_string(p)), std::string::npos) << o.err;
}

TEST_F(UmapStatCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Stat({}).code, 2);
  EXPECT_EQ(Stat({"--no-such-option"}).code, 2);
  EXPECT_EQ(Stat({"--interval", "0", "--watch", "1"}).code, 2);
}

TEST_F(UmapStatCliTest, WatchRepeatsUntilTheProcessEnds) {
  auto hold = Hold(true);
  ChildProcess watch({UMAP_STAT, "--watch", "--interval", "0.1", std::to_string(hold->pid())}, {},
                     dir_.File("watch.err"));
  watch.CloseStdin();
  int headers = 0;
  while (headers < 3) {
    const std::string line = watch.ReadLine(std::chrono::seconds(10));
    ASSERT_FALSE(line.empty() && headers == 0) << "no output from --watch";
    if (line.rfind("umap-stat: process", 0) == 0) ++headers;
  }
  hold->CloseStdin();
  EXPECT_EQ(hold->Wait().code, 0);
  const auto start = std::chrono::steady_clock::now();
  while (!watch.ReadLine(std::chrono::seconds(10)).empty()) {
  }
  Exit x = watch.Wait();
  EXPECT_EQ(x.code, 1) << "the process is gone: nothing more to show; " << x.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(UmapStatCliTest, PrometheusTextfileIsWrittenForNodeExporter) {
  auto hold = Hold(true);
  const std::string prom = dir_.File("umap.prom");
  StatUntil({std::to_string(hold->pid())}, file_);  // listed now
  Output o = Stat({"--prometheus", prom, std::to_string(hold->pid())});
  EXPECT_EQ(o.code, 0) << o.err;
  std::ifstream f(prom);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string t = ss.str();
  EXPECT_NE(t.find("# TYPE umap_mapping_faults_total counter\n"), std::string::npos) << t;
  EXPECT_NE(t.find("umap_mapping_faults_total{pid=\"" + std::to_string(hold->pid()) +
                   "\",runtime=\"0\",file=\"" + file_ + "\"} "),
            std::string::npos)
      << t;
  EXPECT_FALSE(std::filesystem::exists(prom + ".tmp." + std::to_string(hold->pid())));
}

}  // namespace
