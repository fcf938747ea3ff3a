#include "tools/checkpoint_client.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/posix_error.h"
#include "runtime/control/checkpoint_control.h"

namespace umap::tools {
namespace {

// How long the guardian gives a process to die after criu exits before it resumes it (criu
// kills a dumped tree with SIGKILL just before it exits).
constexpr int kDeathGraceMs = 1000;

int ErrnoByName(const std::string& name) {
  for (int e = 1; e < 200; ++e) {
    const char* n = ::strerrorname_np(e);
    if (n != nullptr && name == n) return e;
  }
  return EIO;
}

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// Whether the process behind `pidfd` exits within timeout_ms (-1: wait for ever).
bool Exits(int pidfd, int timeout_ms) {
  struct pollfd p = {pidfd, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

// Resumes, in a detached process, those of `pids` still alive once criu (the action
// script's parent) has exited: after a failed dump, or one with --leave-running, criu lets
// the tree run on, and nothing else would resume it. A process criu killed after a good
// dump has exited by then; a restored one is a new process (its pidfd differs).
void SpawnGuardian(const std::vector<pid_t>& pids, int timeout_s) {
  const int criu = PidfdOpen(::getppid());
  if (criu < 0) {
    std::fprintf(stderr,
                 "umap-ctl: cannot watch criu (pidfd_open: %s); if the dump fails, "
                 "run umap-ctl resume yourself\n",
                 std::strerror(errno));
    return;
  }
  std::vector<std::pair<pid_t, int>> targets;
  for (pid_t p : pids) targets.emplace_back(p, PidfdOpen(p));
  const pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "umap-ctl: fork of the guardian failed: %s\n", std::strerror(errno));
    return;
  }
  if (child == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    // Whoever runs criu may wait for the end of its output: hold none of it. A failed
    // resume is in the process's own log ("checkpoint control: 'resume' ...").
    const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd <= 2 && null >= 0; ++fd) ::dup2(null, fd);
    Exits(criu, -1);
    for (const auto& [pid, pidfd] : targets) {
      if (pidfd < 0 || Exits(pidfd, kDeathGraceMs)) continue;
      Request(pid, "resume", timeout_s).IgnoreError();  // logged by the process itself
    }
    ::_exit(0);
  }
  int status;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  ::close(criu);
  for (const auto& t : targets) {
    if (t.second >= 0) ::close(t.second);
  }
}

}  // namespace

