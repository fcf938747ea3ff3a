#include "chaos/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace chaos {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::unique_ptr<Worker>> Worker::Start(const std::string& binary,
                                                      const std::vector<std::string>& args,
                                                      const std::vector<std::string>& env,
                                                      const std::string& log,
                                                      const std::vector<std::string>& prefix) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return absl::InternalError("pipe for the worker report");
  std::vector<std::string> argv = prefix;
  argv.insert(argv.end(), {binary, "--report-fd", "3"});
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<pid_t> pid = Spawn({argv, env, log, p[1]});
  ::close(p[1]);
  if (!pid.ok()) {
    ::close(p[0]);
    return pid.status();
  }
  return std::unique_ptr<Worker>(new Worker(*pid, p[0]));
}

Worker::~Worker() {
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    Reap(10000);
  }
  ::close(report_fd_);
}

bool Worker::PumpUntil(const std::function<bool()>& pred, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!pred()) {
    if (eof_) return false;
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0) return false;
    pollfd pf{report_fd_, POLLIN, 0};
    const int rc = ::poll(&pf, 1, left);
    if (rc <= 0) continue;  // EINTR or the deadline: the loop re-checks both
    char buf[4096];
    const ssize_t n = ::read(report_fd_, buf, sizeof buf);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      eof_ = true;
      return pred();
    }
    partial_line_.append(buf, n);
    for (size_t nl; (nl = partial_line_.find('\n')) != std::string::npos;) {
      Parse(partial_line_.substr(0, nl));
      partial_line_.erase(0, nl + 1);
    }
  }
  return true;
}

void Worker::Sleep(int ms) {
  PumpUntil([] { return false; }, ms);
}

bool Worker::WaitForFirstAck(int timeout_ms) {
  return PumpUntil([&] { return events_.last_acked.has_value(); }, timeout_ms);
}

bool Worker::WaitForAckAfter(uint64_t round, int timeout_ms) {
  return PumpUntil([&] { return events_.last_acked && *events_.last_acked > round; }, timeout_ms);
}

absl::Status Worker::Stop(int timeout_ms) {
  if (reaped_) return absl::OkStatus();
  return FreezeProcess(pid_, timeout_ms);
}

void Worker::Cont() {
  if (!reaped_) ::kill(pid_, SIGCONT);
}

void Worker::Kill() {
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    killed_by_us_ = true;
  }
}

Exit Worker::Reap(int timeout_ms) {
  if (reaped_) return exit_;
  PumpUntil([] { return false; }, timeout_ms);
  exit_ = Wait(pid_, eof_ ? 10000 : 0);
  reaped_ = !exit_.unkillable;
  return exit_;
}

void Worker::Parse(const std::string& line) {
  std::vector<std::string> f = absl::StrSplit(line, ' ');
  uint64_t a = 0, b = 0;
  // A malformed number reads as 0: the worker writes these lines itself, and a line cut by
  // its death at worst loses one event, which the oracle treats as "not reported".
  if (f.size() >= 2) (void)absl::SimpleAtoi(f[1], &a);
  if (f.size() >= 3) (void)absl::SimpleAtoi(f[2], &b);
  if (f[0] == "R") events_.ready = true;
  if (f[0] == "B") events_.last_begun = a;
  if (f[0] == "A") events_.last_acked = a;
  if (f[0] == "E") events_.errors.emplace_back(a, static_cast<int>(b));
  if (f[0] == "T") events_.stall_round = a;
  if (f[0] == "U") events_.unmap_rc = static_cast<int>(a);
  if (f[0] == "F") {
    data_fired_ = a;
    journal_fired_ = b;
  }
  if (f[0] == "H") healed_round_ = a;
  if (f[0] == "Z") journal_zeroed_ = a;
  if (f[0] == "M" && f.size() >= 4) {
    uint64_t cache = 0;
    (void)absl::SimpleAtoi(f[3], &cache);
    ParseMemory(a, b, cache);
  }
  if (f[0] == "V" && f.size() >= 2) {
    std::vector<int64_t> v;
    for (absl::string_view x : absl::StrSplit(f[1], ',')) {
      int64_t n = -1;
      if (!absl::SimpleAtoi(x, &n)) n = -1;
      v.push_back(n);
    }
    base_ = std::move(v);
  }
}

void Worker::ParseMemory(uint64_t round, uint64_t rss_kib, uint64_t cache_bytes) {
  if (memory_.samples++ == 0) {
    memory_.first_rss_kib = rss_kib;
    memory_.first_round = round;
  }
  if (rss_kib > memory_.max_rss_kib) {
    memory_.max_rss_kib = rss_kib;
    memory_.max_round = round;
  }
  memory_.max_cache_bytes = std::max(memory_.max_cache_bytes, cache_bytes);
}

}  // namespace chaos
