// umap-demo: the README's `make demo`. A matrix of doubles 4x larger than the memory budget,
// read and written by several threads through umap and through mmap (with default advice and
// with the advice that fits the access) on the same file, each backend alone in a memory
// cgroup with the same limit, every byte checked; then a table and a verdict that says which
// regime was measured and what to conclude. Exit 0 only if every check passed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "bench/budget.h"
#include "bench/cgroup_runner.h"
#include "bench/human.h"
#include "bench/memory_cgroup.h"
#include "bench/report.h"
#include "bench/run_json.h"
#include "bench/workload.h"
#include "umap/umap.hpp"

namespace umap_bench {
namespace {

constexpr uint64_t kColumns = 512;  // one 4 KiB row of doubles per op

struct DemoFlags {
  std::string dir = "/var/tmp/umap-demo";
  uint64_t size = 512ull << 20;
  uint64_t memory_limit = 128ull << 20;
  std::string cache = "lazy";
  std::string cgroup_parent;
  unsigned threads = 4;
  uint64_t ops = 5000;
  int repeats = 3;
  double max_seconds = 5;
  bool keep = false;
  std::string json;
};

// One phase of the demo: a workload and the backends it compares (umap first).
struct Phase {
  const char* name;
  Workload w;
  std::vector<std::string> backends;
  std::vector<RunResult> runs;  // every repeat of every backend
};

// How the runs are made: each in its own memory cgroup, or (no cgroup here) in-process.
struct Regime {
  uint64_t limit = 0;  // 0: no memory limit could be set
  std::string parent;  // cgroup parent directory
  std::string why_no_limit;
  std::string cache_how;     // how umap's cache was chosen
  uint64_t cache_bytes = 0;  // what it came to (0: lazy sizing, the runtime's choice)
  bool lazy = false;
};

std::vector<Phase> Phases(const DemoFlags& f) {
  Workload base;
  base.op_size = kColumns * sizeof(double);
  base.threads = f.threads;
  base.read_check = ReadCheck::kAll;
  std::vector<Phase> phases;
  Workload w = base;
  w.pattern = Pattern::kRandom;
  w.access = Access::kRead;
  w.ops_per_thread = f.ops;
  phases.push_back({"random row reads", w, {"umap", "mmap", "mmap+random"}, {}});
  w.pattern = Pattern::kSequential;
  w.ops_per_thread = f.size / base.op_size / f.threads;  // the whole matrix once
  phases.push_back({"sequential scan", w, {"umap", "mmap", "mmap+seq"}, {}});
  w.pattern = Pattern::kRandom;
  w.access = Access::kWrite;
  w.ops_per_thread = f.ops / 2;
  w.sync_every = 100;
  phases.push_back({"random row writes", w, {"umap", "mmap"}, {}});
  return phases;
}

// umap's documented defaults (and UMAP_* environment), with the demo's cache choice.
absl::StatusOr<RunConfig> DemoConfig(const DemoFlags& f, Regime& regime) {
  ASSIGN_OR_RETURN(umap_config defaults, Umap::Runtime::DefaultConfig());
  RunConfig rc;
  BackendOptions& bo = rc.options;
  bo.block_size = defaults.block_size;
  bo.handler_threads = defaults.handler_threads;
  bo.writeback_threads = defaults.writeback_threads;
  bo.policy = defaults.policy;
  bo.journal_mode = defaults.journal_mode;
  bo.journal_dir = defaults.journal_dir ? defaults.journal_dir : "";
  rc.stall_seconds = 120;
  rc.max_seconds = f.max_seconds;
  if (f.cache == "lazy") {
    bo.cache_bytes = defaults.cache_bytes;  // 0 unless UMAP_CACHE_BYTES: a hard cap
    regime.lazy = true;
    regime.cache_how = defaults.cache_bytes == 0
                           ? "lazy sizing: the runtime sizes its cache within the budget"
                           : "lazy sizing under UMAP_CACHE_BYTES";
  } else if (f.cache != "auto") {
    ASSIGN_OR_RETURN(bo.cache_bytes, ParseBytes(f.cache));
    regime.cache_how = "--cache";
  } else if (regime.limit > 0) {
    const CacheFit fit = FitCacheToBudget(regime.limit, defaults, f.threads);  // it writes
    if (fit.cache_bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory-limit leaves no room for umap's cache (", fit.how, ")"));
    }
    bo.cache_bytes = fit.cache_bytes;
    regime.cache_how = absl::StrCat("fitted to the budget: ", fit.how);
  } else {
    bo.cache_bytes = f.size / 16;
    regime.cache_how = "1/16 of the file (no budget)";
  }
  regime.cache_bytes = bo.cache_bytes;
  return rc;
}

// Finds out whether each backend can get its own memory cgroup here.
Regime ChooseRegime(const DemoFlags& f) {
  Regime r;
  if (f.memory_limit == 0) {
    r.why_no_limit = "--memory-limit 0";
    return r;
  }
  absl::StatusOr<std::string> parent =
      f.cgroup_parent.empty() ? MemoryCgroup::DefaultParent() : f.cgroup_parent;
  if (!parent.ok()) {
    r.why_no_limit = std::string(parent.status().message());
    return r;
  }
  // A throwaway cgroup proves we may make them (root or a delegated parent).
  absl::StatusOr<MemoryCgroup> probe =
      MemoryCgroup::Create(*parent, absl::StrCat("umap-demo-probe-", ::getpid()), f.memory_limit);
  if (!probe.ok()) {
    r.why_no_limit = std::string(probe.status().message());
    return r;
  }
  r.limit = f.memory_limit;
  r.parent = *parent;
  return r;
}

// One run of one backend, in its own cgroup when the regime has a limit.
absl::StatusOr<RunResult> RunOne(const BenchFile& file, const Phase& ph, RunConfig rc,
                                 const Regime& regime, int repeat, uint32_t tag,
                                 const DemoFlags& f) {
  if (regime.limit == 0) {
    ASSIGN_OR_RETURN(RunResult r, RunOnce(file, ph.w, rc, repeat, tag));
    if (!f.json.empty()) {
      if (FILE* out = std::fopen(f.json.c_str(), "a")) {
        std::fprintf(out, "%s\n", ToJson(r, ph.w, rc, file, "demo").c_str());
        std::fclose(out);
      }
    }
    return r;
  }
  ChildRun run{&file, ph.w, rc, repeat, tag, "demo"};
  ASSIGN_OR_RETURN(std::vector<ChildOutcome> outs,
                   RunInMemoryCgroup(regime.parent, absl::StrCat("umap-demo-", ::getpid()),
                                     regime.limit, {run}));
  if (!f.json.empty()) {
    if (FILE* out = std::fopen(f.json.c_str(), "a")) {
      std::fprintf(out, "%s\n", outs.front().json.c_str());
      std::fclose(out);
    }
  }
  return outs.front().result;
}

// Runs every phase, `repeats` times, backends in an order that rotates by repeat.
absl::Status RunPhases(const BenchFile& file, const RunConfig& base, const Regime& regime,
                       const DemoFlags& f, std::vector<Phase>& phases) {
  uint32_t tag = static_cast<uint32_t>(::getpid()) % kMaxTag + 1;
  for (Phase& ph : phases) {
    for (int rep = 0; rep < f.repeats; ++rep) {
      for (size_t i = 0; i < ph.backends.size(); ++i) {
        RunConfig rc = base;
        rc.backend = ph.backends[(i + static_cast<size_t>(rep)) % ph.backends.size()];
        tag = tag % kMaxTag + 1;
        ASSIGN_OR_RETURN(RunResult r, RunOne(file, ph, rc, regime, rep, tag, f));
        std::printf("  %-18s %-12s %9s ops/s %7.1f MB/s %6.2f s%s  %s\n", ph.name,
                    rc.backend.c_str(), HumanCount(r.ops_per_s).c_str(), r.mb_per_s, r.wall_s,
                    r.capped ? " (time cap)" : "",
                    r.verified ? "checked OK" : absl::StrCat("CHECK FAILED: ", r.error).c_str());
        std::fflush(stdout);
        if (!r.verified && r.oom_kills == 0) {
          // A failed check: the file may hold this run's writes; the next run would fail too.
          ASSIGN_OR_RETURN(uint64_t wrong, file.Repair());
          (void)wrong;
        }
        ph.runs.push_back(std::move(r));
      }
    }
  }
  return absl::OkStatus();
}

double GetOpsPerS(const RunResult& r) { return r.ops_per_s; }

// Median of `get` over the verified runs of backend b in a phase.
double MedianOf(const Phase& ph, const std::string& b, double (*get)(const RunResult&)) {
  std::vector<double> v;
  for (const RunResult& r : ph.runs) {
    if (r.backend == b && r.verified) v.push_back(get(r));
  }
  return SpreadOf(std::move(v)).median;
}

// Median over the repeats of umap's ops/s divided by b's in the same repeat; 0 when no
// repeat has both verified.
double RatioToUmap(const Phase& ph, const std::string& b) {
  std::map<int, double> umap;
  for (const RunResult& r : ph.runs) {
    if (r.backend == "umap" && r.verified) umap[r.repeat] = r.ops_per_s;
  }
  std::vector<double> v;
  for (const RunResult& r : ph.runs) {
    auto it = umap.find(r.repeat);
    if (r.backend == b && r.verified && r.ops_per_s > 0 && it != umap.end()) {
      v.push_back(it->second / r.ops_per_s);
    }
  }
  return SpreadOf(std::move(v)).median;
}

bool AnyOom(const Phase& ph, const std::string& b) {
  for (const RunResult& r : ph.runs) {
    if (r.backend == b && !r.verified && r.oom_kills > 0) return true;
  }
  return false;
}

void PrintTable(const std::vector<Phase>& phases, const Regime& regime) {
  std::printf("\n%-18s | %-12s | %9s | %8s | %-14s | %-15s | %s\n", "workload", "via", "ops/s",
              "MB/s", regime.limit ? "cgroup peak" : "peak RSS", "umap cache peak", "umap/this");
  std::printf("%s\n", std::string(104, '-').c_str());
  auto ops = [](const RunResult& r) { return r.ops_per_s; };
  auto mb = [](const RunResult& r) { return r.mb_per_s; };
  auto peak = [](const RunResult& r) {
    return static_cast<double>(r.cgroup_limit ? r.cgroup_peak : r.peak_rss);
  };
  auto cache = [](const RunResult& r) { return static_cast<double>(r.umap_cache_peak); };
  for (const Phase& ph : phases) {
    for (const std::string& b : ph.backends) {
      const bool oom = AnyOom(ph, b);
      const double ratio = b == "umap" ? 0 : RatioToUmap(ph, b);
      std::printf(
          "%-18s | %-12s | %9s | %8.1f | %-14s | %-15s | %s\n", ph.name, b.c_str(),
          oom && MedianOf(ph, b, ops) == 0 ? "OOM" : HumanCount(MedianOf(ph, b, ops)).c_str(),
          MedianOf(ph, b, mb), HumanBytes(MedianOf(ph, b, peak)).c_str(),
          b == "umap" ? HumanBytes(MedianOf(ph, b, cache)).c_str() : "-",
          ratio > 0 ? absl::StrFormat("%.2f", ratio).c_str() : "-");
    }
  }
}

// The cache lazy sizing chose in each phase: the capacity at the end of umap's runs, its
// virtual capacity, and the peak it held (medians over the repeats).
void PrintChosenCapacity(const std::vector<Phase>& phases) {
  auto capacity = [](const RunResult& r) { return static_cast<double>(r.umap_cache_capacity); };
  auto virt = [](const RunResult& r) { return static_cast<double>(r.umap_cache_virtual); };
  auto peak = [](const RunResult& r) { return static_cast<double>(r.umap_cache_peak); };
  std::printf("\numap's cache, as lazy sizing chose it (capacity at the end of the run; virtual "
              "capacity; peak held):\n");
  for (const Phase& ph : phases) {
    std::printf("  %-18s capacity %-10s virtual %-10s peak %s\n", ph.name,
                HumanBytes(MedianOf(ph, "umap", capacity)).c_str(),
                HumanBytes(MedianOf(ph, "umap", virt)).c_str(),
                HumanBytes(MedianOf(ph, "umap", peak)).c_str());
  }
}

// What the numbers say, phase by phase, and what a user should take from them.
std::string Verdict(const std::vector<Phase>& phases, const Regime& regime, const DemoFlags& f,
                    double seconds) {
  std::string v;
  if (regime.limit > 0) {
    absl::StrAppendFormat(&v,
                          "regime: same memory budget: every backend alone in a memory cgroup "
                          "of %s (its process plus its page cache), file %s (%.0fx the budget), "
                          "page cache dropped before every run; umap's cache: %s (%s).\n",
                          HumanBytes(regime.limit), HumanBytes(f.size),
                          static_cast<double>(f.size) / static_cast<double>(regime.limit),
                          HumanBytes(regime.cache_bytes), regime.cache_how);
  } else {
    absl::StrAppendFormat(&v,
                          "regime: NO MEMORY LIMIT (%s): mmap could keep the whole file in "
                          "the page cache while umap kept its bounded cache (%s). This is not "
                          "the regime umap is for; run as root for the same-budget "
                          "comparison.\n",
                          regime.why_no_limit, regime.cache_how);
  }
  // Per phase: umap against each mmap variant; then the same facts grouped by what the
  // user can do (leave mmap as it is, or give it the advice that fits).
  std::vector<std::string> beats_default, loses_default, beats_tuned, loses_tuned;
  for (const Phase& ph : phases) {
    std::vector<std::string> parts;
    for (const std::string& b : ph.backends) {
      if (b == "umap") continue;
      const double ratio = RatioToUmap(ph, b);
      if (ratio <= 0) {
        parts.push_back(absl::StrCat(b, ": no pair of verified runs"));
        continue;
      }
      parts.push_back(absl::StrFormat("%.3gx %s", ratio, b));
      const std::string fact = absl::StrFormat("%s (%.3gx)", ph.name, ratio);
      if (b == "mmap") {
        (ratio >= 1 ? beats_default : loses_default).push_back(fact);
      } else {
        (ratio >= 1 ? beats_tuned : loses_tuned).push_back(fact);
      }
    }
    absl::StrAppend(&v, "  ", ph.name, ": umap ", HumanCount(MedianOf(ph, "umap", GetOpsPerS)),
                    " ops/s = ", absl::StrJoin(parts, ", "),
                    AnyOom(ph, "umap") ? " (umap was OOM-killed in some runs: its memory while "
                                         "writing is not bounded by its cache yet)"
                                       : "",
                    ".\n");
  }
  auto list = [](const std::vector<std::string>& l) { return absl::StrJoin(l, ", "); };
  absl::StrAppend(&v, "conclusion:");
  if (!beats_default.empty()) {
    absl::StrAppend(&v, " against mmap as most programs use it (no madvise), umap is faster for ",
                    list(beats_default), ".");
  }
  if (!loses_default.empty()) {
    absl::StrAppend(&v, " It is slower than that mmap for ", list(loses_default), ".");
  }
  if (!loses_tuned.empty()) {
    absl::StrAppend(&v,
                    " A program that gives mmap the madvise that fits its access is faster "
                    "with plain mmap today: umap reaches only ",
                    list(loses_tuned), " of it.");
  }
  if (!beats_tuned.empty()) {
    absl::StrAppend(&v, " umap beats even the tuned mmap for ", list(beats_tuned), ".");
  }
  absl::StrAppend(&v,
                  " umap's writes go through its journal: every umsync is durable and atomic "
                  "after a crash, which msync is not.",
                  regime.limit ? "" : " Without a memory limit these numbers favour mmap.", "\n");
  absl::StrAppendFormat(&v, "(%d repeat(s) per point, medians; this machine, this run; %.0f s)\n",
                        f.repeats, seconds);
  return v;
}

int Run(const DemoFlags& f) {
  const uint64_t row = kColumns * sizeof(double);
  if (f.size < row * f.threads || f.size % row != 0) {
    std::fprintf(stderr,
                 "umap-demo: --size must be a multiple of %llu bytes (one row), at "
                 "least one row per thread\n",
                 static_cast<unsigned long long>(row));
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(f.dir, ec);
  if (ec) {
    std::fprintf(stderr, "umap-demo: cannot create %s: %s\n", f.dir.c_str(), ec.message().c_str());
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  Regime regime = ChooseRegime(f);
  absl::StatusOr<RunConfig> rc = DemoConfig(f, regime);
  if (!rc.ok()) {
    std::fprintf(stderr, "umap-demo: %s\n", rc.status().ToString().c_str());
    return 2;
  }
  const std::string path = absl::StrCat(f.dir, "/umap-demo-matrix-", ::getpid(), ".f64");
  std::printf(
      "umap-demo: %llu x %llu matrix of doubles, A[r][c] = r*%llu + c + 1, in %s (%s); "
      "%u threads; %s; umap cache %s (%s)\n",
      static_cast<unsigned long long>(f.size / row), static_cast<unsigned long long>(kColumns),
      static_cast<unsigned long long>(kColumns), path.c_str(), HumanBytes(f.size).c_str(),
      f.threads,
      regime.limit
          ? absl::StrCat("every backend in a memory cgroup of ", HumanBytes(regime.limit)).c_str()
          : absl::StrCat("no memory limit (", regime.why_no_limit, ")").c_str(),
      regime.lazy && rc->options.cache_bytes == 0 ? "sized by the runtime"
                                                  : HumanBytes(rc->options.cache_bytes).c_str(),
      regime.cache_how.c_str());
  std::fflush(stdout);
  absl::StatusOr<BenchFile> file = BenchFile::Open(path, f.size);
  if (!file.ok()) {
    std::fprintf(stderr, "umap-demo: %s\n", file.status().ToString().c_str());
    return 2;
  }
  std::printf("wrote the matrix in %.1f s\n", file->fill_seconds());
  std::vector<Phase> phases = Phases(f);
  absl::Status s = RunPhases(*file, *rc, regime, f, phases);
  if (!f.keep) std::remove(path.c_str());
  if (!s.ok()) {
    std::fprintf(stderr, "umap-demo: %s\n", s.ToString().c_str());
    return 1;
  }
  PrintTable(phases, regime);
  if (regime.lazy) PrintChosenCapacity(phases);
  std::vector<std::string> problems;
  for (const Phase& ph : phases) {
    for (const RunResult& r : ph.runs) {
      if (!r.verified && r.oom_kills == 0) {
        problems.push_back(absl::StrCat(ph.name, " through ", r.backend, ": ", r.error));
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!problems.empty()) {
    std::printf("\nverdict: FAIL: %zu check(s) failed: %s\n", problems.size(),
                problems.front().c_str());
    return 1;
  }
  std::printf(
      "\nverdict: PASS: every row read was checked and the whole file verified after "
      "each write run.\n%s",
      Verdict(phases, regime, f, seconds).c_str());
  return 0;
}

int Main(int argc, char** argv) {
  DemoFlags f;
  CLI::App app{
      "umap-demo: random row reads, a sequential scan and random row writes (with a sync every "
      "100) on a matrix of doubles 4x larger than the memory budget, through umap and mmap on "
      "the same file, each backend alone in a memory cgroup of the same limit; every byte is "
      "checked. Exit 0 only if all checks pass."};
  app.option_defaults()->always_capture_default();
  app.add_option("--dir", f.dir, "directory for the matrix file (local disk or a DFS mount)");
  app.add_option("--size", f.size, "matrix file bytes (K/M/G suffixes)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--memory-limit", f.memory_limit,
                 "the memory budget of every backend (a memory cgroup; 0: none)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--cache", f.cache,
                 "umap cache: lazy (the runtime sizes it itself: lazy sizing, the default), "
                 "auto (a fixed cache fitted to the budget) or bytes (a fixed cache)");
  app.add_option("--cgroup-parent", f.cgroup_parent, "where the memory cgroups are made");
  app.add_option("--threads", f.threads, "application threads")->check(CLI::Range(1, 16));
  app.add_option("--ops", f.ops, "random reads per thread (writes: half)")
      ->check(CLI::PositiveNumber);
  app.add_option("--repeats", f.repeats, "runs per backend and workload")->check(CLI::Range(1, 9));
  app.add_option("--max-seconds", f.max_seconds, "stop a run after this long (0: never)");
  app.add_flag("--keep", f.keep, "keep the matrix file");
  app.add_option("--json", f.json, "append one JSON object per run to this file");
  CLI11_PARSE(app, argc, argv);
  return Run(f);
}

}  // namespace
}  // namespace umap_bench

int main(int argc, char** argv) {
  try {
    return umap_bench::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "umap-demo: %s\n", e.what());
    return 2;
  }
}
