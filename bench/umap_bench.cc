// umap-bench: umap vs mmap vs pread on the same file, in one run, reported as ratios.
// See docs/benchmarks.md for every flag and column.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/report.h"
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
    case Access::kRead: t += "reads"; break;
    case Access::kWrite: t += "writes"; break;
    case Access::kMixed:
      absl::StrAppend(&t, "reads/writes (", std::lround(w.write_fraction * 100), "% writes)");
      break;
  }
  absl::StrAppend(&t, " of ", HumanBytes(w.op_size), ", ", w.ops_per_thread, " ops per thread");
  if (w.pattern == Pattern::kRandom) absl::StrAppend(&t, ", locality L=", w.locality);
  if (w.pattern == Pattern::kStrided) absl::StrAppend(&t, ", stride ", w.stride_items, " ops");
  if (w.writes()) {
    absl::StrAppend(&t, w.sync_every ? absl::StrCat(", sync every ", w.sync_every,
                                                    " ops per thread and at the end")
                                     : std::string(", one sync at the end"),
                    " (timed)");
  }
  return t;
}

// The value of a flat JSON object's field (our own output only: no nesting, no escapes in
// numbers). Empty when absent.
std::string JsonField(const std::string& line, const std::string& key) {
  const std::string k = absl::StrCat("\"", key, "\":");
  size_t p = line.find(k);
  if (p == std::string::npos) return "";
  p += k.size();
  if (p < line.size() && line[p] == '"') {
    std::string out;
    for (size_t i = p + 1; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      out += line[i];
    }
    return out;
  }
  size_t e = line.find_first_of(",}", p);
  return line.substr(p, e - p);
}

RunResult ResultFromJson(const std::string& line) {
  RunResult r;
  auto u = [&](const char* k) { return std::strtoull(JsonField(line, k).c_str(), nullptr, 10); };
  auto d = [&](const char* k) { return std::strtod(JsonField(line, k).c_str(), nullptr); };
  r.backend = ParseBackend(JsonField(line, "backend")).value_or(Backend::kUmap);
  r.workload = JsonField(line, "workload");
  r.threads = static_cast<unsigned>(u("threads"));
  r.repeat = static_cast<int>(u("repeat"));
  r.ops = u("ops");
  r.wall_s = d("wall_s");
  r.ops_per_s = d("ops_per_s");
  r.mb_per_s = d("mb_per_s");
  r.faults = u("faults");
  r.umap_cache_peak = u("umap_cache_peak");
  r.umap_io_reads = u("umap_io_reads");
  r.umap_io_bytes = u("umap_io_bytes");
  r.umap_io_writes = u("umap_io_writes");
  r.umap_io_write_bytes = u("umap_io_write_bytes");
  r.umap_prefetched = u("umap_prefetched");
  r.file_cached_bytes = u("file_cached_bytes");
  r.peak_rss = u("peak_rss");
  r.cgroup_peak = u("cgroup_peak");
  r.verified = JsonField(line, "verified") == "true";
  r.error = JsonField(line, "error");
  return r;
}

absl::Status AppendLines(const std::string& path, const std::string& text) {
  if (path.empty()) return absl::OkStatus();
  std::ofstream out(path, std::ios::app);
  out << text;
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot append to ", path));
  return absl::OkStatus();
}

std::string ReadSmall(const std::string& path) {
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s;
}

