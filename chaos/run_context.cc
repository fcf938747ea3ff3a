#include "chaos/run_context.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "chaos/capability.h"
#include "chaos/system.h"

namespace chaos {

absl::Status RunContext::StartGluster() {
  const std::string name = absl::StrCat("chaos", ::getpid());
  const std::string mount = run_dir_ + "/gluster";
  MakeDirs(mount).IgnoreError();  // the testbed reports a missing mount point itself
  // A small brick: the brick's ext4 can be filled (enospc data-full) and power-cut (reboot:
  // gluster-testbed shutdown-brick).
  RETURN_IF_ERROR(RunTestbed({"up-single", "--name", name, "--mount", mount, "--ping-timeout",
                              "3", "--small-brick", "24M"},
                             run_dir_ + "/gluster-up.log", 180000));
  gluster_name_ = name;
  gluster_mount_ = mount;
  return absl::OkStatus();
}

absl::Status RunContext::RunTestbed(const std::vector<std::string>& args, const std::string& log,
                                    int timeout_ms) const {
  std::vector<std::string> argv = {config_.testbed};
  argv.insert(argv.end(), args.begin(), args.end());
  Exit e = Run(argv, log, timeout_ms);
  if (e.exited && e.code == 77) {
    // The testbed probed what it needs and said which capability is missing.
    absl::StatusOr<std::string> text = ReadWholeFile(log);
    const size_t at = text.ok() ? text->rfind("umap-skip: missing ") : std::string::npos;
    if (at != std::string::npos) {
      return MissingCapability(text->substr(at, text->find('\n', at) - at));
    }
    return absl::InternalError(
        absl::StrCat("exit 77 without naming a missing capability; see ", log));
  }
  if (!e.exited || e.code != 0) {
    return absl::UnavailableError(
        absl::StrCat("`", absl::StrJoin(argv, " "), "`: ", e.ToString(), "; see ", log));
  }
  return absl::OkStatus();
}

void RunContext::StopGluster() {
  if (gluster_mount_.empty()) return;
  Run({config_.testbed, "down", "--name", gluster_name_, "--keep-logs", run_dir_ + "/gluster-logs"},
      run_dir_ + "/gluster-up.log", 120000);
  gluster_mount_.clear();
}

absl::Status RunContext::ReviveDeadMount() {
  if (!gluster()) return absl::OkStatus();
  struct stat st;
  if (::stat(gluster_mount_.c_str(), &st) == 0) return absl::OkStatus();
  const int err = errno;
  absl::Status remount = Testbed("remount", {}, 120000);
  return absl::UnavailableError(absl::StrCat(
      "the GlusterFS mount ", gluster_mount_, " was dead at the start of the iteration (stat: ",
      strerror(err), "; client log kept in ", run_dir_, "/gluster-logs); remount: ",
      remount.ToString()));
}

absl::Status RunContext::Require(const std::vector<std::string>& capabilities) const {
  return RequireCapabilities(config_.probe, capabilities, setup_log());
}

absl::Status RunContext::Testbed(const std::string& subcommand,
                                 const std::vector<std::string>& args, int timeout_ms) {
  const std::string log = run_dir_ + "/gluster-faults.log";
  std::vector<std::string> argv = {config_.testbed, subcommand, "--name", gluster_name_};
  argv.insert(argv.end(), args.begin(), args.end());
  Exit e = Run(argv, log, timeout_ms);
  if (!e.exited || e.code != 0) {
    return absl::InternalError(absl::StrCat("`", absl::StrJoin(argv, " "),
                                            "` failed: ", e.ToString(), " (see ", log, ")"));
  }
  return absl::OkStatus();
}

absl::Status RunContext::TimedTestbed(const std::string& subcommand,
                                      const std::vector<std::string>& args, int* ms) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = Testbed(subcommand, args, 60000);
  *ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  return s;
}

}  // namespace chaos
