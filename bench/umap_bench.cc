// umap-bench: the same workload through several backends (umap, mmap, pread, ...) on the same
// file, in one run, reported as ratios. See docs/benchmarks.md for every flag and column.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "bench/backend.h"
#include "bench/human.h"
#include "bench/posix_io.h"
#include "bench/report.h"
#include "bench/run_json.h"
#include "bench/workload.h"

namespace umap_bench {
namespace {

struct Flags {
  std::string file = "/var/tmp/umap-bench.dat";
  uint64_t file_size = 256ull << 20;
  bool remove_file = false;
  std::string backends = "umap,mmap,pread";
  std::string patterns = "random";
  std::string accesses = "read";
  std::string localities = "0";
  uint64_t op_size = 4096;
  uint64_t stride = 16;
  double write_fraction = 0.5;
  std::string threads = "1,2,4";
  uint64_t ops = 10000;
  uint64_t sync_every = 0;
  int repeats = 3;
  uint64_t cache = 64ull << 20;
  uint64_t block_size = 4096;
  unsigned handlers = 2;
  unsigned writeback_threads = 1;
  std::string policy = "atomic";
  std::string journal_mode = "data";
  std::string journal_dir;
  std::string madvise = "default";
  bool drop_caches = false;
  std::string check_reads = "ends";
  uint64_t seed = 1;
  double stall_seconds = 120;
  std::string json, markdown, plot_dir, label = "local";
  uint64_t memory_limit = 0;
  // Set by the parent for a --memory-limit child.
  bool internal_child = false;
  uint64_t test_corrupt_word = ~0ull;
  std::string internal_cgroup;
};
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
  app.add_option("--pattern", f.patterns, "comma list of random, sequential, strided");
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
  size_opt("--cache", &f.cache, "umap cache bytes");
  size_opt("--block-size", &f.block_size, "umap block size");
  app.add_option("--handlers", f.handlers, "umap fault handler threads");
  app.add_option("--writeback-threads", f.writeback_threads, "umap write-back threads");
  app.add_option("--policy", f.policy,
                 "umap write-back policy: atomic (failure-atomic umsync) or relaxed");
  app.add_option("--journal-mode", f.journal_mode,
                 "umap journal: data, intent or off (off: no crash protection, benchmarks only)");
  app.add_option("--journal-dir", f.journal_dir,
                 "umap journal directory (default: the runtime's automatic one)");
  app.add_option("--madvise", f.madvise, "mmap advice: default (none), normal, random, sequential");
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
           "run each backend in its own child in a cgroup v1 memory cgroup with this limit; "
           "reports peak memory and completion time; umap's cache is put below the limit");
  app.add_flag("--internal-child", f.internal_child)->group("");
  app.add_option("--TEST-corrupt-word", f.test_corrupt_word)->group("");
  app.add_option("--internal-cgroup", f.internal_cgroup)->group("");
  for (CLI::Option* o : app.get_options()) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

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
  if (w.writes()) {
    absl::StrAppend(
        &t,
        w.sync_every ? absl::StrCat(", sync every ", w.sync_every, " ops per thread and at the end")
                     : std::string(", one sync at the end"),
        " (timed)");
  }
  return t;
}
// What to run: every workload at every thread count, `repeats` times, through every backend.
struct Matrix {
  std::vector<std::string> backends;
  std::vector<Workload> workloads;
  std::vector<unsigned> threads;
  RunConfig config;  // backend name filled per run
};

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
        w.ops_per_thread = f.ops;
        w.sync_every = f.sync_every;
        w.read_check = f.check_reads == "all" ? ReadCheck::kAll : ReadCheck::kEnds;
        w.seed = f.seed;
        workloads.push_back(w);
      }
    }
  }
  return workloads;
}

absl::StatusOr<Matrix> BuildMatrix(const Flags& f) {
  Matrix m;
  ASSIGN_OR_RETURN(m.workloads, ExpandWorkloads(f));
  ASSIGN_OR_RETURN(m.threads, ParseList<unsigned>(f.threads, "threads", ParseThreads));
  BackendOptions& o = m.config.options;
  ASSIGN_OR_RETURN(o.advice, ParseAdvice(f.madvise));
  ASSIGN_OR_RETURN(o.policy, ParsePolicy(f.policy));
  ASSIGN_OR_RETURN(o.journal_mode, ParseJournalMode(f.journal_mode));
  o.cache_bytes = f.cache;
  o.block_size = f.block_size;
  o.handler_threads = f.handlers;
  o.writeback_threads = f.writeback_threads;
  o.journal_dir = f.journal_dir;
  for (absl::string_view part : absl::StrSplit(f.backends, ',', absl::SkipEmpty())) {
    const std::string name(part);
    // A name the registry refuses is an argument error now, not a failed run later.
    absl::Status s = NewBackend(name, o).status();
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("--backends: ", s.message()));
    m.backends.push_back(name);
  }
  if (m.backends.empty()) return absl::InvalidArgumentError("--backends is empty");
  m.config.drop_caches = f.drop_caches;
  m.config.stall_seconds = f.stall_seconds;
  m.config.cgroup_dir = f.internal_cgroup;
  m.config.TEST_corrupt_word = f.test_corrupt_word;
  return m;
}

