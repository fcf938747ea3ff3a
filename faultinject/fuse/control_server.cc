#include "faultinject/fuse/control_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace umap::faultfuse {
namespace {

// The key=value words after the command; false (with `bad` set) for a word that is not one
// of `allowed`.
bool Options(const std::vector<absl::string_view>& words,
             std::initializer_list<absl::string_view> allowed,
             std::map<std::string, std::string>* out, std::string* bad) {
  for (size_t i = 1; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    const absl::string_view key = words[i].substr(0, eq);
    bool ok = eq != absl::string_view::npos;
    if (ok) {
      ok = false;
      for (absl::string_view a : allowed) ok |= key == a;
    }
    if (!ok) {
      *bad = std::string(words[i]);
      return false;
    }
    (*out)[std::string(key)] = std::string(words[i].substr(eq + 1));
  }
  return true;
}

}  // namespace

ControlServer::~ControlServer() {
  if (listen_fd_ >= 0) {
    ::shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    ::close(listen_fd_);
    ::unlink(path_.c_str());
  }
}

absl::Status ControlServer::Listen(const std::string& path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("control socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  ::unlink(path.c_str());
  // Only the owner (the test that started the daemon) may arm faults.
  const mode_t old = ::umask(077);
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::umask(old);
  if (rc != 0 || ::listen(fd, 16) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("bind/listen ", path, ": ", std::strerror(err)));
  }
  listen_fd_ = fd;
  path_ = path;
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return absl::OkStatus();
}

void ControlServer::AcceptLoop() {
  for (;;) {
    const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    std::thread([this, c] { Serve(c); }).detach();
  }
}

void ControlServer::Serve(int fd) {
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
      std::string reply = Handle(absl::string_view(pending).substr(0, nl)) + "\n";
      pending.erase(0, nl + 1);
      for (size_t done = 0; done < reply.size();) {
        const ssize_t w = ::write(fd, reply.data() + done, reply.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          ::close(fd);
          return;
        }
        done += static_cast<size_t>(w);
      }
    }
  }
  ::close(fd);
}

std::string ControlServer::Handle(absl::string_view line) {
  std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (words.empty()) return "error empty command";
  const absl::string_view cmd = words[0];
  std::map<std::string, std::string> opt;
  std::string bad;
  if (cmd == "ping") return "ok";
  if (cmd == "arm") {
    auto rule = FuseRule::Parse(line.substr(line.find("arm") + 3));
    if (!rule.ok()) return absl::StrCat("error ", rule.status().message());
    return absl::StrCat("ok rule=", book_->Arm(*std::move(rule)));
  }
  if (cmd == "clear" || cmd == "reset" || cmd == "history-clear") {
    if (words.size() != 1) return absl::StrCat("error ", cmd, " takes no arguments");
    if (cmd == "clear") book_->Clear();
    if (cmd == "reset") book_->Reset();
    if (cmd == "history-clear") book_->ClearHistory();
    return "ok";
  }
  if (cmd == "release") {
    if (!Options(words, {"path", "error"}, &opt, &bad)) return "error release: bad word " + bad;
    std::optional<int> err;
    if (opt.count("error")) {
      err = ParseErrno(opt["error"]);
      if (!err || *err <= 0 || *err >= 512) return "error release: bad errno " + opt["error"];
    }
    return absl::StrCat("ok released=", stalls_->Release(opt["path"], err));
  }
  if (cmd == "stats") return "ok " + book_->StatsLine();
  if (cmd == "wait") {
    int n = 0;
    uint64_t timeout_ms = 10'000;
    if (!Options(words, {"stalled", "timeout_ms"}, &opt, &bad) || !opt.count("stalled") ||
        !absl::SimpleAtoi(opt["stalled"], &n) ||
        (opt.count("timeout_ms") && !absl::SimpleAtoi(opt["timeout_ms"], &timeout_ms))) {
      return "error wait: usage wait stalled=N [timeout_ms=T]";
    }
    const int got = book_->WaitStalled(n, absl::Milliseconds(timeout_ms));
    return got >= n ? absl::StrCat("ok stalled=", got)
                    : absl::StrCat("error timeout stalled=", got);
  }
  if (cmd == "history") {
    if (!Options(words, {"path"}, &opt, &bad)) return "error history: bad word " + bad;
    return "ok " + book_->HistoryLine(opt["path"]);
  }
  return absl::StrCat("error unknown command '", cmd, "'");
}

}  // namespace umap::faultfuse
