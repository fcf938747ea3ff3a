#include "runtime/control/checkpoint_control.h"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/posix_error.h"

namespace umap::runtime {
namespace {

// A client that connects and says nothing must not hold the thread for long.
constexpr int kRequestTimeoutSec = 5;

socklen_t AbstractAddress(pid_t pid, sockaddr_un* a) {
  std::memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  const std::string name = ControlSocketName(pid);
  std::memcpy(a->sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

std::string Reply(const absl::Status& s, const CheckpointHandlers& h) {
  if (s.ok()) return absl::StrCat("ok ", h.state(), "\n");
  const int err = ErrnoFromStatus(s);
  const char* name = ::strerrorname_np(err);
  std::string msg(s.message());
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  return absl::StrCat("error ", name ? name : "EIO", " ", msg, "\n");
}

// The request line (at most a few bytes), read before anything is answered, so that a
// client never writes into a closed connection.
std::string ReadCommand(int c) {
  struct timeval tv = {kRequestTimeoutSec, 0};
  ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[64];
  size_t got = 0;
  while (got < sizeof(buf) - 1) {
    const ssize_t n = ::read(c, buf + got, sizeof(buf) - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
    if (std::memchr(buf, '\n', got) != nullptr) break;
  }
  return std::string(absl::StripAsciiWhitespace(absl::string_view(buf, got)));
}

// One connection: read the command, authenticate, run it, answer, close.
void Serve(int c, const CheckpointHandlers& h) {
  const std::string cmd = ReadCommand(c);
  struct ucred cred = {};
  socklen_t len = sizeof(cred);
  std::string reply;
  if (::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
      (cred.uid != 0 && cred.uid != ::geteuid())) {
    reply = absl::StrCat("error EACCES uid ", cred.uid,
                         " may not control this process (only root and uid ", ::geteuid(), ")\n");
  } else if (cmd == "quiesce") {
    reply = Reply(h.quiesce(), h);
  } else if (cmd == "resume") {
    reply = Reply(h.resume(), h);
  } else if (cmd == "state") {
    reply = Reply(absl::OkStatus(), h);
  } else {
    reply = absl::StrCat("error EINVAL unknown command '", cmd, "' (quiesce, resume or state)\n");
  }
  // A refusal or failure is worth a line in the job's log; a plain success is not.
  if (absl::StartsWith(reply, "error")) {
    UMAP_LOG(kWarn, "checkpoint control: '", cmd, "' from uid ", cred.uid, " pid ", cred.pid, ": ",
             absl::StripAsciiWhitespace(reply));
  } else {
    UMAP_LOG(kInfo, "checkpoint control: '", cmd, "' from uid ", cred.uid, " pid ", cred.pid, ": ",
             absl::StripAsciiWhitespace(reply));
  }
  size_t off = 0;
  while (off < reply.size()) {
    const ssize_t n = ::send(c, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the client went away; nothing to tell it
    off += static_cast<size_t>(n);
  }
  ::close(c);
}

void Loop(int listener, CheckpointHandlers h) {
  ::pthread_setname_np(::pthread_self(), "umap-ctl");
  for (;;) {
    const int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      UMAP_LOG(kError, "checkpoint control: accept failed: errno ", errno,
               "; the control socket is no longer served");
      return;
    }
    Serve(c, h);
  }
}

}  // namespace

std::string ControlSocketName(pid_t pid) { return absl::StrCat("umap-checkpoint.", pid); }

absl::Status StartCheckpointControl(CheckpointHandlers handlers) {
  static std::mutex mu;
  // The process that started it: a fork() child (no control thread there) starts its own,
  // under its own pid, and drops the listening socket it inherited.
  static pid_t started_by = 0;
  static int listener = -1;
  std::lock_guard<std::mutex> l(mu);
  if (started_by == ::getpid()) return absl::OkStatus();
  if (listener >= 0) ::close(listener);
  listener = -1;
  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return PosixError(errno, "checkpoint control socket");
  sockaddr_un a;
  const socklen_t alen = AbstractAddress(::getpid(), &a);
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), alen) != 0 || ::listen(s, 4) != 0) {
    const int err = errno;
    ::close(s);
    return PosixError(err, absl::StrCat("binding the checkpoint control socket @",
                                        ControlSocketName(::getpid())));
  }
  std::thread(Loop, s, std::move(handlers)).detach();
  started_by = ::getpid();
  listener = s;
  UMAP_LOG(kInfo, "checkpoint control on @", ControlSocketName(::getpid()));
  return absl::OkStatus();
}

}  // namespace umap::runtime