absl::StatusOr<std::string> Request(pid_t pid, const std::string& command, int timeout_s) {
  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return PosixError(errno, "socket");
  sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  const std::string name = runtime::ControlSocketName(pid);
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  const socklen_t alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), alen) != 0) {
    const int err = errno;
    ::close(s);
    if (err == ECONNREFUSED) {
      return WithErrno(
          absl::NotFoundError(absl::StrCat("process ", pid, " serves no Umap control socket")),
          err);
    }
    return PosixError(err, absl::StrCat("connecting to process ", pid));
  }
  struct timeval tv = {timeout_s, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const std::string line = command + "\n";
  if (::send(s, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    const int err = errno;
    ::close(s);
    return PosixError(err, absl::StrCat("sending '", command, "' to process ", pid));
  }
  std::string reply;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(s, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno == EAGAIN ? ETIMEDOUT : errno;
      ::close(s);
      return PosixError(err, absl::StrCat("process ", pid, " did not answer '", command,
                                          "' within ", timeout_s, " s"));
    }
    if (n == 0) break;  // the server closes after its answer
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(s);
  absl::string_view r = absl::StripTrailingAsciiWhitespace(reply);
  if (absl::ConsumePrefix(&r, "ok ")) return std::string(r);
  if (absl::ConsumePrefix(&r, "error ")) {
    const size_t space = r.find(' ');
    const std::string errname(r.substr(0, space));
    const std::string msg(space == absl::string_view::npos ? "" : r.substr(space + 1));
    return PosixError(ErrnoByName(errname), absl::StrCat("process ", pid, ": ", msg));
  }
  return PosixError(EIO, absl::StrCat("process ", pid,
                                      " closed the connection without an "
                                      "answer (did it exit?)"));
}

std::vector<pid_t> ProcessTree(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  DIR* d = ::opendir("/proc");
  while (struct dirent* e = d ? ::readdir(d) : nullptr) {
    int pid;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat;
    std::getline(f, stat);
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    int ppid = 0;
    if (rest >> state >> ppid) children.emplace(ppid, pid);
  }
  if (d != nullptr) ::closedir(d);
  std::vector<pid_t> out = {root};
  for (size_t i = 0; i < out.size(); ++i) {
    auto [first, last] = children.equal_range(out[i]);
    for (auto it = first; it != last; ++it) out.push_back(it->second);
  }
  return out;
}

bool HoldsUndumpable(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* d = ::opendir(dir.c_str());
  bool found = false;
  while (struct dirent* e = d && !found ? ::readdir(d) : nullptr) {
    char target[128] = {};
    const std::string link = absl::StrCat(dir, "/", e->d_name);
    if (::readlink(link.c_str(), target, sizeof(target) - 1) <= 0) continue;
    found = std::strstr(target, "[userfaultfd]") != nullptr ||
            std::strstr(target, "[io_uring]") != nullptr;
  }
  if (d != nullptr) ::closedir(d);
  return found;
}

ControlResult Control(const std::vector<pid_t>& pids, const std::string& command, bool tree,
                      int timeout_s) {
  ControlResult r;
  std::vector<pid_t> all;
  for (pid_t p : pids) {
    for (pid_t q : tree ? ProcessTree(p) : std::vector<pid_t>{p}) all.push_back(q);
  }
  for (pid_t pid : all) {
    auto state = Request(pid, command, timeout_s);
    if (state.ok()) {
      std::printf("umap-ctl: %d: %s\n", pid, state->c_str());
      r.done.push_back(pid);
      continue;
    }
    if (absl::IsNotFound(state.status())) {
      if (tree && !HoldsUndumpable(pid)) continue;  // not a Umap process
      std::fprintf(stderr, "umap-ctl: %d: %s%s\n", pid,
                   std::string(state.status().message()).c_str(),
                   HoldsUndumpable(pid)
                       ? ", and holds a userfaultfd or io_uring that CRIU cannot dump: start "
                         "it with UMAP_CHECKPOINT=1"
                       : " (not a Umap program, or started without UMAP_CHECKPOINT=1)");
      r.exit_code = std::max(r.exit_code, 3);
      continue;
    }
    std::fprintf(stderr, "umap-ctl: %d: %s: %s\n", pid, command.c_str(),
                 std::string(state.status().message()).c_str());
    r.exit_code = std::max(r.exit_code, 1);
  }
  if (command == "quiesce" && r.exit_code != 0 && !r.done.empty()) {
    // All or nothing: a dump that cannot happen must not leave the others waiting.
    std::fprintf(stderr, "umap-ctl: resuming the %zu processes already quiesced\n", r.done.size());
    Control(r.done, "resume", /*tree=*/false, timeout_s);
    r.done.clear();
  }
  return r;
}

int CriuHook(int timeout_s) {
  const char* action = std::getenv("CRTOOLS_SCRIPT_ACTION");
  const char* init = std::getenv("CRTOOLS_INIT_PID");
  if (action == nullptr) {
    std::fprintf(stderr,
                 "umap-ctl: criu-hook runs as criu --action-script "
                 "(CRTOOLS_SCRIPT_ACTION is not set)\n");
    return 2;
  }
  const std::string act = action;
  if (act != "pre-dump" && act != "post-resume") return 0;
  int root = 0;
  if (init == nullptr || !absl::SimpleAtoi(init, &root) || root <= 0) {
    std::fprintf(stderr, "umap-ctl: criu %s: CRTOOLS_INIT_PID is missing\n", action);
    return 2;
  }
  if (act == "post-resume") return Control({root}, "resume", /*tree=*/true, timeout_s).exit_code;
  ControlResult r = Control({root}, "quiesce", /*tree=*/true, timeout_s);
  if (r.exit_code == 0 && !r.done.empty()) SpawnGuardian(r.done, timeout_s);
  return r.exit_code;
}

}  // namespace umap::tools
