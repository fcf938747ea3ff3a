// FaultFuse: a test's handle on a running umap-faultfuse (faultfuse_main.cc): a FUSE mount
// of a backing directory whose requests the test breaks on command. Unlike FaultEnv, the
// files have real descriptors, so the runtime's own I/O paths (io_uring reads and writes,
// O_DIRECT, the faulting thread's pread in signal mode) meet the faults, in the kernel.
//
//   UMAP_SKIP_WITHOUT("root", "fuse");   // tests/testing/capability.h
//   auto fs = FaultFuse::Start({.dir = tmp});
//   int fd = open((*fs)->Path("data").c_str(), O_RDWR);
//   ASSERT_OK((*fs)->Arm("write path=data skip=1 count=1 stall=forever"));
//   ... (*fs)->WaitStalled(1) ... (*fs)->Release() ...
//
// The rule and command syntax is in fuse_rule.h and control_server.h. Lifetime: the
// destructor fails every held request with EIO, unmounts (lazily: descriptors still open
// then see ENOTCONN once the connection is aborted) and stops the daemon.
//
// Thread safety: every method may be called from any thread (each command is its own
// connection), so one thread may wait for stalls while another releases them.
#ifndef UMAP_FAULTINJECT_FUSE_FAULT_FUSE_H_
#define UMAP_FAULTINJECT_FUSE_FAULT_FUSE_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace umap::faultinject {

class FaultFuse {
 public:
  struct Options {
    std::string dir;                    // holds backing/, mnt/ and the control socket
    std::string direct_io = "odirect";  // odirect | all | none (faultfuse_main.cc)
    bool async_dio = true;
    unsigned max_background = 64;  // 0: the kernel's default (12)
    bool allow_other = false;      // other users may use the mount (root only)
  };
  // One request as the daemon saw it (RuleBook::HistoryLine).
  struct Request {
    std::string op;    // read, write, fsync, open, flush
    std::string path;  // below the mount
    uint64_t offset = 0;
    uint64_t len = 0;
    std::optional<int64_t> result;  // bytes or -errno; nullopt while pending
    bool direct = false;            // on an O_DIRECT handle
    bool interrupted = false;       // the kernel sent FUSE_INTERRUPT for it
  };

  // Mounts a fresh file system at `options.dir`/mnt over `options.dir`/backing (both
  // created). Mounting needs /dev/fuse and root (or fusermount3): tests skip first when
  // faultinject/probe-capability says "root" or "fuse" is missing. Errors: kInternal when
  // the daemon fails to start (its stderr says why) or does not answer within 10 s.
  static absl::StatusOr<std::unique_ptr<FaultFuse>> Start(const Options& options);
  ~FaultFuse();
  FaultFuse(const FaultFuse&) = delete;
  FaultFuse& operator=(const FaultFuse&) = delete;

  const std::string& mount() const { return mount_; }
  const std::string& backing() const { return backing_; }
  // `name` below the mount / below the backing directory.
  std::string Path(absl::string_view name) const;
  std::string BackingPath(absl::string_view name) const;
  pid_t pid() const { return pid_; }

  // One command line; returns the reply after "ok" (trimmed). Errors: kInvalidArgument with
  // the daemon's message for an "error" reply; kUnavailable when the daemon cannot be
  // reached.
  absl::StatusOr<std::string> Command(absl::string_view line);
  // arm RULE; returns the rule's index.
  absl::StatusOr<int> Arm(absl::string_view rule);
  absl::Status Clear();
  absl::Status Reset();
  // Finishes held requests (of paths containing `path`; all when empty) as their rules say
  // or, with `error`, failing with that errno. Returns how many.
  absl::StatusOr<int> Release(absl::string_view path = "", std::optional<int> error = {});
  // Waits until `n` requests are held. kDeadlineExceeded (saying how many are) on timeout.
  absl::Status WaitStalled(int n, absl::Duration timeout = absl::Seconds(10));
  // The stats line as numbers: "read", "write", "max_inflight_write", "stalled", ...
  absl::StatusOr<std::map<std::string, int64_t>> Stats();
  absl::StatusOr<int64_t> Stat(absl::string_view name);
  // The daemon's request history (of paths containing `path`), oldest first.
  absl::StatusOr<std::vector<Request>> History(absl::string_view path = "");
  absl::Status ClearHistory();
  // Aborts the FUSE connection (/sys/fs/fuse/connections/N/abort): every request in flight
  // and every later one fails with ENOTCONN, as when a DFS client dies.
  absl::Status Abort();

 private:
  FaultFuse() = default;
  absl::Status WaitReady(int stdout_fd);
  void Stop();

  std::string dir_, backing_, mount_, control_;
  pid_t pid_ = -1;
  bool mounted_ = false;
  uint32_t connection_ = 0;  // the fusectl connection number (the mount's device minor)
};

}  // namespace umap::faultinject

#endif  // UMAP_FAULTINJECT_FUSE_FAULT_FUSE_H_