bool WriteSmall(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

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
absl::StatusOr<ChildOutcome> RunChild(Backend b, uint64_t limit, uint64_t cache, int argc,
                                      char** argv) {
  const std::string cg = absl::StrCat("/sys/fs/cgroup/memory/umap-bench-", ::getpid());
  if (::mkdir(cg.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", cg,
                                                   " (cgroup v1 memory controller, root)"));
  }
  auto cleanup = [&] {
    if (::rmdir(cg.c_str()) != 0) {
      std::fprintf(stderr, "umap-bench: cannot remove cgroup %s: %s\n", cg.c_str(),
                   std::strerror(errno));
    }
  };
  if (!WriteSmall(cg + "/memory.limit_in_bytes", absl::StrCat(limit))) {
    cleanup();
    return absl::InternalError(absl::StrCat("cannot set ", cg, "/memory.limit_in_bytes"));
  }
  const std::string json_tmp = absl::StrCat("/tmp/umap-bench-", ::getpid(), "-",
                                            BackendName(b), ".jsonl");
  std::remove(json_tmp.c_str());
  std::vector<std::string> args = StripArgs(
      argc, argv, {"--memory-limit", "--backends", "--json", "--markdown", "--plot-dir",
                   "--cache", "--internal-cgroup"});
  args.insert(args.begin(), "umap-bench");
  for (const std::string& a :
       {std::string("--backends"), std::string(BackendName(b)), std::string("--json"), json_tmp,
        std::string("--cache"), absl::StrCat(cache), std::string("--internal-child"),
        std::string("--internal-cgroup"), cg}) {
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
    if (!WriteSmall(cg + "/cgroup.procs", me)) {
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
  o.max_usage = std::strtoull(ReadSmall(cg + "/memory.max_usage_in_bytes").c_str(), nullptr, 10);
  o.failcnt = std::strtoull(ReadSmall(cg + "/memory.failcnt").c_str(), nullptr, 10);
  for (absl::string_view line : absl::StrSplit(ReadSmall(cg + "/memory.oom_control"), '\n')) {
    if (absl::ConsumePrefix(&line, "oom_kill ")) {
      o.oom_kills = std::strtoull(std::string(line).c_str(), nullptr, 10);
    }
  }
  cleanup();
  for (absl::string_view line : absl::StrSplit(ReadSmall(json_tmp), '\n', absl::SkipEmpty())) {
    o.json_lines.emplace_back(line);
  }
  std::remove(json_tmp.c_str());
  return o;
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{
      "umap-bench: the same workload through umap, mmap and pread on one file, in one run; "
      "reports ops/s per backend and the ratio umap/mmap (median of the repeats, min–max). "
      "Sizes take K/M/G suffixes (binary). See docs/benchmarks.md."};
  app.option_defaults()->always_capture_default();
  auto size_opt = [&](const char* name, uint64_t* v, const char* help) {
    return app.add_option(name, *v, help)->transform(CLI::AsSizeValue(false));
  };
  app.add_option("--file", f.file, "benchmark file; created and filled when missing");
  size_opt("--file-size", &f.file_size, "bytes of the file used (multiple of 4 KiB)");
  app.add_flag("--remove-file", f.remove_file, "delete the file at the end");
  app.add_option("--backends", f.backends, "comma list of umap, mmap, pread");
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
  CLI11_PARSE(app, argc, argv);

  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "umap-bench: %s\n", s.ToString().c_str());
    return 2;
  };
  auto backends = ParseList<Backend>(f.backends, "backends", ParseBackend);
  if (!backends.ok()) return fail(backends.status());
  auto patterns = ParseList<Pattern>(f.patterns, "pattern", ParsePattern);
  if (!patterns.ok()) return fail(patterns.status());
  auto accesses = ParseList<Access>(f.accesses, "access", ParseAccess);
  if (!accesses.ok()) return fail(accesses.status());
  auto localities = ParseList<double>(f.localities, "locality", ParseLocality);
  if (!localities.ok()) return fail(localities.status());
  auto threads = ParseList<unsigned>(f.threads, "threads", ParseThreads);
  if (!threads.ok()) return fail(threads.status());
  auto advice = ParseAdvice(f.madvise);
  if (!advice.ok()) return fail(advice.status());
  auto policy = ParsePolicy(f.policy);
  if (!policy.ok()) return fail(policy.status());
  auto journal_mode = ParseJournalMode(f.journal_mode);
  if (!journal_mode.ok()) return fail(journal_mode.status());
  if (f.check_reads != "ends" && f.check_reads != "all") {
    return fail(absl::InvalidArgumentError("--check-reads must be ends or all"));
  }

  std::vector<Workload> workloads;
  for (Pattern p : *patterns) {
    for (Access a : *accesses) {
      for (double l : *localities) {
        if (p != Pattern::kRandom && l != localities->front()) continue;  // L is random-only
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

  BackendConfig bc;
  bc.cache_bytes = f.cache;
  bc.block_size = f.block_size;
  bc.handler_threads = f.handlers;
  bc.writeback_threads = f.writeback_threads;
  bc.advice = *advice;
  bc.policy = *policy;
  bc.journal_mode = *journal_mode;
  bc.journal_dir = f.journal_dir;
  bc.drop_caches = f.drop_caches;
  bc.stall_seconds = f.stall_seconds;
  bc.cgroup_dir = f.internal_cgroup;
  bc.TEST_corrupt_word = f.test_corrupt_word;

  {
    std::error_code ec;
    std::filesystem::path parent = std::filesystem::path(f.file).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) {
      return fail(absl::InternalError(
          absl::StrCat("cannot create ", parent.string(), ": ", ec.message())));
    }
  }
  auto file = BenchFile::Open(f.file, f.file_size);
  if (!file.ok()) return fail(file.status());
  if (!f.internal_child) {
    if (file->fill_seconds() > 0) {
      std::printf("created %s (%s) in %.1f s\n", f.file.c_str(), HumanBytes(f.file_size).c_str(),
                  file->fill_seconds());
    } else {
      // Left over from an interrupted run? Put the file back to its original contents.
      auto wrong = file->Repair();
      if (!wrong.ok()) return fail(wrong.status());
      if (*wrong > 0) {
        std::printf("restored %s of %s that an earlier (interrupted) run left written\n",
                    HumanBytes(*wrong).c_str(), f.file.c_str());
      }
    }
  }

  uint64_t child_cache = f.cache;
  if (f.memory_limit > 0 && !f.internal_child) {
    // Keep umap's cache (shadows included) at most half the limit: the rest is for the
    // process itself (about 13 MiB here), umsync's capture copy and the journal.
    const uint64_t cap = f.memory_limit / 2 / f.block_size * f.block_size;
    if (child_cache > cap) {
      child_cache = cap;
      std::printf("umap cache set to %s (half the memory limit %s)\n",
                  HumanBytes(child_cache).c_str(), HumanBytes(f.memory_limit).c_str());
    }
  }
  const std::string context = absl::StrFormat(
      "file %s (%s); umap cache %s, block %s, %u handler threads, policy %s, journal %s; "
      "mmap madvise %s; "
      "%d repeat(s), median (min–max); page cache of the file dropped before every run%s",
      f.file, HumanBytes(f.file_size), HumanBytes(child_cache), HumanBytes(f.block_size),
      f.handlers, f.policy, f.journal_mode, f.madvise, f.repeats, f.drop_caches ? " (and /proc/sys/vm/drop_caches)" : "",
      f.memory_limit ? absl::StrCat("; each backend in a memory cgroup limited to ",
                                    HumanBytes(f.memory_limit))
                     : std::string());
  Report report(*backends, context);
  int failures = 0;

  if (f.memory_limit > 0 && !f.internal_child) {
    for (Backend b : *backends) {
      std::printf("--- %s in a memory cgroup limited to %s ---\n", BackendName(b),
                  HumanBytes(f.memory_limit).c_str());
      auto o = RunChild(b, f.memory_limit, child_cache, argc, argv);
      if (!o.ok()) return fail(o.status());
      std::string how = WIFEXITED(o->status)
                            ? absl::StrCat("exit ", WEXITSTATUS(o->status))
                            : absl::StrCat("killed by signal ", WTERMSIG(o->status));
      std::printf("%s: %s, completion %.1f s, cgroup peak %s (limit %s), failcnt %llu, "
                  "oom kills %llu\n",
                  BackendName(b), how.c_str(), o->wall_s, HumanBytes(o->max_usage).c_str(),
                  HumanBytes(f.memory_limit).c_str(),
                  static_cast<unsigned long long>(o->failcnt),
                  static_cast<unsigned long long>(o->oom_kills));
      if (!(WIFEXITED(o->status) && WEXITSTATUS(o->status) == 0)) {
        ++failures;
        // A child that died inside a write run left its writes in the file: restore it so
        // the next backend's verification starts from the original contents.
        auto wrong = file->Repair();
        if (!wrong.ok()) return fail(wrong.status());
        if (*wrong > 0) {
          std::printf("restored %s of the file that the failed %s child left written\n",
                      HumanBytes(*wrong).c_str(), BackendName(b));
        }
      }
      std::string lines;
      for (const std::string& line : o->json_lines) {
        RunResult r = ResultFromJson(line);
        for (const Workload& w : workloads) {
          if (w.Name() == r.workload) report.Add(r, Title(w));
        }
        lines += line + "\n";
      }
      absl::Status s = AppendLines(f.json, lines);
      if (!s.ok()) return fail(s);
    }
  } else {
    bc.cache_bytes = f.cache;
    uint32_t tag = static_cast<uint32_t>(::getpid()) % kMaxTag + 1;
    const size_t total = workloads.size() * threads->size() * static_cast<size_t>(f.repeats) *
                         backends->size();
    size_t n = 0;
    for (const Workload& base : workloads) {
      for (unsigned th : *threads) {
        for (int rep = 0; rep < f.repeats; ++rep) {
          for (size_t bi = 0; bi < backends->size(); ++bi) {
            // Rotate the backend order per repeat, so none always runs first.
            Backend b = (*backends)[(bi + static_cast<size_t>(rep)) % backends->size()];
            Workload w = base;
            w.threads = th;
            bc.backend = b;
            tag = tag % kMaxTag + 1;
            ++n;
            auto r = RunOnce(*file, w, bc, rep, tag);
            if (!r.ok()) {
              std::fprintf(stderr, "umap-bench: [%zu/%zu] %s %s threads=%u repeat=%d: %s\n", n,
                           total, BackendName(b), w.Name().c_str(), th, rep,
                           r.status().ToString().c_str());
              ++failures;
              continue;
            }
            std::printf("[%zu/%zu] %-5s %s threads=%u repeat=%d: %s ops/s, %.2f s, %s%s\n", n,
                        total, BackendName(b), w.Name().c_str(), th, rep,
                        HumanCount(r->ops_per_s).c_str(), r->wall_s,
                        r->verified ? "verified" : "FAILED: ", r->error.c_str());
            std::fflush(stdout);
            if (!r->verified) ++failures;
            report.Add(*r, Title(w));
            absl::Status s = AppendLines(f.json, ToJson(*r, w, bc, *file, f.label) + "\n");
            if (!s.ok()) return fail(s);
          }
        }
      }
    }
  }

  if (!f.internal_child) {
    std::fputs(report.Text().c_str(), stdout);
    absl::Status s = AppendLines(f.markdown, report.Markdown(f.label));
    if (!s.ok()) return fail(s);
    if (!f.plot_dir.empty()) {
      s = report.WritePlots(f.plot_dir, f.label);
      if (!s.ok()) return fail(s);
    }
    if (f.remove_file && std::remove(f.file.c_str()) != 0) {
      std::fprintf(stderr, "umap-bench: cannot remove %s: %s\n", f.file.c_str(),
                   std::strerror(errno));
    }
    if (failures > 0) {
      std::printf("\numap-bench: %d run(s) FAILED (see the errors above)\n", failures);
    }
  }
  return failures > 0 ? 1 : 0;
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
