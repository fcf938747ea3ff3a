#include "faultinject/fuse/fault_fuse.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#ifndef UMAP_FAULTFUSE_BIN
#error "UMAP_FAULTFUSE_BIN: the path of umap-faultfuse (faultinject/fuse/CMakeLists.txt)"
#endif

extern char** environ;

namespace umap::faultinject {
namespace {

absl::Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("mkdir ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Waits up to `timeout` for `pid` to exit; true if it did (and was reaped).
bool WaitExit(pid_t pid, std::chrono::milliseconds timeout, int* status) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const pid_t r = ::waitpid(pid, status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<FaultFuse>> FaultFuse::Start(const Options& options) {
  std::unique_ptr<FaultFuse> fs(new FaultFuse());
  fs->dir_ = options.dir;
  fs->backing_ = options.dir + "/backing";
  fs->mount_ = options.dir + "/mnt";
  fs->control_ = options.dir + "/control.sock";
  if (absl::Status s = MakeDir(fs->backing_); !s.ok()) return s;
  if (absl::Status s = MakeDir(fs->mount_); !s.ok()) return s;
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<std::string> args = {UMAP_FAULTFUSE_BIN, "--backing",   fs->backing_,
                                   "--mount",          fs->mount_,    "--control",
                                   fs->control_,       "--direct-io", options.direct_io};
  if (!options.async_dio) args.push_back("--no-async-dio");
  args.push_back("--max-background");
  args.push_back(absl::StrCat(options.max_background));
  if (options.allow_other) args.push_back("--allow-other");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  const int rc = ::posix_spawn(&fs->pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    fs->pid_ = -1;
    return absl::InternalError(absl::StrCat("spawning ", argv[0], ": ", std::strerror(rc)));
  }
  absl::Status ready = fs->WaitReady(out[0]);
  ::close(out[0]);
  if (!ready.ok()) return ready;
  fs->mounted_ = true;
  struct stat st;
  if (::stat(fs->mount_.c_str(), &st) != 0) {
    return absl::InternalError(absl::StrCat("stat ", fs->mount_, ": ", std::strerror(errno)));
  }
  fs->connection_ = ::minor(st.st_dev);
  return fs;
}

absl::Status FaultFuse::WaitReady(int stdout_fd) {
  std::string got;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!absl::StrContains(got, "ready\n")) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    pollfd p = {stdout_fd, POLLIN, 0};
    const int n = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (n < 0 && errno == EINTR) continue;
    char buf[256];
    const ssize_t r = n > 0 ? ::read(stdout_fd, buf, sizeof(buf)) : -1;
    if (r > 0) {
      got.append(buf, static_cast<size_t>(r));
      continue;
    }
    int status = 0;
    if (n > 0 && r == 0 && WaitExit(pid_, std::chrono::seconds(5), &status)) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat("umap-faultfuse exited (status ", status,
                                              ") before it was ready; its stderr says why"));
    }
    mounted_ = true;  // it may have mounted: Stop unmounts (harmless if it did not)
    Stop();
    return absl::InternalError("umap-faultfuse did not say ready within 10 s");
  }
  return absl::OkStatus();
}

FaultFuse::~FaultFuse() { Stop(); }

void FaultFuse::Stop() {
  if (pid_ < 0) return;
  if (mounted_) {
    // Nothing may stay held: a thread of the test blocked on a stalled request would keep
    // the unmount (and the test) waiting.
    Clear().IgnoreError();  // the daemon may be gone already; unmounting copes
    Release("", EIO).IgnoreError();
    if (::geteuid() == 0) {
      ::umount2(mount_.c_str(), MNT_DETACH);
    } else {
      const std::string cmd = absl::StrCat("fusermount3 -u -z '", mount_, "' 2>/dev/null");
      if (std::system(cmd.c_str()) != 0) Abort().IgnoreError();  // still stops the daemon
    }
    mounted_ = false;
  }
  int status = 0;
  // The daemon ends when the kernel drops the connection: at once after the unmount, or,
  // if descriptors on the mount are still open somewhere, when they close. Abort then.
  if (!WaitExit(pid_, std::chrono::seconds(5), &status)) {
    Abort().IgnoreError();
    if (!WaitExit(pid_, std::chrono::seconds(5), &status)) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
  }
  pid_ = -1;
}

std::string FaultFuse::Path(absl::string_view name) const {
  return absl::StrCat(mount_, "/", name);
}

std::string FaultFuse::BackingPath(absl::string_view name) const {
  return absl::StrCat(backing_, "/", name);
}

