#include "bench/bench_flags.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "bench/backend.h"
#include "bench/budget.h"
#include "bench/human.h"
#include "umap/umap.hpp"

namespace umap_bench {
namespace {

template <typename T, typename F>
absl::StatusOr<std::vector<T>> ParseList(const std::string& s, const char* what, F parse) {
  std::vector<T> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    auto v = parse(std::string(part));
    if (!v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--", what, ": ", v.status().message()));
    }
    out.push_back(*v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", what, " is empty"));
  return out;
}

absl::StatusOr<unsigned> ParseThreads(const std::string& s) {
  unsigned v = 0;
  if (!absl::SimpleAtoi(s, &v) || v < 1 || v > 16) {
    return absl::InvalidArgumentError(absl::StrCat("'", s, "' is not a thread count in 1..16"));
  }
  return v;
}
absl::StatusOr<double> ParseLocality(const std::string& s) {
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || v < 0 || v > 1) {
    return absl::InvalidArgumentError(absl::StrCat("'", s, "' is not a locality in [0,1]"));
  }
  return v;
}
absl::StatusOr<std::vector<Workload>> ExpandWorkloads(const Flags& f) {
  ASSIGN_OR_RETURN(auto patterns, ParseList<Pattern>(f.patterns, "pattern", ParsePattern));
  ASSIGN_OR_RETURN(auto accesses, ParseList<Access>(f.accesses, "access", ParseAccess));
  ASSIGN_OR_RETURN(auto localities, ParseList<double>(f.localities, "locality", ParseLocality));
  if (f.check_reads != "ends" && f.check_reads != "all") {
    return absl::InvalidArgumentError("--check-reads must be ends or all");
  }
  std::vector<Workload> workloads;
  for (Pattern p : patterns) {
    for (Access a : accesses) {
      for (double l : localities) {
        if (p != Pattern::kRandom && l != localities.front()) continue;  // L is random-only
        Workload w;
        w.pattern = p;
        w.access = a;
        w.locality = p == Pattern::kRandom ? l : 0;
        w.op_size = f.op_size;
        w.stride_items = f.stride;
        w.write_fraction = f.write_fraction;
        w.working_set = f.working_set;
        w.ops_per_thread = f.ops;
        w.sync_every = f.sync_every;
        w.read_check = f.check_reads == "all" ? ReadCheck::kAll : ReadCheck::kEnds;
        w.seed = f.seed;
        w.processes = f.processes;
        w.procs = f.procs;
        workloads.push_back(w);
      }
    }
  }
  return workloads;
}

// umap's cache: --cache, or "auto": 64 MiB, or with a memory limit fitted to the budget
// (m.workloads and m.threads are set).
absl::Status ChooseCache(const Flags& f, Matrix& m) {
  BackendOptions& o = m.config.options;
  if (f.cache != "auto") {
    ASSIGN_OR_RETURN(o.cache_bytes, ParseBytes(f.cache));
    m.cache_how = "--cache";
    return absl::OkStatus();
  }
  if (f.memory_limit == 0) {
    o.cache_bytes = uint64_t{64} << 20;
    m.cache_how = "default";
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(umap_config cfg, Umap::Runtime::DefaultConfig());
  cfg.handler_threads = o.handler_threads;
  cfg.block_size = o.block_size;
  // One cache for the whole matrix: fitted for its most demanding cell, the most threads
  // of any workload that writes.
  unsigned writers = 0;
  for (const Workload& w : m.workloads) {
    if (w.writes()) writers = *std::max_element(m.threads.begin(), m.threads.end());
  }
  // --procs N: N processes share the cgroup, each with its own runtime and cache, so each
  // is fitted to its 1/N share of the budget.
  const CacheFit fit = FitCacheToBudget(f.memory_limit / f.procs, cfg, writers);
  o.cache_bytes = fit.cache_bytes;  // 0: no room; an error if plain "umap" runs
  m.cache_how = f.procs > 1
                    ? absl::StrCat("fitted per process to 1/", f.procs, " of the budget: ", fit.how)
                    : absl::StrCat("fitted: ", fit.how);
  return absl::OkStatus();
}

// --procs N > 1: read runs only (each process verifies and restores only its own writes),
// one shared cgroup, at least one op per process, and the runtime's own journal per process.
absl::Status CheckProcs(const Flags& f, const std::vector<Workload>& workloads) {
  if (f.procs <= 1) return absl::OkStatus();
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--procs: ", why));
  };
  if (f.memory_limit == 0) return bad("needs --memory-limit (one shared cgroup)");
  if (f.processes > 1) return bad("cannot be combined with --processes (each on its own file)");
  if (!f.journal_dir.empty()) {
    return bad("cannot be combined with --journal-dir (every process needs its own journal)");
  }
  if (f.ops < f.procs) return bad(absl::StrCat("--ops ", f.ops, " gives a process no op"));
  for (const Workload& w : workloads) {
    if (w.writes()) return bad("only with --access read (the processes share one file)");
  }
  return absl::OkStatus();
}

}  // namespace

std::string Title(const Workload& w) {
  std::string t = absl::StrCat(PatternName(w.pattern), " ");
  switch (w.access) {
    case Access::kRead:
      t += "reads";
      break;
    case Access::kWrite:
      t += "writes";
      break;
    case Access::kMixed:
      absl::StrAppend(&t, "reads/writes (", std::lround(w.write_fraction * 100), "% writes)");
      break;
  }
  absl::StrAppend(&t, " of ", HumanBytes(w.op_size), ", ", w.ops_per_thread, " ops per thread");
  if (w.pattern == Pattern::kRandom) absl::StrAppend(&t, ", locality L=", w.locality);
  if (w.pattern == Pattern::kStrided) absl::StrAppend(&t, ", stride ", w.stride_items, " ops");
  if (w.pattern == Pattern::kReuse) {
    absl::StrAppend(&t, ", uniform over a working set of ", w.working_set, " of the file");
  }
  if (w.pattern == Pattern::kPhase) {
    absl::StrAppend(&t, ", uniform over ", w.working_set,
                    " of the file for half the ops, then over a quarter of that");
  }
  if (w.writes()) {
    absl::StrAppend(
        &t,
        w.sync_every ? absl::StrCat(", sync every ", w.sync_every, " ops per thread and at the end")
                     : std::string(", one sync at the end"),
        " (timed)");
  }
  if (w.processes > 1) {
    absl::StrAppend(&t, "; ", w.processes,
                    " processes at once in one memory cgroup, each on "
                    "its own file (ops/s: all of them)");
  }
  if (w.procs > 1) {
    absl::StrAppend(&t, "; split among ", w.procs,
                    " processes at once on the same file in one memory cgroup (ops/s: all "
                    "their ops over the wall time from the common start to the last finish)");
  }
  return t;
}

absl::StatusOr<Matrix> BuildMatrix(const Flags& f) {
  Matrix m;
  ASSIGN_OR_RETURN(m.workloads, ExpandWorkloads(f));
  ASSIGN_OR_RETURN(m.threads, ParseList<unsigned>(f.threads, "threads", ParseThreads));
  if (f.processes > 1 && f.memory_limit == 0) {
    return absl::InvalidArgumentError("--processes needs --memory-limit (one shared cgroup)");
  }
  RETURN_IF_ERROR(CheckProcs(f, m.workloads));
  BackendOptions& o = m.config.options;
  ASSIGN_OR_RETURN(o.advice, ParseAdvice(f.madvise));
  ASSIGN_OR_RETURN(o.policy, ParsePolicy(f.policy));
  ASSIGN_OR_RETURN(o.journal_mode, ParseJournalMode(f.journal_mode));
  o.block_size = f.block_size;
  o.handler_threads = f.handlers;
  o.writeback_threads = f.writeback_threads;
  o.journal_dir = f.journal_dir;
  RETURN_IF_ERROR(ChooseCache(f, m));
  for (absl::string_view part : absl::StrSplit(f.backends, ',', absl::SkipEmpty())) {
    const std::string name(part);
    // A name the registry refuses is an argument error now, not a failed run later.
    absl::Status s = NewBackend(name, o).status();
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("--backends: ", s.message()));
    if (name == "umap" && o.cache_bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--memory-limit ", HumanBytes(f.memory_limit), " leaves no room for umap's cache (",
          m.cache_how, "): give a larger limit, --cache, or umap+SIZE"));
    }
    m.backends.push_back(name);
  }
  if (m.backends.empty()) return absl::InvalidArgumentError("--backends is empty");
  m.config.drop_caches = f.drop_caches;
  m.config.stall_seconds = f.stall_seconds;
  m.config.max_seconds = f.max_seconds;
  m.config.TEST_corrupt_word = f.test_corrupt_word;
  return m;
}

