// RunContext: what one umap-chaos run (one lane of it) offers its fault classes for the
// whole run: the options, the work directory, the GlusterFS testbed when --dfs gluster, and
// the tally of what was armed and fired.
//
// Thread safety: none; one harness thread uses it.
#ifndef UMAP_CHAOS_RUN_CONTEXT_H_
#define UMAP_CHAOS_RUN_CONTEXT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "chaos/config.h"
#include "chaos/tally.h"

namespace chaos {

class RunContext {
 public:
  RunContext(const Config& config, std::string run_dir)
      : config_(config), run_dir_(std::move(run_dir)) {}

  const Config& config() const { return config_; }
  const std::string& run_dir() const { return run_dir_; }
  // Where set-up commands (mkfs, mount, cp) write their output.
  std::string setup_log() const { return run_dir_ + "/setup.log"; }
  Tally& tally() { return tally_; }
  // RequireCapabilities (chaos/capability.h) with this run's probe and set-up log.
  absl::Status Require(const std::vector<std::string>& capabilities) const;

  // Starts a one-brick GlusterFS testbed (gluster-testbed up-single, a small brick that
  // can be filled and power-cut) mounted at run_dir/gluster. On failure nothing is
  // mounted: a missing capability (IsMissingCapability: the testbed exited 77 with the
  // probe's line) when GlusterFS cannot run here, else an error naming the log.
  absl::Status StartGluster();
  // Tears the testbed down (no-op when none runs).
  void StopGluster();
  bool gluster() const { return !gluster_mount_.empty(); }
  // The testbed's mount point; empty when no testbed runs.
  const std::string& gluster_mount() const { return gluster_mount_; }
  // Runs `gluster-testbed SUBCOMMAND --name N ARGS...` (bound: timeout_ms); the error names
  // the command and its log.
  absl::Status Testbed(const std::string& subcommand, const std::vector<std::string>& args,
                       int timeout_ms);
  // Runs `gluster-testbed ARGS...` (any testbed; bound: timeout_ms), output appended to
  // `log`. Exit 77 (GlusterFS cannot run here) is a missing capability naming the probe's
  // line; any other failure an error naming the command and the log.
  absl::Status RunTestbed(const std::vector<std::string>& args, const std::string& log,
                          int timeout_ms) const;
  // The same, bounded to 60 s, with the time it took in *ms (switching a debug layer).
  absl::Status TimedTestbed(const std::string& subcommand, const std::vector<std::string>& args,
                            int* ms);

 private:
  const Config& config_;
  const std::string run_dir_;
  Tally tally_;
  std::string gluster_name_, gluster_mount_;
};

}  // namespace chaos

#endif  // UMAP_CHAOS_RUN_CONTEXT_H_
