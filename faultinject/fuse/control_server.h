// ControlServer: the control socket of umap-faultfuse. A test connects to a Unix stream
// socket (mode 0600) and sends one command per line; each gets one reply line, "ok ..." or
// "error <what went wrong>". Commands (docs/testing.md, "The FUSE fault file system"):
//
//   ping                               ok
//   arm RULE                           ok rule=N          (RULE: fuse_rule.h)
//   clear                              ok                 drops every rule
//   reset                              ok                 rules, counters and history
//   release [path=P] [error=E]         ok released=N      finishes held (stalled) requests
//   stats                              ok read=N ... stalled=N ... (RuleBook::StatsLine)
//   wait stalled=N [timeout_ms=T]      ok stalled=M, or error timeout stalled=M
//   history [path=P]                   ok ENTRY...        (RuleBook::HistoryLine)
//   history-clear                      ok
//
// Each connection is served by a thread of its own, so a test may wait on one connection
// while it releases on another.
#ifndef UMAP_FAULTINJECT_FUSE_CONTROL_SERVER_H_
#define UMAP_FAULTINJECT_FUSE_CONTROL_SERVER_H_

#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "faultinject/fuse/rule_book.h"
#include "faultinject/fuse/stall_queue.h"

namespace umap::faultfuse {

class ControlServer {
 public:
  ControlServer(RuleBook* book, StallQueue* stalls) : book_(book), stalls_(stalls) {}
  // Closes the listening socket; connections still open end with the process.
  ~ControlServer();

  // Binds `path` (removing a stale socket there) and starts accepting.
  absl::Status Listen(const std::string& path);

  // One command line (no newline) to its reply line (no newline).
  std::string Handle(absl::string_view line);

 private:
  void AcceptLoop();
  void Serve(int fd);

  RuleBook* const book_;
  StallQueue* const stalls_;
  int listen_fd_ = -1;
  std::string path_;
  std::thread acceptor_;
};

}  // namespace umap::faultfuse

#endif  // UMAP_FAULTINJECT_FUSE_CONTROL_SERVER_H_
