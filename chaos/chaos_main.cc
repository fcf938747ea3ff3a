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
#include "chaos/harness.h"
#include "chaos/report.h"
#include "chaos/run_context.h"
#include "chaos/system.h"

namespace chaos {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kDefaultFaults = "kill,reboot,timeout,enospc,eio,torn";

// Seconds in "N", "Ns", "Nm" or "Nh"; ~0 when malformed.
uint64_t ParseDuration(const std::string& s) {
  if (s.empty()) return 0;
  uint64_t n = 0;
  std::string num = s, unit = "s";
  if (!std::isdigit(static_cast<unsigned char>(s.back()))) {
    num = s.substr(0, s.size() - 1);
    unit = s.substr(s.size() - 1);
  }
  if (!absl::SimpleAtoi(num, &n)) return ~0ull;
  if (unit == "s") return n;
  if (unit == "m") return n * 60;
  if (unit == "h") return n * 3600;
  return ~0ull;
}

// Runs the iterations the options select, prints each that is verbose, violated or skipped;
// returns the records and fills *violations.
std::vector<IterationRecord> RunIterations(const Config& c, uint64_t budget, Harness& harness,
                                           std::vector<ViolationRecord>* violations) {
  std::vector<IterationRecord> records;
  const auto t0 = Clock::now();
  for (int index = c.only_iteration >= 0 ? c.only_iteration : 0;; ++index) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if (c.only_iteration >= 0 && index > c.only_iteration) break;
    if (c.only_iteration < 0) {
      if (c.iterations > 0 && index >= c.iterations) break;
      if (budget > 0 && elapsed >= budget) break;
      if (c.iterations == 0 && budget == 0) break;
    }
    IterationRecord rec = harness.RunIteration(index);
    const char* verdict = rec.skipped ? "SKIP" : rec.violations.empty() ? "ok" : "VIOLATION";
    if (c.verbose || !rec.violations.empty() || rec.skipped) {
      std::printf("[%d] %s %s: %s (%.1f s) %s\n", index, rec.cls.c_str(), rec.policy.c_str(),
                  rec.what.c_str(), rec.seconds, verdict);
    }
    for (const Violation& v : rec.violations) {
      std::printf("  VIOLATION %s: %s\n  reproduce: %s\n", v.invariant.c_str(), v.detail.c_str(),
                  Repro(c, index).c_str());
      violations->push_back({index, rec.cls, v, Repro(c, index), rec.dir});
    }
    std::fflush(stdout);
    const bool caught = std::any_of(rec.violations.begin(), rec.violations.end(),
                                    [](const Violation& v) { return !IsHarnessError(v); });
    records.push_back(std::move(rec));
    if (c.expect_violation && caught) break;
  }
  return records;
}

// The exit code of a run: 0 passed; 1 violations of an invariant (or --expect-violation
// unmet); 3 the harness failed (it could not set up or drive a run: its own bug or a
// broken machine, never a verdict on Umap and never a skip); 77 a requested class was
// skipped for a missing capability, and nothing failed.
int Verdict(const Config& c, const Tally& tally, const std::vector<ViolationRecord>& all) {
  std::vector<ViolationRecord> violations;
  size_t harness_errors = 0;
  for (const ViolationRecord& v : all) {
    if (IsHarnessError(v.v)) {
      ++harness_errors;
    } else {
      violations.push_back(v);
    }
  }
  if (!violations.empty() && !c.expect_violation) {
    std::printf("FAIL: %zu violations; reproduce each with the command printed above\n",
                violations.size());
    return 1;
  }
  if (harness_errors > 0) {
    std::printf("FAIL: %zu harness errors (above): the harness could not do its job; not a "
                "verdict on Umap, and not a skip\n",
                harness_errors);
    return 3;
  }
  if (c.expect_violation) {
    if (violations.empty()) {
      std::printf("FAIL: --expect-violation: the suite did not catch%s within the run\n",
                  c.mutation.empty() ? " anything" : (" mutation " + c.mutation).c_str());
      return 1;
    }
    std::printf("PASS: caught %s (first: %s)\n",
                c.mutation.empty() ? "a violation" : ("mutation " + c.mutation).c_str(),
                violations.front().v.invariant.c_str());
    return 0;
  }
  for (const std::string& f : c.faults) {
    auto it = tally.classes().find(f);
    if (it != tally.classes().end() && it->second.skipped > 0) {
      std::printf("SKIPPED: a requested fault class could not run (see above); not a pass\n");
      return 77;
    }
  }
  return 0;
}

