// umap-bench --procs N: N processes on one file in one memory cgroup, their results added
// up (multi_process.h).
#include "bench/multi_process.h"

#include <sys/wait.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/human.h"
#include "bench/run_json.h"

namespace umap_bench {
namespace {

// Added to the seed per process; process 0 draws what a one-process run draws.
constexpr uint64_t kSeedStep = 0x2545f4914f6cdd1dull;

// The figures of the group that are the sum of the processes' (the file's page cache is
// shared: its largest figure is taken, not the sum; the cgroup's figures are the group's).
constexpr uint64_t RunResult::*kSummed[] = {
    &RunResult::ops,
    &RunResult::faults,
    &RunResult::major_faults,
    &RunResult::process_faults,
    &RunResult::voluntary_switches,
    &RunResult::involuntary_switches,
    &RunResult::misses,
    &RunResult::umap_faults_missing,
    &RunResult::umap_cache_used,
    &RunResult::umap_cache_peak,
    &RunResult::umap_cache_limit,
    &RunResult::umap_cache_capacity,
    &RunResult::umap_cache_virtual,
    &RunResult::umap_cache_ceiling,
    &RunResult::umap_remisses,
    &RunResult::umap_blocks_read,
    &RunResult::umap_blocks_written,
    &RunResult::umap_evictions,
    &RunResult::umap_dirty_evictions,
    &RunResult::umap_io_errors,
    &RunResult::umap_sigbus,
    &RunResult::umap_io_reads,
    &RunResult::umap_io_bytes,
    &RunResult::umap_io_writes,
    &RunResult::umap_io_write_bytes,
    &RunResult::umap_prefetched,
    &RunResult::peak_rss,
    &RunResult::read_checks,
};

std::vector<ChildRun> SplitRun(const ChildRun& run) {
  const unsigned n = run.workload.procs;
  std::vector<ChildRun> runs(n, run);
  for (unsigned p = 0; p < n; ++p) {
    runs[p].workload.ops_per_thread = OpsOfProcess(run.workload.ops_per_thread, n, p);
    runs[p].workload.seed = run.workload.seed + p * kSeedStep;
  }
  return runs;
}

RunResult Total(const std::vector<ChildOutcome>& outs, const Workload& w) {
  const RunResult& first = outs.front().result;
  RunResult t;
  t.backend = first.backend;
  t.workload = first.workload;
  t.threads = first.threads;
  t.repeat = first.repeat;
  t.cgroup_limit = first.cgroup_limit;
  t.cgroup_peak = first.cgroup_peak;
  t.cgroup_limit_hits = first.cgroup_limit_hits;
  t.oom_kills = first.oom_kills;
  t.verified = true;
  t.misses_counted = true;
  for (const ChildOutcome& o : outs) {
    const RunResult& r = o.result;
    for (uint64_t RunResult::*f : kSummed) t.*f += r.*f;
    t.cpu_s += r.cpu_s;
    t.file_cached_bytes = std::max(t.file_cached_bytes, r.file_cached_bytes);
    t.misses_counted &= r.misses_counted;
    t.capped |= r.capped;
    t.verified &= r.verified;
    if (!r.error.empty()) {
      absl::StrAppend(&t.error, t.error.empty() ? "" : "; ", "process ", r.process, ": ", r.error);
    }
  }
  t.wall_s = outs.front().group_wall_s;
  t.ops_per_s = t.wall_s > 0 ? static_cast<double>(t.ops) / t.wall_s : 0;
  t.mb_per_s = t.ops_per_s * static_cast<double>(w.op_size) / 1e6;
  return t;
}

// Every process a signal ended, with the signal; "" when none.
std::string Killed(const std::vector<ChildOutcome>& outs) {
  std::string k;
  for (const ChildOutcome& o : outs) {
    if (!WIFSIGNALED(o.wait_status)) continue;
    absl::StrAppend(&k, k.empty() ? "" : "; ", "process ", o.result.process, " of ", outs.size(),
                    " (pid ", o.pid, ") ", HowItEnded(o.wait_status),
                    o.oom_killed ? ", OOM-killed at the memory limit" : "");
  }
  return k;
}

// `object` (a JSON object) with `fields` ("\"k\":v,...") added at its end.
std::string WithFields(std::string object, const std::string& fields) {
  if (!object.empty() && object.back() == '}') object.pop_back();
  return absl::StrCat(object, object.size() > 1 ? "," : "", fields, "}");
}

std::string Json(const SameFileOutcome& o, const ChildRun& run) {
  std::string per;
  for (const ChildOutcome& c : o.processes) {
    const int sig = WIFSIGNALED(c.wait_status) ? WTERMSIG(c.wait_status) : 0;
    absl::StrAppend(&per, per.empty() ? "" : ",",
                    WithFields(c.json, absl::StrFormat("\"pid\":%d,\"ended\":\"%s\",\"signal\":%d,"
                                                       "\"oom_killed\":%s",
                                                       c.pid, HowItEnded(c.wait_status), sig,
                                                       c.oom_killed ? "true" : "false")));
  }
  const std::string total = ToJson(o.total, run.workload, run.config, *run.file, run.label);
  return WithFields(total,
                    absl::StrCat("\"procs\":", o.processes.size(), ",\"per_process\":[", per, "]"));
}

}  // namespace

uint64_t OpsOfProcess(uint64_t ops, unsigned procs, unsigned p) {
  return ops / procs + (p < ops % procs ? 1 : 0);
}

absl::StatusOr<SameFileOutcome> RunSameFile(const std::string& parent, const std::string& name,
                                            uint64_t limit_bytes, const ChildRun& run) {
  SameFileOutcome o;
  ASSIGN_OR_RETURN(o.processes, RunInMemoryCgroup(parent, name, limit_bytes, SplitRun(run)));
  o.total = Total(o.processes, run.workload);
  o.killed = Killed(o.processes);
  // OOM only when every process a signal ended was the OOM killer's (else a plain failure).
  bool other_signal = false;
  for (const ChildOutcome& c : o.processes) {
    o.oom_killed |= c.oom_killed;
    other_signal |= WIFSIGNALED(c.wait_status) && !c.oom_killed;
  }
  o.oom_killed &= !other_signal;
  if (!o.killed.empty()) o.total.verified = false;
  o.json = Json(o, run);
  return o;
}

std::string ProcessLines(const SameFileOutcome& o) {
  std::string out;
  for (const ChildOutcome& c : o.processes) {
    const RunResult& r = c.result;
    absl::StrAppendFormat(&out,
                          "    process %u/%u (pid %d): %u ops in %.2f s, %s ops/s, CPU %.2f s, "
                          "peak RSS %s, %s%s%s\n",
                          r.process, o.processes.size(), c.pid, r.ops, r.wall_s,
                          HumanCount(r.ops_per_s), r.cpu_s, HumanBytes(r.peak_rss),
                          HowItEnded(c.wait_status), r.error.empty() ? "" : ": ", r.error);
  }
  return out;
}

}  // namespace umap_bench