// Creates (or checks and repairs) the benchmark file.
absl::StatusOr<BenchFile> PrepareFile(const Flags& f) {
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::path(f.file).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ", parent.string(), ": ", ec.message()));
  }
  ASSIGN_OR_RETURN(BenchFile file, BenchFile::Open(f.file, f.file_size));
  if (f.internal_child) return file;
  if (file.fill_seconds() > 0) {
    std::printf("created %s (%s) in %.1f s\n", f.file.c_str(), HumanBytes(f.file_size).c_str(),
                file.fill_seconds());
  } else {
    // Left over from an interrupted run? Put the file back to its original contents.
    ASSIGN_OR_RETURN(uint64_t wrong, file.Repair());
    if (wrong > 0) {
      std::printf("restored %s of %s that an earlier (interrupted) run left written\n",
                  HumanBytes(wrong).c_str(), f.file.c_str());
    }
  }
  return file;
}

std::string Context(const Flags& f, uint64_t cache) {
  return absl::StrFormat(
      "file %s (%s); umap cache %s, block %s, %u handler threads, policy %s, journal %s; "
      "mmap madvise %s; "
      "%d repeat(s), median (min–max); page cache of the file dropped before every run%s",
      f.file, HumanBytes(f.file_size), HumanBytes(cache), HumanBytes(f.block_size), f.handlers,
      f.policy, f.journal_mode, f.madvise, f.repeats,
      f.drop_caches ? " (and /proc/sys/vm/drop_caches)" : "",
      f.memory_limit ? absl::StrCat("; each backend in a memory cgroup limited to ",
                                    HumanBytes(f.memory_limit))
                     : std::string());
}

absl::Status AppendLines(const std::string& path, const std::string& text) {
  if (path.empty()) return absl::OkStatus();
  std::ofstream out(path, std::ios::app);
  out << text;
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot append to ", path));
  return absl::OkStatus();
}
// The whole content of a small file, or "" when it cannot be read.
std::string ReadOrEmpty(const std::string& path) { return ReadSmallFile(path).value_or(""); }

// Removes "--name VALUE" and "--name=VALUE" for every name in `drop`.
std::vector<std::string> StripArgs(int argc, char** argv, const std::vector<std::string>& drop) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool removed = false;
    for (const std::string& d : drop) {
      if (a == d) {
        ++i;  // and its value
        removed = true;
      } else if (a.rfind(d + "=", 0) == 0) {
        removed = true;
      }
      if (removed) break;
    }
    if (!removed) out.push_back(a);
  }
  return out;
}
struct ChildOutcome {
  int status = 0;
  double wall_s = 0;
  uint64_t max_usage = 0, failcnt = 0, oom_kills = 0;
  std::vector<std::string> json_lines;
};

