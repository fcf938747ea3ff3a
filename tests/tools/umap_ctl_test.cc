// umap_quiesce()/umap_resume() over every runtime of a process, and umap-ctl driving them
// through the checkpoint control socket (UMAP_CHECKPOINT=1): state, quiesce, resume, a
// refused user, a Umap process without the socket, a command the socket does not know.
// The same with real criu: tests/criu/criu_test.sh.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/preload/umap_c_api.h"
#include "tests/runtime/test_file.h"
#include "tests/testing/capability.h"
#include "umap/umap_types.h"

// The C API as C++ inside namespace umap sees it (include/umap/umap.h cannot be included
// where namespace umap exists, and the skip judge, tests/testing/capability.h, is in
// umap::testing).
using ::umap::c_api::umap_config_init;
using ::umap::c_api::umap_ex;
using ::umap::c_api::umap_quiesce;
using ::umap::c_api::umap_resume;
using ::umap::c_api::umap_runtime_create;
using ::umap::c_api::umap_runtime_destroy;
using ::umap::c_api::umsync;

namespace umaptest {
namespace {

constexpr size_t kBlock = 4096;
constexpr size_t kSize = 64 * kBlock;

struct Ran {
  int exit_code = -1;
  std::string output;
};

// Runs a shell command line, output and errors together.
Ran Shell(const std::string& cmd) {
  Ran r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) r.output += buf;
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string UmapCtl(const std::string& args) {
  return std::string(UMAP_CTL_BIN) + " " + args + " " + std::to_string(::getpid());
}

// One request on the control socket of this process, as umap-ctl sends it; the answer.
std::string Ask(const std::string& line) {
  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  const std::string name = "umap-checkpoint." + std::to_string(::getpid());
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  if (::connect(s, reinterpret_cast<sockaddr*>(&a),
                static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())) != 0) {
    ::close(s);
    return std::string("connect: ") + std::strerror(errno);
  }
  std::string reply;
  if (::send(s, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size())) {
    char buf[256];
    ssize_t n;
    while ((n = ::read(s, buf, sizeof(buf))) > 0) reply.append(buf, static_cast<size_t>(n));
  }
  ::close(s);
  return reply;
}

int UffdsHeld() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (struct dirent* e = d ? ::readdir(d) : nullptr) {
    char target[128] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (::readlink(link.c_str(), target, sizeof(target) - 1) > 0 &&
        std::strstr(target, "userfaultfd") != nullptr) {
      ++n;
    }
  }
  if (d != nullptr) ::closedir(d);
  return n;
}

class CheckpointApiTest : public ::testing::Test {
 protected:
  umap_runtime* Runtime(umap_policy policy, int control) {
    umap_config c;
    EXPECT_EQ(umap_config_init(&c), 0);
    c.cache_bytes = 32 * kBlock;
    c.block_size = kBlock;
    c.policy = policy;
    c.checkpoint_control = control;
    journals_.push_back(dir_.File("journal" + std::to_string(journals_.size())));
    c.journal_dir = journals_.back().c_str();
    umap_runtime* rt = umap_runtime_create(&c);
    EXPECT_NE(rt, nullptr) << std::strerror(errno);
    rts_.push_back(rt);
    return rt;
  }
  char* Map(umap_runtime* rt, const std::string& name) {
    const int fd = MakePatternFile(dir_.File(name), kSize);
    EXPECT_GE(fd, 0);
    fds_.push_back(fd);
    void* p = umap_ex(rt, nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED) << std::strerror(errno);
    return static_cast<char*>(p);
  }
  void TearDown() override {
    for (umap_runtime* rt : rts_) EXPECT_EQ(umap_runtime_destroy(rt), 0);
    for (int fd : fds_) ::close(fd);
  }

  TempDir dir_;
  std::vector<std::string> journals_;
  std::vector<umap_runtime*> rts_;
  std::vector<int> fds_;
};