void AddFlags(CLI::App& app, Flags& f) {
  app.option_defaults()->always_capture_default();
  auto size_opt = [&](const char* name, uint64_t* v, const char* help) {
    return app.add_option(name, *v, help)->transform(CLI::AsSizeValue(false));
  };
  app.add_option("--file", f.file, "benchmark file; created and filled when missing");
  size_opt("--file-size", &f.file_size, "bytes of the file used (multiple of 4 KiB)");
  app.add_flag("--remove-file", f.remove_file, "delete the file at the end");
  app.add_option("--backends", f.backends,
                 absl::StrCat("comma list of backends: ", absl::StrJoin(BackendHelp(), "; ")));
  app.add_option("--pattern", f.patterns,
                 "comma list of random, sequential, strided, reuse (uniform over the working "
                 "set), phase (the working set shrinks to a quarter halfway)");
  app.add_option("--working-set", f.working_set,
                 "reuse and phase: the working set, a fraction of the file (its start)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--access", f.accesses, "comma list of read, write, mixed");
  app.add_option("--locality", f.localities,
                 "comma list of L in [0,1]: P(next random op is adjacent to the previous)");
  size_opt("--op-size", &f.op_size, "bytes per op (multiple of 8)");
  app.add_option("--stride", f.stride, "strided: distance between ops, in ops");
  app.add_option("--write-fraction", f.write_fraction, "mixed: fraction of ops that write")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--threads", f.threads, "comma list of thread counts (1..16)");
  app.add_option("--ops", f.ops, "ops per thread")->check(CLI::PositiveNumber);
  app.add_option("--sync-every", f.sync_every,
                 "write workloads: umsync/msync/fdatasync every N ops per thread (0: only the "
                 "final one, always timed)");
  app.add_option("--repeats", f.repeats, "runs per point; report median and min–max")
      ->check(CLI::Range(1, 100));
  app.add_option("--cache", f.cache,
                 "umap cache bytes (K/M/G), or auto: 64M, or with --memory-limit fitted to "
                 "the budget (docs/benchmarks.md)");
  size_opt("--block-size", &f.block_size, "umap block size");
  app.add_option("--handlers", f.handlers, "umap fault handler threads");
  app.add_option("--writeback-threads", f.writeback_threads, "umap write-back threads");
  app.add_option("--policy", f.policy,
                 "umap write-back policy: atomic (failure-atomic umsync) or relaxed");
  app.add_option("--journal-mode", f.journal_mode,
                 "umap journal: data, intent or off (off: no crash protection, benchmarks only)");
  app.add_option("--journal-dir", f.journal_dir,
                 "umap journal directory (default: the runtime's automatic one)");
  app.add_option("--madvise", f.madvise,
                 "advice of plain 'mmap': default (none), normal, random, sequential "
                 "(mmap+ADVICE names it per backend)");
  app.add_flag("--drop-caches", f.drop_caches,
               "also write 3 to /proc/sys/vm/drop_caches before each run (root; needed for "
               "the brick side of a local GlusterFS)");
  app.add_option("--check-reads", f.check_reads,
                 "ends: first and last word of each read op; all: every word");
  app.add_option("--seed", f.seed, "random seed");
  app.add_option("--stall-seconds", f.stall_seconds,
                 "no op finished for this long: print where every thread is, exit 4");
  app.add_option("--json", f.json, "append one JSON object per run to this file");
  app.add_option("--markdown", f.markdown, "append the Markdown tables to this file");
  app.add_option("--plot-dir", f.plot_dir, "write gnuplot .dat/.gp files here");
  app.add_option("--label", f.label, "name of this set-up in tables and plots (e.g. local)");
  size_opt("--memory-limit", &f.memory_limit,
           "run every run in its own child process in a fresh memory cgroup (v1 or v2) with "
           "this limit; reports the cgroup's peak (process + page cache)");
  app.add_option("--cgroup-parent", f.cgroup_parent,
                 "where the memory cgroups are made (default: the v2 root if it has the "
                 "memory controller, else the v1 memory root)");
  app.add_option("--processes", f.processes,
                 "with --memory-limit: this many processes run each workload at once in one "
                 "cgroup, each on its own file (FILE, FILE.p1, ...)")
      ->check(CLI::Range(1, 8));
  app.add_option("--procs", f.procs,
                 "with --memory-limit, read runs: this many processes run each workload at once "
                 "on the same file, each with its own backend, in one cgroup; the ops (--ops x "
                 "--threads) are split among them (bench/multi_process.h)")
      ->check(CLI::Range(1, 16));
  app.add_option("--max-seconds", f.max_seconds,
                 "stop a run's threads after this long (0: never); ops done so far count")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--TEST-corrupt-word", f.test_corrupt_word)->group("");
  for (CLI::Option* o : app.get_options()) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

}  // namespace umap_bench