absl::StatusOr<std::string> FaultFuse::Command(absl::string_view line) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (control_.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("control socket path too long: ", control_));
  }
  std::memcpy(addr.sun_path, control_.c_str(), control_.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("connect ", control_, ": ", std::strerror(err)));
  }
  const std::string out = absl::StrCat(line, "\n");
  std::string reply;
  bool ok = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size());
  while (ok && !absl::StrContains(reply, "\n")) {
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ok = false;
    if (n > 0) reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!ok)
    return absl::UnavailableError(absl::StrCat("umap-faultfuse did not answer '", line, "'"));
  absl::string_view r = absl::StripAsciiWhitespace(reply);
  if (absl::ConsumePrefix(&r, "ok")) return std::string(absl::StripAsciiWhitespace(r));
  absl::ConsumePrefix(&r, "error ");
  return absl::InvalidArgumentError(absl::StrCat("umap-faultfuse: '", line, "': ", r));
}

absl::StatusOr<int> FaultFuse::Arm(absl::string_view rule) {
  auto r = Command(absl::StrCat("arm ", rule));
  if (!r.ok()) return r.status();
  int n;
  if (!absl::SimpleAtoi(absl::StripPrefix(*r, "rule="), &n)) {
    return absl::InternalError(absl::StrCat("unexpected reply to arm: ", *r));
  }
  return n;
}

absl::Status FaultFuse::Clear() { return Command("clear").status(); }
absl::Status FaultFuse::Reset() { return Command("reset").status(); }
absl::Status FaultFuse::ClearHistory() { return Command("history-clear").status(); }

absl::StatusOr<int> FaultFuse::Release(absl::string_view path, std::optional<int> error) {
  std::string line = "release";
  if (!path.empty()) absl::StrAppend(&line, " path=", path);
  if (error) absl::StrAppend(&line, " error=", *error);
  auto r = Command(line);
  if (!r.ok()) return r.status();
  int n;
  if (!absl::SimpleAtoi(absl::StripPrefix(*r, "released="), &n)) {
    return absl::InternalError(absl::StrCat("unexpected reply to release: ", *r));
  }
  return n;
}

absl::Status FaultFuse::WaitStalled(int n, absl::Duration timeout) {
  auto r =
      Command(absl::StrCat("wait stalled=", n, " timeout_ms=", absl::ToInt64Milliseconds(timeout)));
  if (absl::IsInvalidArgument(r.status())) {
    return absl::DeadlineExceededError(
        absl::StrCat("waiting for ", n, " stalled requests: ", r.status().message()));
  }
  return r.status();
}

absl::StatusOr<std::map<std::string, int64_t>> FaultFuse::Stats() {
  auto r = Command("stats");
  if (!r.ok()) return r.status();
  std::map<std::string, int64_t> out;
  for (absl::string_view kv : absl::StrSplit(*r, ' ', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> p = absl::StrSplit(kv, '=');
    int64_t v;
    if (!absl::SimpleAtoi(p.second, &v)) {
      return absl::InternalError(absl::StrCat("unexpected stats word: ", kv));
    }
    out[std::string(p.first)] = v;
  }
  return out;
}

absl::StatusOr<int64_t> FaultFuse::Stat(absl::string_view name) {
  auto s = Stats();
  if (!s.ok()) return s.status();
  auto it = s->find(std::string(name));
  if (it == s->end()) return absl::NotFoundError(absl::StrCat("no stat named ", name));
  return it->second;
}

absl::StatusOr<std::vector<FaultFuse::Request>> FaultFuse::History(absl::string_view path) {
  auto r = Command(path.empty() ? std::string("history") : absl::StrCat("history path=", path));
  if (!r.ok()) return r.status();
  std::vector<Request> out;
  for (absl::string_view e : absl::StrSplit(*r, ' ', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(e, ',');
    Request q;
    int64_t result;
    if (f.size() != 6 || !absl::SimpleAtoi(f[2], &q.offset) || !absl::SimpleAtoi(f[3], &q.len)) {
      return absl::InternalError(absl::StrCat("unexpected history entry: ", e));
    }
    q.op = std::string(f[0]);
    q.path = std::string(f[1]);
    if (f[4] != "pending") {
      if (!absl::SimpleAtoi(f[4], &result)) {
        return absl::InternalError(absl::StrCat("unexpected history result: ", e));
      }
      q.result = result;
    }
    q.direct = absl::StrContains(f[5], "d");
    q.interrupted = absl::StrContains(f[5], "i");
    out.push_back(std::move(q));
  }
  return out;
}

absl::Status FaultFuse::Abort() {
  const std::string path = absl::StrCat("/sys/fs/fuse/connections/", connection_, "/abort");
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    // fusectl is not mounted here: mount it in a throw-away mount namespace, so the
    // machine's mount table stays as it was.
    const std::string cmd = absl::StrCat(
        "unshare --mount --propagation private sh -c 'mount -t fusectl fusectl "
        "/sys/fs/fuse/connections && echo 1 >",
        path, "'");
    if (std::system(cmd.c_str()) == 0) return absl::OkStatus();
    return absl::InternalError(
        absl::StrCat("aborting FUSE connection ", connection_, " failed: ", cmd));
  }
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  const bool ok = ::write(fd, "1", 1) == 1;
  const int err = errno;
  ::close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("write ", path, ": ", std::strerror(err)));
  return absl::OkStatus();
}

}  // namespace umap::faultinject
