// umap-bench: the same workload through several backends (umap, mmap, pread, ...) on the same
// file, in one run, reported as ratios. With --memory-limit every run is a child process in
// its own memory cgroup (the same budget for every backend). See docs/benchmarks.md for
// every flag and column. With --procs N every run is N processes on the same file in one
// memory cgroup (bench/multi_process.h).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/bench_flags.h"
#include "bench/cgroup_runner.h"
#include "bench/human.h"
#include "bench/memory_cgroup.h"
#include "bench/multi_process.h"
#include "bench/report.h"
#include "bench/run_json.h"
#include "bench/workload.h"

namespace umap_bench {
namespace {

// Exit statuses (docs/benchmarks.md).
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitOnlyOom = 5;

absl::Status AppendLines(const std::string& path, const std::string& text) {
  if (path.empty()) return absl::OkStatus();
  std::ofstream out(path, std::ios::app);
  out << text;
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot append to ", path));
  return absl::OkStatus();
}

// The file of process p (0: --file itself).
std::string ProcessFile(const Flags& f, unsigned p) {
  return p == 0 ? f.file : absl::StrCat(f.file, ".p", p);
}

// Creates (or checks and repairs) one benchmark file.
absl::StatusOr<BenchFile> PrepareFile(const std::string& path, uint64_t size) {
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ", parent.string(), ": ", ec.message()));
  }
  ASSIGN_OR_RETURN(BenchFile file, BenchFile::Open(path, size));
  if (file.fill_seconds() > 0) {
    std::printf("created %s (%s) in %.1f s\n", path.c_str(), HumanBytes(size).c_str(),
                file.fill_seconds());
  } else {
    // Left over from an interrupted run? Put the file back to its original contents.
    ASSIGN_OR_RETURN(uint64_t wrong, file.Repair());
    if (wrong > 0) {
      std::printf("restored %s of %s that an earlier (interrupted) run left written\n",
                  HumanBytes(wrong).c_str(), path.c_str());
    }
  }
  return file;
}

std::string Context(const Flags& f, const Matrix& m) {
  std::string c = absl::StrFormat(
      "file %s (%s); umap cache %s, block %s, %u handler threads, policy %s, journal %s; "
      "mmap madvise %s; "
      "%d repeat(s), median (min–max); page cache of the file dropped before every run%s",
      f.file, HumanBytes(f.file_size), HumanBytes(m.config.options.cache_bytes),
      HumanBytes(f.block_size), f.handlers, f.policy, f.journal_mode, f.madvise, f.repeats,
      f.drop_caches ? " (and /proc/sys/vm/drop_caches)" : "",
      f.memory_limit ? absl::StrCat("; every run in a memory cgroup limited to ",
                                    HumanBytes(f.memory_limit), " (umap cache ", m.cache_how, ")")
                     : std::string());
  if (f.max_seconds > 0) absl::StrAppendFormat(&c, "; runs stopped after %g s", f.max_seconds);
  if (f.procs > 1) {
    absl::StrAppendFormat(&c,
                          "; every run %u processes at once on the same file, each with its "
                          "own backend, the ops split among them",
                          f.procs);
  }
  return c;
}

// One run of the matrix: which workload, threads, repeat and backend, and its place.
struct Cell {
  Workload w;  // threads set
  std::string backend;
  int repeat = 0;
  uint32_t tag = 1;
  size_t n = 0, total = 0;
};

// Calls run(cell) for every run in matrix order: workload, threads, repeat, then the
// backends in an order that rotates by repeat (so none always runs first).
absl::Status ForEachCell(const Matrix& m, int repeats,
                         const std::function<absl::Status(const Cell&)>& run) {
  Cell c;
  c.total =
      m.workloads.size() * m.threads.size() * static_cast<size_t>(repeats) * m.backends.size();
  c.tag = static_cast<uint32_t>(::getpid()) % kMaxTag + 1;
  for (const Workload& base : m.workloads) {
    for (unsigned th : m.threads) {
      for (int rep = 0; rep < repeats; ++rep) {
        for (size_t bi = 0; bi < m.backends.size(); ++bi) {
          c.backend = m.backends[(bi + static_cast<size_t>(rep)) % m.backends.size()];
          c.w = base;
          c.w.threads = th;
          c.repeat = rep;
          c.tag = c.tag % kMaxTag + 1;
          ++c.n;
          RETURN_IF_ERROR(run(c));
        }
      }
    }
  }
  return absl::OkStatus();
}

void PrintProgress(const Cell& c, const RunResult& r) {
  std::string extra;
  if (r.cgroup_limit > 0) {
    absl::StrAppend(&extra, ", cgroup peak ", HumanBytes(r.cgroup_peak), " of ",
                    HumanBytes(r.cgroup_limit));
  }
  if (r.capped) extra += ", stopped at --max-seconds";
  std::printf("[%zu/%zu] %-5s %s threads=%u repeat=%d: %s ops/s, %.2f s%s, %s%s\n", c.n, c.total,
              c.backend.c_str(), c.w.Name().c_str(), c.w.threads, c.repeat,
              HumanCount(r.ops_per_s).c_str(), r.wall_s, extra.c_str(),
              r.verified ? "verified" : "FAILED: ", r.error.c_str());
  std::fflush(stdout);
}

// Counts failed runs, and how many of them the OOM killer ended.
struct Failures {
  int failed = 0, oom = 0;
  void Add(const RunResult& r, bool oom_killed) {
    failed += !r.verified;
    oom += !r.verified && oom_killed;
  }
};

// Every run in this process, one after the other.
absl::Status RunInProcess(const Matrix& m, const BenchFile& file, const Flags& f, Report& report,
                          Failures& failures) {
  RunConfig rc = m.config;
  return ForEachCell(m, f.repeats, [&](const Cell& c) -> absl::Status {
    rc.backend = c.backend;
    absl::StatusOr<RunResult> r = RunOnce(file, c.w, rc, c.repeat, c.tag);
    if (!r.ok()) {
      std::fprintf(stderr, "umap-bench: [%zu/%zu] %s %s threads=%u repeat=%d: %s\n", c.n, c.total,
                   c.backend.c_str(), c.w.Name().c_str(), c.w.threads, c.repeat,
                   r.status().ToString().c_str());
      ++failures.failed;
      return absl::OkStatus();
    }
    PrintProgress(c, *r);
    failures.Add(*r, false);
    report.Add(*r, Title(c.w));
    return AppendLines(f.json, ToJson(*r, c.w, rc, file, f.label) + "\n");
  });
}

// The processes of one multi-process run as one row: ops and CPU add up, the wall time is
// the longest, memory figures add up except the cgroup's (shared).
RunResult Combine(const std::vector<ChildOutcome>& outs) {
  RunResult sum = outs.front().result;
  for (size_t i = 1; i < outs.size(); ++i) {
    const RunResult& r = outs[i].result;
    sum.ops += r.ops;
    sum.wall_s = std::max(sum.wall_s, r.wall_s);
    sum.cpu_s += r.cpu_s;
    sum.voluntary_switches += r.voluntary_switches;
    sum.involuntary_switches += r.involuntary_switches;
    sum.faults += r.faults;
    sum.major_faults += r.major_faults;
    sum.umap_faults_missing += r.umap_faults_missing;
    sum.umap_cache_peak += r.umap_cache_peak;
    sum.umap_io_reads += r.umap_io_reads;
    sum.umap_io_bytes += r.umap_io_bytes;
    sum.file_cached_bytes += r.file_cached_bytes;
    sum.peak_rss += r.peak_rss;
    sum.capped |= r.capped;
    sum.verified &= r.verified;
    if (!r.error.empty()) absl::StrAppend(&sum.error, sum.error.empty() ? "" : "; ", r.error);
  }
  sum.ops_per_s = sum.wall_s > 0 ? static_cast<double>(sum.ops) / sum.wall_s : 0;
  const RunResult& first = outs.front().result;
  const double mb_per_op = first.ops_per_s > 0 ? first.mb_per_s / first.ops_per_s : 0;
  sum.mb_per_s = sum.ops_per_s * mb_per_op;
  return sum;
}

// Every run in a child process in its own memory cgroup (several processes per run share
// one); the parent stays single-threaded.
absl::Status RunInCgroups(const Matrix& m, const std::vector<BenchFile>& files, const Flags& f,
                          Report& report, Failures& failures) {
  std::string parent = f.cgroup_parent;
  if (parent.empty()) {
    ASSIGN_OR_RETURN(parent, MemoryCgroup::DefaultParent());
  }
  return ForEachCell(m, f.repeats, [&](const Cell& c) -> absl::Status {
    std::vector<ChildRun> runs(files.size());
    for (size_t p = 0; p < files.size(); ++p) {
      runs[p].file = &files[p];
      runs[p].workload = c.w;
      runs[p].config = m.config;
      runs[p].config.backend = c.backend;
      runs[p].repeat = c.repeat;
      runs[p].tag = c.tag;
      runs[p].label = f.label;
    }
    ASSIGN_OR_RETURN(std::vector<ChildOutcome> outs,
                     RunInMemoryCgroup(parent, absl::StrCat("umap-bench-", ::getpid(), "-", c.n),
                                       f.memory_limit, runs));
    std::string lines;
    bool oom = false;
    for (const ChildOutcome& o : outs) {
      lines += o.json + "\n";
      oom |= o.oom_killed;
    }
    const RunResult r = Combine(outs);
    PrintProgress(c, r);
    failures.Add(r, oom);
    report.Add(r, Title(c.w));
    if (!r.verified) {
      // A child that died inside a write run left its writes in its file: restore it so the
      // next run's verification starts from the original contents.
      for (const BenchFile& file : files) {
        ASSIGN_OR_RETURN(uint64_t wrong, file.Repair());
        if (wrong > 0) {
          std::printf("restored %s of %s that the failed run left written\n",
                      HumanBytes(wrong).c_str(), file.path().c_str());
        }
      }
    }
    return AppendLines(f.json, lines);
  });
}

// --procs N: every run as N processes on the same file in one memory cgroup; the parent
// stays single-threaded. A process that a signal ended fails the run, said on stderr.
absl::Status RunProcsInCgroups(const Matrix& m, const BenchFile& file, const Flags& f,
                               Report& report, Failures& failures) {
  std::string parent = f.cgroup_parent;
  if (parent.empty()) {
    ASSIGN_OR_RETURN(parent, MemoryCgroup::DefaultParent());
  }
  return ForEachCell(m, f.repeats, [&](const Cell& c) -> absl::Status {
    ChildRun run;
    run.file = &file;
    run.workload = c.w;
    run.config = m.config;
    run.config.backend = c.backend;
    run.repeat = c.repeat;
    run.tag = c.tag;
    run.label = f.label;
    ASSIGN_OR_RETURN(SameFileOutcome o,
                     RunSameFile(parent, absl::StrCat("umap-bench-", ::getpid(), "-", c.n),
                                 f.memory_limit, run));
    PrintProgress(c, o.total);
    std::fputs(ProcessLines(o).c_str(), stdout);
    std::fflush(stdout);
    if (!o.killed.empty()) {
      std::fprintf(stderr, "umap-bench: [%zu/%zu] %s %s threads=%u repeat=%d FAILED: %s\n", c.n,
                   c.total, c.backend.c_str(), c.w.Name().c_str(), c.w.threads, c.repeat,
                   o.killed.c_str());
    }
    failures.Add(o.total, o.oom_killed);
    report.Add(o.total, Title(c.w));
    return AppendLines(f.json, o.json + "\n");
  });
}

// The tables, Markdown and plots after the runs; removes the files if asked.
absl::Status Finish(const Flags& f, const Report& report, const Failures& failures) {
  std::fputs(report.Text().c_str(), stdout);
  RETURN_IF_ERROR(AppendLines(f.markdown, report.Markdown(f.label)));
  if (!f.plot_dir.empty()) RETURN_IF_ERROR(report.WritePlots(f.plot_dir, f.label));
  for (unsigned p = 0; f.remove_file && p < f.processes; ++p) {
    if (std::remove(ProcessFile(f, p).c_str()) != 0) {
      std::fprintf(stderr, "umap-bench: cannot remove %s: %s\n", ProcessFile(f, p).c_str(),
                   std::strerror(errno));
    }
  }
  if (failures.failed > failures.oom) {
    std::printf("\numap-bench: %d run(s) FAILED (see the errors above)\n", failures.failed);
  } else if (failures.oom > 0) {
    std::printf(
        "\numap-bench: %d run(s) were OOM-killed at the memory limit (shown as OOM); "
        "every other run verified\n",
        failures.oom);
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
    return kExitUsage;
  };
  absl::StatusOr<Matrix> matrix = BuildMatrix(f);
  if (!matrix.ok()) return fail(matrix.status());
  std::vector<BenchFile> files;
  for (unsigned p = 0; p < f.processes; ++p) {
    absl::StatusOr<BenchFile> file = PrepareFile(ProcessFile(f, p), f.file_size);
    if (!file.ok()) return fail(file.status());
    files.push_back(std::move(*file));
  }
  if (f.memory_limit > 0) {
    std::printf("every run in a memory cgroup limited to %s; umap cache %s (%s)\n",
                HumanBytes(f.memory_limit).c_str(),
                HumanBytes(matrix->config.options.cache_bytes).c_str(), matrix->cache_how.c_str());
  }
  Report report(matrix->backends, Context(f, *matrix));
  Failures failures;
  absl::Status s = f.procs > 1 ? RunProcsInCgroups(*matrix, files.front(), f, report, failures)
                   : f.memory_limit > 0 ? RunInCgroups(*matrix, files, f, report, failures)
                                        : RunInProcess(*matrix, files.front(), f, report, failures);
  if (!s.ok()) return fail(s);
  s = Finish(f, report, failures);
  if (!s.ok()) return fail(s);
  if (failures.failed > failures.oom) return kExitFailed;
  return failures.oom > 0 ? kExitOnlyOom : kExitOk;
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
