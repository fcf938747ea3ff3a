// umap-chaos: the chaos harness (docs/chaos.md). Per iteration it draws a fault class and
// its parameters from a seeded PRNG, runs the real worker (umap-chaos-worker) on a file in a
// data directory with its journal in a journal directory, injects the fault, runs the real
// umap-recover (twice; sometimes killed mid-run and rerun) and checks the invariants with an
// oracle that lives here, outside the faulty storage. The fault classes are in
// chaos/faults/, the epoch loop in chaos/harness.cc.
//
// Reproduce an iteration: umap-chaos --seed S --faults <same list> --iteration I [...]
// (printed with every violation). Kill timing is real time, so a timed kill lands at a
// different instruction; crash-point kills and injected faults are drawn from the seed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "chaos/capability.h"
#include "chaos/config.h"
#include "chaos/fault_class.h"
#include "chaos/run.h"

namespace chaos {
namespace {

constexpr const char* kDefaultFaults = "kill,reboot,timeout,enospc,eio,torn,journal-damage";

std::string FaultClassHelp() {
  std::string text = "Fault classes (docs/chaos.md):\n";
  for (const FaultClassInfo* info : FaultRegistry::All(kDefaultFaults)) text += info->help;
  return text +
         "Exit: 0 no violation, 1 violations, 2 usage, 3 the harness failed (set-up or harness\n"
         "error: never a skip), 77 a requested class could not run here for lack of a\n"
         "capability, printed as 'umap-skip: missing CAP: WHY' (a skip, never a pass).";
}

}  // namespace
}  // namespace chaos

int main(int argc, char** argv) {
  chaos::Config c;
  CLI::App app{
      "umap-chaos: kill, power-cut, stall and fill the storage under a real Umap "
      "worker, recover with umap-recover, check the durability invariants "
      "(docs/chaos.md)"};
  bool have_seed = false;
  std::vector<std::string> names;
  for (const chaos::FaultClassInfo* info : chaos::FaultRegistry::All(chaos::kDefaultFaults)) {
    names.push_back(info->name);
  }
  app.add_option("--seed", c.seed, "PRNG seed (default: from the clock; always printed)")
      ->each([&](const std::string&) { have_seed = true; });
  app.add_option("--iterations", c.iterations, "stop after N iterations (0: use --duration)");
  app.add_option("--duration", c.duration, "stop after this time: N[s|m|h]");
  app.add_option("--faults", c.faults_arg, "comma-separated: " + absl::StrJoin(names, ","))
      ->capture_default_str();
  app.footer(chaos::FaultClassHelp());
  app.add_option("--dfs", c.dfs, "local or gluster")->check(CLI::IsMember({"local", "gluster"}));
  app.add_option("--report", c.report_dir, "write chaos-junit.xml and chaos-summary.md here");
  app.add_option("--mutation", c.mutation, "arm a test mutation in workers (and umap-recover)")
      ->check(CLI::IsMember({"apply_before_commit", "gc_before_sync", "skip_crc"}));
  app.add_option("--defer-file-sync-one-in", c.defer_file_sync_one_in,
                 "1 in N iterations defer the file's fdatasync (defer_file_sync); 0: none");
  app.add_option("--work-dir", c.work_dir, "scratch directory (default /var/tmp/umap-chaos-PID)");
  app.add_option("--worker", c.worker, "umap-chaos-worker binary")->capture_default_str();
  app.add_option("--recover", c.recover, "umap-recover binary")->capture_default_str();
  app.add_option("--gluster-testbed", c.testbed, "faultinject/gluster/gluster-testbed script")
      ->capture_default_str();
  app.add_option("--probe-capability", c.probe, "faultinject/probe-capability script")
      ->capture_default_str();
  app.add_option("--iteration", c.only_iteration, "run only iteration I (reproduce)");
  app.add_flag("--expect-violation", c.expect_violation,
               "succeed only if a violation is found (mutation tests); stops at the first");
  app.add_flag("--keep", c.keep, "keep the work dir of passing iterations");
  app.add_flag("--keep-crash-state", c.keep_crash,
               "copy the data file and the journal as the crash left them (before any "
               "recovery) into the iteration's directory");
  app.add_flag("-v,--verbose", c.verbose, "print every iteration");
  app.add_flag("--replayable", c.replayable,
               "make every event of an iteration follow from the seed, so that a violation "
               "replays bit for bit (in-process classes only, --dfs local; docs/chaos.md, "
               "\"Replayable runs\")");
  app.add_option("--jobs", c.jobs,
                 "run N lanes at once, each a process with its own work dir, disks and "
                 "workers, sharing out the iterations (docs/chaos.md, \"Lanes\")")
      ->check(CLI::Range(1, 64));
  std::string lane;
  app.add_option("--lane", lane, "(internal) K/N: run as lane K of N")->group("");
  app.add_option("--lane-report", c.lane_report, "(internal) the lane's report file")->group("");
  c.faults_arg = chaos::kDefaultFaults;
  CLI11_PARSE(app, argc, argv);
  {
    std::error_code ec;
    std::filesystem::path self = std::filesystem::canonical("/proc/self/exe", ec);
    if (!ec) c.self = self.string();
  }
  if (!have_seed) {
    c.seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) %
             1000000007ull;
  }
  for (absl::string_view f : absl::StrSplit(c.faults_arg, ',', absl::SkipEmpty())) {
    if (chaos::FaultRegistry::Find(std::string(f)) == nullptr) {
      std::fprintf(stderr, "umap-chaos: --faults: unknown class '%s'\n", std::string(f).c_str());
      return 2;
    }
    const chaos::FaultClassInfo* info = chaos::FaultRegistry::Find(std::string(f));
    if (c.replayable && !info->replayable) {
      std::fprintf(stderr,
                   "umap-chaos: --replayable: fault class '%s' is a real fault whose "
                   "timing no seed decides\n",
                   std::string(f).c_str());
      return 2;
    }
    c.faults.emplace_back(f);
  }
  if (c.replayable && c.dfs != "local") {
    std::fprintf(stderr, "umap-chaos: --replayable needs --dfs local\n");
    return 2;
  }
  if (c.faults.empty()) {
    std::fprintf(stderr, "umap-chaos: --faults is empty\n");
    return 2;
  }
  if (!lane.empty()) {
    std::vector<std::string> kn = absl::StrSplit(lane, '/');
    if (kn.size() != 2 || !absl::SimpleAtoi(kn[0], &c.lane) || !absl::SimpleAtoi(kn[1], &c.lanes) ||
        c.lanes < 1 || c.lane < 0 || c.lane >= c.lanes || c.lane_report.empty()) {
      std::fprintf(stderr,
                   "umap-chaos: --lane %s: expected K/N with 0 <= K < N, and "
                   "--lane-report\n",
                   lane.c_str());
      return 2;
    }
  }
  if (c.iterations == 0 && c.duration == "0" && c.only_iteration < 0) c.iterations = 20;
  std::signal(SIGPIPE, SIG_IGN);
  return chaos::RunChaos(c);
}