// Runs this binary again for one backend inside a fresh cgroup v1 memory cgroup limited to
// `limit` bytes; removes the cgroup afterwards.
absl::StatusOr<ChildOutcome> RunChild(const std::string& b, uint64_t limit, uint64_t cache,
                                      int argc, char** argv) {
  const std::string cg = absl::StrCat("/sys/fs/cgroup/memory/umap-bench-", ::getpid());
  if (::mkdir(cg.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("mkdir ", cg, " (cgroup v1 memory controller, root)"));
  }
  auto cleanup = [&] {
    if (::rmdir(cg.c_str()) != 0) {
      std::fprintf(stderr, "umap-bench: cannot remove cgroup %s: %s\n", cg.c_str(),
                   std::strerror(errno));
    }
  };
  if (!WriteSmallFile(cg + "/memory.limit_in_bytes", absl::StrCat(limit)).ok()) {
    cleanup();
    return absl::InternalError(absl::StrCat("cannot set ", cg, "/memory.limit_in_bytes"));
  }
  const std::string json_tmp = absl::StrCat("/tmp/umap-bench-", ::getpid(), "-", b, ".jsonl");
  std::remove(json_tmp.c_str());
  std::vector<std::string> args = StripArgs(argc, argv,
                                            {"--memory-limit", "--backends", "--json", "--markdown",
                                             "--plot-dir", "--cache", "--internal-cgroup"});
  args.insert(args.begin(), "umap-bench");
  for (const std::string& a :
       {std::string("--backends"), b, std::string("--json"), json_tmp, std::string("--cache"),
        absl::StrCat(cache), std::string("--internal-child"), std::string("--internal-cgroup"),
        cg}) {
    args.push_back(a);
  }
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid < 0) {
    cleanup();
    return absl::ErrnoToStatus(errno, "fork");
  }
  if (pid == 0) {
    // The parent runs no threads, so the child may format and allocate before exec.
    const std::string me = absl::StrCat(::getpid());
    if (!WriteSmallFile(cg + "/cgroup.procs", me).ok()) {
      std::fprintf(stderr, "umap-bench: cannot join cgroup %s\n", cg.c_str());
      ::_exit(127);
    }
    ::execv("/proc/self/exe", cargs.data());
    std::fprintf(stderr, "umap-bench: exec /proc/self/exe: %s\n", std::strerror(errno));
    ::_exit(127);
  }
  ChildOutcome o;
  while (::waitpid(pid, &o.status, 0) < 0 && errno == EINTR) {
  }
  o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.max_usage = std::strtoull(ReadOrEmpty(cg + "/memory.max_usage_in_bytes").c_str(), nullptr, 10);
  o.failcnt = std::strtoull(ReadOrEmpty(cg + "/memory.failcnt").c_str(), nullptr, 10);
  for (absl::string_view line : absl::StrSplit(ReadOrEmpty(cg + "/memory.oom_control"), '\n')) {
    if (absl::ConsumePrefix(&line, "oom_kill ")) {
      o.oom_kills = std::strtoull(std::string(line).c_str(), nullptr, 10);
    }
  }
  cleanup();
  for (absl::string_view line : absl::StrSplit(ReadOrEmpty(json_tmp), '\n', absl::SkipEmpty())) {
    o.json_lines.emplace_back(line);
  }
  std::remove(json_tmp.c_str());
  return o;
}
// Every run in this process, one after the other; returns the number of failed runs.
absl::StatusOr<int> RunInProcess(const Matrix& m, const BenchFile& file, const Flags& f,
                                 Report& report) {
  RunConfig rc = m.config;
  uint32_t tag = static_cast<uint32_t>(::getpid()) % kMaxTag + 1;
  const size_t total =
      m.workloads.size() * m.threads.size() * static_cast<size_t>(f.repeats) * m.backends.size();
  size_t n = 0;
  int failures = 0;
  for (const Workload& base : m.workloads) {
    for (unsigned th : m.threads) {
      for (int rep = 0; rep < f.repeats; ++rep) {
        for (size_t bi = 0; bi < m.backends.size(); ++bi) {
          // Rotate the backend order per repeat, so none always runs first.
          rc.backend = m.backends[(bi + static_cast<size_t>(rep)) % m.backends.size()];
          Workload w = base;
          w.threads = th;
          tag = tag % kMaxTag + 1;
          ++n;
          absl::StatusOr<RunResult> r = RunOnce(file, w, rc, rep, tag);
          if (!r.ok()) {
            std::fprintf(stderr, "umap-bench: [%zu/%zu] %s %s threads=%u repeat=%d: %s\n", n, total,
                         rc.backend.c_str(), w.Name().c_str(), th, rep,
                         r.status().ToString().c_str());
            ++failures;
            continue;
          }
          std::printf("[%zu/%zu] %-5s %s threads=%u repeat=%d: %s ops/s, %.2f s, %s%s\n", n, total,
                      rc.backend.c_str(), w.Name().c_str(), th, rep,
                      HumanCount(r->ops_per_s).c_str(), r->wall_s,
                      r->verified ? "verified" : "FAILED: ", r->error.c_str());
          std::fflush(stdout);
          if (!r->verified) ++failures;
          report.Add(*r, Title(w));
          RETURN_IF_ERROR(AppendLines(f.json, ToJson(*r, w, rc, file, f.label) + "\n"));
        }
      }
    }
  }
  return failures;
}

