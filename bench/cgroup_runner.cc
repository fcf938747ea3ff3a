#include "bench/cgroup_runner.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "bench/memory_cgroup.h"
#include "bench/posix_io.h"
#include "bench/run_json.h"

namespace umap_bench {
namespace {

// Bytes on a child's socket, child to parent: kReady, kTimedEnd, then the JSON line; parent
// to child: kGo.
constexpr char kReady = 'R';
constexpr char kGo = 'G';
constexpr char kTimedEnd = 'D';

absl::Status SendByte(int fd, char c) {
  for (;;) {
    if (::send(fd, &c, 1, MSG_NOSIGNAL) == 1) return absl::OkStatus();
    if (errno != EINTR) return Errno(errno, "send to the benchmark's parent/child");
  }
}

// The parent's view of one child.
struct Child {
  pid_t pid = -1;
  Fd sock;
  std::string received;  // bytes after the markers (the JSON line)
  bool eof = false;
  int wait_status = 0;

  // Reads until `marker` arrives (true) or the child's JSON starts or it closes (false).
  bool AwaitMarker(char marker) {
    while (!eof) {
      char c = 0;
      const ssize_t n = ::recv(sock.get(), &c, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        eof = true;
        break;
      }
      if (c == marker) return true;
      if (c == kReady || c == kTimedEnd) continue;  // a marker of an earlier phase
      received.push_back(c);
      return false;  // the JSON line began: the child is past every marker
    }
    return false;
  }
  void ReadRest() {
    char buf[4096];
    while (!eof) {
      const ssize_t n = ::recv(sock.get(), buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        eof = true;
        break;
      }
      received.append(buf, static_cast<size_t>(n));
    }
  }
};

int ThreadsOfThisProcess() {
  absl::StatusOr<std::string> status = ReadSmallFile("/proc/self/status");
  if (!status.ok()) return -1;
  const size_t p = status->find("\nThreads:");
  return p == std::string::npos ? -1 : std::atoi(status->c_str() + p + 9);
}

// The child: joins the cgroup, runs, reports, exits. Never returns.
[[noreturn]] void ChildMain(const ChildRun& run, const std::string& cgroup_dir, int sock,
                            unsigned process, unsigned processes) {
  RunConfig rc = run.config;
  rc.start_gate = [sock]() -> absl::Status {
    RETURN_IF_ERROR(SendByte(sock, kReady));
    char c = 0;
    for (;;) {
      const ssize_t n = ::recv(sock, &c, 1, 0);
      if (n == 1 && c == kGo) return absl::OkStatus();
      if (n < 0 && errno == EINTR) continue;
      return absl::AbortedError("the parent went away before starting the run");
    }
  };
  rc.timed_end = [sock] { SendByte(sock, kTimedEnd).IgnoreError(); };  // EOF says as much
  absl::StatusOr<RunResult> r = [&]() -> absl::StatusOr<RunResult> {
    RETURN_IF_ERROR(WriteSmallFile(cgroup_dir + "/cgroup.procs", absl::StrCat(::getpid())));
    return RunOnce(*run.file, run.workload, rc, run.repeat, run.tag);
  }();
  RunResult out;
  if (r.ok()) {
    out = std::move(*r);
  } else {
    out.backend = rc.backend;
    out.workload = run.workload.Name();
    out.threads = run.workload.threads;
    out.repeat = run.repeat;
    out.error = r.status().ToString();
  }
  out.process = process;
  out.processes = processes;
  const std::string line = ToJson(out, run.workload, rc, *run.file, run.label) + "\n";
  size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = ::send(sock, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(out.verified ? 0 : 1);
}

}  // namespace

std::string HowItEnded(int status) {
  if (WIFEXITED(status)) {
    switch (WEXITSTATUS(status)) {
      case 3:
        return "exit 3 (SIGBUS, see above)";
      case 4:
        return "exit 4 (stalled, see above)";
      default:
        return absl::StrCat("exit ", WEXITSTATUS(status));
    }
  }
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("wait status ", status);
}

namespace {

// The result a child sent, or a failed one saying how it ended without one.
ChildOutcome Outcome(const ChildRun& run, Child& c, unsigned process, unsigned processes,
                     uint64_t oom_kills) {
  ChildOutcome o;
  const std::string line(absl::StripTrailingAsciiWhitespace(c.received));
  if (!line.empty() && line.front() == '{') o.result = ResultFromJson(line);
  RunResult& r = o.result;
  const bool exited_ok = WIFEXITED(c.wait_status) && WEXITSTATUS(c.wait_status) == 0;
  if (line.empty() || !exited_ok) {
    if (line.empty()) {
      r.backend = run.config.backend;
      r.workload = run.workload.Name();
      r.threads = run.workload.threads;
      r.repeat = run.repeat;
    }
    o.oom_killed =
        WIFSIGNALED(c.wait_status) && WTERMSIG(c.wait_status) == SIGKILL && oom_kills > 0;
    std::string how = absl::StrCat("child process ", HowItEnded(c.wait_status));
    if (o.oom_killed) absl::StrAppend(&how, ": OOM-killed at the memory limit");
    if (!exited_ok) r.verified = false;
    absl::StrAppend(&r.error, r.error.empty() ? "" : "; ", how);
  }
  r.process = process;
  r.processes = processes;
  return o;
}

}  // namespace

absl::StatusOr<std::vector<ChildOutcome>> RunInMemoryCgroup(const std::string& parent,
                                                            const std::string& name,
                                                            uint64_t limit_bytes,
                                                            const std::vector<ChildRun>& runs) {
  if (const int threads = ThreadsOfThisProcess(); threads != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RunInMemoryCgroup forks: the caller must be single-threaded (it has ", threads, ")"));
  }
  ASSIGN_OR_RETURN(MemoryCgroup cg, MemoryCgroup::Create(parent, name, limit_bytes));
  const unsigned n = static_cast<unsigned>(runs.size());
  std::vector<Child> children(n);
  std::fflush(stdout);
  std::fflush(stderr);
  // On an error before every child runs: the started ones see their socket close (their
  // start gate fails), exit, and are reaped before the cgroup is removed.
  auto abandon = [&children](absl::Status s) {
    for (Child& c : children) {
      c.sock = Fd();
      while (c.pid > 0 && ::waitpid(c.pid, &c.wait_status, 0) < 0 && errno == EINTR) {
      }
    }
    return s;
  };
  for (unsigned i = 0; i < n; ++i) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      return abandon(Errno(errno, "socketpair"));
    }
    Fd mine(sv[0]), theirs(sv[1]);
    const pid_t pid = ::fork();
    if (pid < 0) return abandon(Errno(errno, "fork"));
    if (pid == 0) {
      for (Child& c : children) c.sock = Fd();  // other children's sockets
      mine = Fd();
      ChildMain(runs[i], cg.dir(), theirs.get(), i, n);
    }
    children[i].pid = pid;
    children[i].sock = std::move(mine);
  }
  // Everybody set up: start the peak window and the runs together.
  for (Child& c : children) c.AwaitMarker(kReady);
  absl::Status reset = cg.ResetPeak();
  const auto go = std::chrono::steady_clock::now();
  for (Child& c : children) {
    if (!c.eof) SendByte(c.sock.get(), kGo).IgnoreError();  // a dead child shows as EOF
  }
  for (Child& c : children) c.AwaitMarker(kTimedEnd);
  const double group_wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - go).count();
  absl::StatusOr<uint64_t> peak = cg.Peak();
  for (Child& c : children) {
    c.ReadRest();
    while (::waitpid(c.pid, &c.wait_status, 0) < 0 && errno == EINTR) {
    }
  }
  const uint64_t hits = cg.LimitHits().value_or(0);
  const uint64_t ooms = cg.OomKills().value_or(0);
  if (!reset.ok() || !peak.ok()) {
    // A missing figure is not a failed run; say it where the tables cannot.
    std::fprintf(stderr, "umap-bench: the peak of cgroup %s is unknown (shown as 0): %s\n",
                 cg.dir().c_str(), (reset.ok() ? peak.status() : reset).ToString().c_str());
  }
  RETURN_IF_ERROR(cg.Remove());
  std::vector<ChildOutcome> out;
  for (unsigned i = 0; i < n; ++i) {
    ChildOutcome o = Outcome(runs[i], children[i], i, n, ooms);
    o.pid = children[i].pid;
    o.wait_status = children[i].wait_status;
    o.group_wall_s = group_wall_s;
    RunResult& r = o.result;
    r.cgroup_limit = limit_bytes;
    r.cgroup_peak = peak.value_or(0);
    r.cgroup_limit_hits = hits;
    r.oom_kills = ooms;
    o.json = ToJson(r, runs[i].workload, runs[i].config, *runs[i].file, runs[i].label);
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace umap_bench
