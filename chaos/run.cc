#include "chaos/run.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "chaos/capability.h"
#include "chaos/harness.h"
#include "chaos/lanes.h"
#include "chaos/run_context.h"
#include "chaos/system.h"

namespace chaos {
namespace {

using Clock = std::chrono::steady_clock;

void SkipEveryClass(const Config& c, Tally& tally, const std::string& why) {
  for (const std::string& f : c.faults) {
    tally.of(f).skip_reason = why;
    tally.of(f).skipped++;
  }
}

// The set-up every lane needs before its first iteration: a userfaultfd for the worker,
// the GlusterFS testbed when asked. Returns -1 to go on, else the exit code (skips are
// recorded in the tally and go on with no iteration).
int SetUp(const Config& c, RunContext& run, bool* run_iterations) {
  *run_iterations = true;
  if (absl::Status s = run.Require({"userfaultfd"}); IsMissingCapability(s)) {
    std::printf("umap-chaos: the worker cannot run here: %s; every class is skipped\n",
                std::string(s.message()).c_str());
    SkipEveryClass(c, run.tally(), std::string(s.message()));
    *run_iterations = false;
    return -1;
  } else if (!s.ok()) {
    std::printf("FAIL: probing for a userfaultfd failed (a harness failure): %s\n",
                s.ToString().c_str());
    return 3;
  }
  if (c.dfs != "gluster") return -1;
  if (absl::Status s = run.StartGluster(); IsMissingCapability(s)) {
    std::printf(
        "umap-chaos: GlusterFS cannot run here: %s; every class runs on the local "
        "data dir instead and the run counts as skipped\n",
        std::string(s.message()).c_str());
    SkipEveryClass(c, run.tally(), std::string(s.message()));
  } else if (!s.ok()) {
    std::printf(
        "FAIL: the GlusterFS testbed did not start (a harness failure, not a skip): "
        "%s\n",
        std::string(s.message()).c_str());
    return 3;
  }
  return -1;
}

void PrintIteration(const Config& c, const IterationRecord& rec) {
  const char* verdict = rec.skipped ? "SKIP" : rec.violations.empty() ? "ok" : "VIOLATION";
  if (c.verbose || !rec.violations.empty() || rec.skipped) {
    std::printf("[%d] %s %s: %s (%.1f s) %s\n", rec.index, rec.cls.c_str(), rec.policy.c_str(),
                rec.what.c_str(), rec.seconds, verdict);
  }
  for (const Violation& v : rec.violations) {
    std::printf("  VIOLATION %s: %s\n  reproduce: %s\n", v.invariant.c_str(), v.detail.c_str(),
                Repro(c, rec.index).c_str());
  }
  std::fflush(stdout);
}

// The iterations the options select: --iteration I alone, else this lane's share of
// 0, 1, 2, ... until --iterations or --duration; --expect-violation stops at the first
// violation of an invariant.
std::vector<IterationRecord> RunIterations(const Config& c, uint64_t budget, Harness& harness) {
  std::vector<IterationRecord> records;
  const auto t0 = Clock::now();
  const int first = c.only_iteration >= 0 ? c.only_iteration : c.lane;
  const int step = c.only_iteration >= 0 ? 1 : c.lanes;
  for (int index = first;; index += step) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if (c.only_iteration >= 0 && index > c.only_iteration) break;
    if (c.only_iteration < 0) {
      if (c.iterations > 0 && index >= c.iterations) break;
      if (budget > 0 && elapsed >= budget) break;
      if (c.iterations == 0 && budget == 0) break;
    }
    IterationRecord rec = harness.RunIteration(index);
    PrintIteration(c, rec);
    const bool caught = std::any_of(rec.violations.begin(), rec.violations.end(),
                                    [](const Violation& v) { return !IsHarnessError(v); });
    records.push_back(std::move(rec));
    if (c.expect_violation && caught) break;
  }
  return records;
}

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
    std::printf(
        "FAIL: %zu harness errors (above): the harness could not do its job; not a "
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

}  // namespace

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

RunOutcome RunLane(const Config& c, uint64_t budget) {
  RunOutcome out;
  RunContext run(c, c.work_dir);
  bool run_iterations = true;
  out.exit_code = SetUp(c, run, &run_iterations);
  if (out.exit_code < 0 && run_iterations) {
    const auto t0 = Clock::now();
    {
      Harness harness(run);
      out.records = RunIterations(c, budget, harness);
      run.StopGluster();
    }  // the classes unmount their disks before the work dir is removed
    out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  run.StopGluster();
  out.tally = run.tally();
  return out;
}

std::vector<ViolationRecord> ViolationsOf(const Config& c,
                                          const std::vector<IterationRecord>& records) {
  std::vector<ViolationRecord> out;
  for (const IterationRecord& rec : records) {
    for (const Violation& v : rec.violations) {
      out.push_back({rec.index, rec.cls, v, Repro(c, rec.index), rec.dir});
    }
  }
  return out;
}

int FinishRun(const Config& c, RunOutcome& o) {
  if (o.exit_code >= 0) return o.exit_code;
  const std::vector<ViolationRecord> violations = ViolationsOf(c, o.records);
  for (const std::string& f : c.faults) o.tally.of(f);  // every class gets a row
  PrintSummary(c, o.tally, o.records.size(), violations.size(), o.seconds);
  WriteReports(c, o.tally, o.records, violations, o.seconds);
  if (violations.empty() && !c.keep) RemoveTree(c.work_dir).IgnoreError();
  return Verdict(c, o.tally, violations);
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
  if (!c.lane_report.empty()) return RunLaneProcess(c, budget);
  std::printf("umap-chaos: seed %llu, faults %s, dfs %s%s, work dir %s%s\n",
              static_cast<unsigned long long>(c.seed), c.faults_arg.c_str(), c.dfs.c_str(),
              c.mutation.empty() ? "" : (", MUTATION " + c.mutation).c_str(), c.work_dir.c_str(),
              c.jobs > 1 ? absl::StrCat(", ", c.jobs, " lanes").c_str() : "");
  std::fflush(stdout);
  RunOutcome outcome =
      c.jobs > 1 && c.only_iteration < 0 ? RunLanes(c, budget) : RunLane(c, budget);
  return FinishRun(c, outcome);
}

}  // namespace chaos