// Every backend in its own child process and memory cgroup; returns the failed children.
absl::StatusOr<int> RunInCgroups(const Matrix& m, const BenchFile& file, const Flags& f,
                                 uint64_t child_cache, int argc, char** argv, Report& report) {
  int failures = 0;
  for (const std::string& b : m.backends) {
    std::printf("--- %s in a memory cgroup limited to %s ---\n", b.c_str(),
                HumanBytes(f.memory_limit).c_str());
    ASSIGN_OR_RETURN(ChildOutcome o, RunChild(b, f.memory_limit, child_cache, argc, argv));
    std::string how = WIFEXITED(o.status) ? absl::StrCat("exit ", WEXITSTATUS(o.status))
                                          : absl::StrCat("killed by signal ", WTERMSIG(o.status));
    std::printf(
        "%s: %s, completion %.1f s, cgroup peak %s (limit %s), failcnt %llu, "
        "oom kills %llu\n",
        b.c_str(), how.c_str(), o.wall_s, HumanBytes(o.max_usage).c_str(),
        HumanBytes(f.memory_limit).c_str(), static_cast<unsigned long long>(o.failcnt),
        static_cast<unsigned long long>(o.oom_kills));
    if (!(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0)) {
      ++failures;
      // A child that died inside a write run left its writes in the file: restore it so
      // the next backend's verification starts from the original contents.
      ASSIGN_OR_RETURN(uint64_t wrong, file.Repair());
      if (wrong > 0) {
        std::printf("restored %s of the file that the failed %s child left written\n",
                    HumanBytes(wrong).c_str(), b.c_str());
      }
    }
    std::string lines;
    for (const std::string& line : o.json_lines) {
      RunResult r = ResultFromJson(line);
      for (const Workload& w : m.workloads) {
        if (w.Name() == r.workload) report.Add(r, Title(w));
      }
      lines += line + "\n";
    }
    RETURN_IF_ERROR(AppendLines(f.json, lines));
  }
  return failures;
}

// The tables, Markdown and plots after the runs; removes the file if asked.
absl::Status Finish(const Flags& f, const Report& report, int failures) {
  std::fputs(report.Text().c_str(), stdout);
  RETURN_IF_ERROR(AppendLines(f.markdown, report.Markdown(f.label)));
  if (!f.plot_dir.empty()) RETURN_IF_ERROR(report.WritePlots(f.plot_dir, f.label));
  if (f.remove_file && std::remove(f.file.c_str()) != 0) {
    std::fprintf(stderr, "umap-bench: cannot remove %s: %s\n", f.file.c_str(),
                 std::strerror(errno));
  }
  if (failures > 0) {
    std::printf("\numap-bench: %d run(s) FAILED (see the errors above)\n", failures);
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{
      "umap-bench: the same workload through umap, mmap, pread, ... on one file, in one run; "
      "reports ops/s per backend and the ratios umap/others (median of the repeats, "
      "min–max). Sizes take K/M/G suffixes (binary). See docs/benchmarks.md."};
  AddFlags(app, f);
  CLI11_PARSE(app, argc, argv);

  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "umap-bench: %s\n", s.ToString().c_str());
    return 2;
  };
  absl::StatusOr<Matrix> matrix = BuildMatrix(f);
  if (!matrix.ok()) return fail(matrix.status());
  absl::StatusOr<BenchFile> file = PrepareFile(f);
  if (!file.ok()) return fail(file.status());

  const bool cgroups = f.memory_limit > 0 && !f.internal_child;
  uint64_t child_cache = f.cache;
  if (cgroups) {
    // Keep umap's cache (shadows included) at most half the limit: the rest is for the
    // process itself (about 13 MiB here), umsync's capture copy and the journal.
    const uint64_t cap = f.memory_limit / 2 / f.block_size * f.block_size;
    if (child_cache > cap) {
      child_cache = cap;
      std::printf("umap cache set to %s (half the memory limit %s)\n",
                  HumanBytes(child_cache).c_str(), HumanBytes(f.memory_limit).c_str());
    }
  }
  Report report(matrix->backends, Context(f, child_cache));
  absl::StatusOr<int> failures =
      cgroups ? RunInCgroups(*matrix, *file, f, child_cache, argc, argv, report)
              : RunInProcess(*matrix, *file, f, report);
  if (!failures.ok()) return fail(failures.status());
  if (!f.internal_child) {
    absl::Status s = Finish(f, report, *failures);
    if (!s.ok()) return fail(s);
  }
  return *failures > 0 ? 1 : 0;
}

}  // namespace
}  // namespace umap_bench

int main(int argc, char** argv) {
  try {
    return umap_bench::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "umap-bench: %s\n", e.what());
    return 2;
  }
}