int RunChaos(Config c) {
  const uint64_t budget = ParseDuration(c.duration);
  if (budget == ~0ull) {
    std::fprintf(stderr, "umap-chaos: --duration %s: expected N, Ns, Nm or Nh\n",
                 c.duration.c_str());
    return 2;
  }
  if (c.work_dir.empty()) c.work_dir = absl::StrCat("/var/tmp/umap-chaos-", ::getpid());
  if (absl::Status s = MakeDirs(c.work_dir); !s.ok()) {
    std::fprintf(stderr, "umap-chaos: work dir: %s\n", s.ToString().c_str());
    return 3;
  }
  std::printf("umap-chaos: seed %llu, faults %s, dfs %s%s, work dir %s\n",
              static_cast<unsigned long long>(c.seed), c.faults_arg.c_str(), c.dfs.c_str(),
              c.mutation.empty() ? "" : (", MUTATION " + c.mutation).c_str(), c.work_dir.c_str());
  std::fflush(stdout);
  RunContext run(c, c.work_dir);
  // Every class runs the worker, and the worker needs a userfaultfd.
  if (absl::Status s = run.Require({"userfaultfd"}); IsMissingCapability(s)) {
    std::printf("umap-chaos: the worker cannot run here: %s; every class is skipped\n",
                std::string(s.message()).c_str());
    for (const std::string& f : c.faults) {
      run.tally().of(f).skip_reason = std::string(s.message());
      run.tally().of(f).skipped++;
    }
    PrintSummary(c, run.tally(), 0, 0, 0);
    RemoveTree(c.work_dir).IgnoreError();  // nothing ran
    return Verdict(c, run.tally(), {});
  } else if (!s.ok()) {
    std::printf("FAIL: probing for a userfaultfd failed (a harness failure): %s\n",
                s.ToString().c_str());
    return 3;
  }
  if (c.dfs == "gluster") {
    if (absl::Status s = run.StartGluster(); IsMissingCapability(s)) {
      std::printf("umap-chaos: GlusterFS cannot run here: %s; every class runs on the local "
                  "data dir instead and the run counts as skipped\n",
                  std::string(s.message()).c_str());
      for (const std::string& f : c.faults) {
        run.tally().of(f).skip_reason = std::string(s.message());
        run.tally().of(f).skipped++;
      }
    } else if (!s.ok()) {
      std::printf("FAIL: the GlusterFS testbed did not start (a harness failure, not a skip): "
                  "%s\n",
                  std::string(s.message()).c_str());
      return 3;
    }
  }
  const auto t0 = Clock::now();
  std::vector<ViolationRecord> violations;
  std::vector<IterationRecord> records;
  {
    Harness harness(run);
    records = RunIterations(c, budget, harness, &violations);
    run.StopGluster();
  }  // the classes unmount their disks before the work dir is removed
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (const std::string& f : c.faults) run.tally().of(f);  // every class gets a row
  PrintSummary(c, run.tally(), records.size(), violations.size(), seconds);
  WriteReports(c, run.tally(), records, violations, seconds);
  if (violations.empty() && !c.keep) RemoveTree(c.work_dir).IgnoreError();
  return Verdict(c, run.tally(), violations);
}

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
    c.faults.emplace_back(f);
  }
  if (c.faults.empty()) {
    std::fprintf(stderr, "umap-chaos: --faults is empty\n");
    return 2;
  }
  if (c.iterations == 0 && c.duration == "0" && c.only_iteration < 0) c.iterations = 20;
  std::signal(SIGPIPE, SIG_IGN);
  return chaos::RunChaos(c);
}