TEST_F(CheckpointApiTest, QuiesceAndResumeCoverEveryRuntime) {
  char* a = Map(Runtime(UMAP_POLICY_RELAXED, 0), "a");
  char* b = Map(Runtime(UMAP_POLICY_ATOMIC, 0), "b");
  std::memset(a, 'a', kSize);
  std::memset(b, 'b', kSize);
  ASSERT_GE(UffdsHeld(), 2);
  ASSERT_EQ(umap_quiesce(), 0) << std::strerror(errno);
  EXPECT_EQ(UffdsHeld(), 0);
  EXPECT_EQ(ReadAll(dir_.File("a")), std::vector<char>(kSize, 'a')) << "relaxed: written back";
  EXPECT_EQ(ReadAll(dir_.File("b")), Pattern(kSize)) << "atomic: nothing unsynced in the file";
  ASSERT_EQ(umap_quiesce(), 0) << "quiescing a quiesced process is no error";
  ASSERT_EQ(umap_resume(), 0) << std::strerror(errno);
  EXPECT_GE(UffdsHeld(), 2);
  EXPECT_EQ(a[kSize - 1], 'a');
  EXPECT_EQ(b[kSize - 1], 'b') << "the staged blocks are read back";
  ASSERT_EQ(umsync(b, kSize, MS_SYNC), 0);
  EXPECT_EQ(ReadAll(dir_.File("b")), std::vector<char>(kSize, 'b'));
  ASSERT_EQ(umap_resume(), 0) << "resuming a running process is no error";
}

TEST_F(CheckpointApiTest, CreatingARuntimeWaitsForTheResume) {
  Map(Runtime(UMAP_POLICY_ATOMIC, 0), "a");
  ASSERT_EQ(umap_quiesce(), 0);
  std::atomic<bool> created{false};
  umap_runtime* late = nullptr;
  std::thread t([&] {
    umap_config c;
    umap_config_init(&c);
    c.cache_bytes = 32 * kBlock;
    late = umap_runtime_create(&c);
    created = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(created.load()) << "a new userfaultfd would make the process undumpable";
  ASSERT_EQ(umap_resume(), 0);
  t.join();
  ASSERT_NE(late, nullptr);
  EXPECT_EQ(umap_runtime_destroy(late), 0);
}

TEST_F(CheckpointApiTest, UmapCtlQuiescesAndResumesThroughTheControlSocket) {
  char* p = Map(Runtime(UMAP_POLICY_RELAXED, /*control=*/1), "a");
  std::memset(p, 'q', kSize);
  Ran r = Shell(UmapCtl("state"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("running"), std::string::npos) << r.output;
  r = Shell(UmapCtl("quiesce"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("quiesced"), std::string::npos) << r.output;
  EXPECT_EQ(UffdsHeld(), 0);
  EXPECT_EQ(ReadAll(dir_.File("a")), std::vector<char>(kSize, 'q'));
  r = Shell(UmapCtl("resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("running"), std::string::npos) << r.output;
  EXPECT_EQ(p[7], 'q');
}

TEST_F(CheckpointApiTest, AnotherUserMayNotControlTheProcess) {
  UMAP_SKIP_WITHOUT("root");  // to be another user
  Map(Runtime(UMAP_POLICY_ATOMIC, /*control=*/1), "a");
  Ran r = Shell("setpriv --reuid nobody --regid nogroup --clear-groups " + UmapCtl("quiesce"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("may not control"), std::string::npos) << r.output;
  EXPECT_GE(UffdsHeld(), 1) << "still running";
}

TEST_F(CheckpointApiTest, AnUnknownCommandIsRefused) {
  Map(Runtime(UMAP_POLICY_ATOMIC, /*control=*/1), "a");
  EXPECT_EQ(Ask("state\n"), "ok running\n");
  EXPECT_EQ(Ask("dance\n"), "error EINVAL unknown command 'dance' (quiesce, resume or state)\n");
}

TEST_F(CheckpointApiTest, AUmapProcessWithoutTheSocketIsNamed) {
  // Another Umap program, started without UMAP_CHECKPOINT=1: CRIU could not dump it.
  const std::string work = dir_.path();
  Ran r = Shell(std::string(CRIU_WRITER_BIN) + " init " + work + "/w 16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Shell("cd " + work + " && UMAP_JOURNAL_DIR=" + work + "/wj " + CRIU_WRITER_BIN + " run " +
            work + "/w " + work + "/progress 16 >/dev/null 2>&1 & echo $!");
  const pid_t writer = static_cast<pid_t>(std::stol(r.output));
  for (int i = 0; i < 400 && ReadAll(work + "/progress").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  r = Shell(std::string(UMAP_CTL_BIN) + " quiesce " + std::to_string(writer));
  ::kill(writer, SIGKILL);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("UMAP_CHECKPOINT=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("userfaultfd"), std::string::npos) << r.output;
  // In a tree, a process that is not Umap's at all is passed over.
  r = Shell(std::string(UMAP_CTL_BIN) + " state --tree $$");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace umaptest
