// umap-demo: the README's `make demo`. A matrix of doubles much larger than umap's cache,
// read and written by several threads through umap and through mmap on the same file, every
// byte checked, then a small table and a one-line verdict. Exit 0 only if every check passed.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/human.h"
#include "bench/run_json.h"
#include "bench/workload.h"
#include "umap/umap.hpp"

namespace umap_bench {
namespace {

constexpr uint64_t kColumns = 512;  // one 4 KiB row of doubles per op

struct Phase {
  const char* name;
  Workload w;
};

int Main(int argc, char** argv) {
  std::string dir = "/var/tmp/umap-demo";
  uint64_t size = 512ull << 20;
  uint64_t cache = 32ull << 20;
  unsigned threads = 4;
  uint64_t ops = 20000;
  bool keep = false;
  std::string json;
  CLI::App app{
      "umap-demo: random row reads, sequential row reads and random row writes on a matrix of "
      "doubles much larger than umap's cache, through umap and through mmap on the same file; "
      "every byte is checked. Exit 0 only if all checks pass."};
  app.option_defaults()->always_capture_default();
  app.add_option("--dir", dir, "directory for the matrix file (local disk or a DFS mount)");
  app.add_option("--size", size, "matrix file bytes (K/M/G suffixes)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--cache", cache, "umap cache bytes")->transform(CLI::AsSizeValue(false));
  app.add_option("--threads", threads, "application threads")->check(CLI::Range(1, 16));
  app.add_option("--ops", ops, "random reads / random writes per thread")
      ->check(CLI::PositiveNumber);
  app.add_flag("--keep", keep, "keep the matrix file");
  app.add_option("--json", json, "append one JSON object per run to this file");
  CLI11_PARSE(app, argc, argv);

  const uint64_t row = kColumns * sizeof(double);
  if (size < row * threads || size % row != 0) {
    std::fprintf(stderr,
                 "umap-demo: --size must be a multiple of %llu bytes (one row), at "
                 "least one row per thread\n",
                 static_cast<unsigned long long>(row));
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "umap-demo: cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
    return 2;
  }
  const std::string path = absl::StrCat(dir, "/umap-demo-matrix-", ::getpid(), ".f64");
  const auto start = std::chrono::steady_clock::now();
  std::printf(
      "umap-demo: %llu x %llu matrix of doubles, A[r][c] = r*%llu + c + 1, in %s (%s); "
      "umap cache %s (1/%llu of the file); %u threads\n",
      static_cast<unsigned long long>(size / row), static_cast<unsigned long long>(kColumns),
      static_cast<unsigned long long>(kColumns), path.c_str(), HumanBytes(size).c_str(),
      HumanBytes(cache).c_str(), static_cast<unsigned long long>(size / cache), threads);
  std::fflush(stdout);
  auto file = BenchFile::Open(path, size);
  if (!file.ok()) {
    std::fprintf(stderr, "umap-demo: %s\n", file.status().ToString().c_str());
    return 2;
  }
  auto remove_file = [&] {
    if (!keep) std::remove(path.c_str());
  };
  std::printf("wrote the matrix in %.1f s\n", file->fill_seconds());

  Workload base;
  base.op_size = row;
  base.threads = threads;
  base.read_check = ReadCheck::kAll;
  std::vector<Phase> phases;
  {
    Workload w = base;
    w.pattern = Pattern::kRandom;
    w.access = Access::kRead;
    w.ops_per_thread = ops;
    phases.push_back({"random row reads", w});
    w.pattern = Pattern::kSequential;
    w.ops_per_thread = size / row / threads;  // the whole matrix once
    phases.push_back({"sequential scan", w});
    w.pattern = Pattern::kRandom;
    w.access = Access::kWrite;
    w.ops_per_thread = ops;
    phases.push_back({"random row writes", w});
  }

  // umap's documented defaults (and UMAP_* environment), with the demo's cache size.
  auto defaults = Umap::Runtime::DefaultConfig();
  if (!defaults.ok()) {
    std::fprintf(stderr, "umap-demo: %s\n", defaults.status().ToString().c_str());
    return 2;
  }
  RunConfig rc;
  BackendOptions& bo = rc.options;
  bo.cache_bytes = cache;
  bo.block_size = defaults->block_size;
  bo.handler_threads = defaults->handler_threads;
  bo.writeback_threads = defaults->writeback_threads;
  bo.policy = defaults->policy;
  bo.journal_mode = defaults->journal_mode;
  bo.journal_dir = defaults->journal_dir ? defaults->journal_dir : "";
  std::printf("umap: block %s, %u handler threads, policy %s, journal %s%s\n",
              HumanBytes(bo.block_size).c_str(), bo.handler_threads, PolicyName(bo.policy),
              JournalModeName(bo.journal_mode),
              bo.journal_dir.empty() ? " (automatic directory)"
                                     : absl::StrCat(" in ", bo.journal_dir).c_str());
  rc.stall_seconds = 120;

  struct Row {
    std::string phase;
    RunResult r;
  };
  std::vector<Row> rows;
  std::vector<std::string> problems;
  uint32_t tag = static_cast<uint32_t>(::getpid()) % kMaxTag + 1;
  for (const Phase& ph : phases) {
    for (const char* b : {"umap", "mmap"}) {
      rc.backend = b;
      tag = tag % kMaxTag + 1;
      auto r = RunOnce(*file, ph.w, rc, 0, tag);
      if (!r.ok()) {
        std::fprintf(stderr, "umap-demo: %s through %s: %s\n", ph.name, b,
                     r.status().ToString().c_str());
        remove_file();
        return 1;
      }
      std::printf("  %-18s %-5s %9s ops/s  %7.1f MB/s  %6.2f s  %s\n", ph.name, b,
                  HumanCount(r->ops_per_s).c_str(), r->mb_per_s, r->wall_s,
                  r->verified ? "checked OK" : "CHECK FAILED");
      std::fflush(stdout);
      if (!r->verified) {
        problems.push_back(absl::StrCat(ph.name, " through ", b, ": ", r->error));
        std::fprintf(stderr, "umap-demo: %s through %s: %s\n", ph.name, b, r->error.c_str());
      }
      if (!json.empty()) {
        if (FILE* out = std::fopen(json.c_str(), "a")) {
          std::fprintf(out, "%s\n", ToJson(*r, ph.w, rc, *file, "demo").c_str());
          std::fclose(out);
        }
      }
      rows.push_back({ph.name, *r});
    }
  }
  remove_file();

  std::printf("\n%-18s | %-5s | %9s | %8s | %-23s | %-15s | %9s | %s\n", "workload", "via", "ops/s",
              "MB/s", "umap cache used / peak", "file page cache", "faults", "check");
  std::printf("%s\n", std::string(118, '-').c_str());
  for (const Row& x : rows) {
    const RunResult& r = x.r;
    std::string cache_col = r.backend == "umap" ? absl::StrCat(HumanBytes(r.umap_cache_used), " / ",
                                                               HumanBytes(r.umap_cache_peak))
                                                : "-";
    std::printf("%-18s | %-5s | %9s | %8.1f | %-23s | %-15s | %9llu | %s\n", x.phase.c_str(),
                r.backend.c_str(), HumanCount(r.ops_per_s).c_str(), r.mb_per_s, cache_col.c_str(),
                HumanBytes(r.file_cached_bytes).c_str(), static_cast<unsigned long long>(r.faults),
                r.verified ? "OK" : "FAILED");
  }
  std::string ratios;
  uint64_t umap_peak = 0, mmap_cached = 0;
  for (size_t i = 0; i + 1 < rows.size(); i += 2) {
    const RunResult& u = rows[i].r;
    const RunResult& m = rows[i + 1].r;
    umap_peak = std::max(umap_peak, u.umap_cache_peak);
    mmap_cached = std::max(mmap_cached, m.file_cached_bytes);
    absl::StrAppendFormat(&ratios, "%s%s %.2f", ratios.empty() ? "" : ", ", rows[i].phase,
                          m.ops_per_s > 0 ? u.ops_per_s / m.ops_per_s : 0.0);
  }
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "\nfaults: umap = faults its handlers resolved (missing + write-protect); mmap = "
      "minor + major page faults of the process during the run.\n");
  if (problems.empty()) {
    std::printf(
        "verdict: PASS in %.0f s: every row read was checked and the whole file was "
        "verified after each write run; umap's cache peaked at %s of its %s budget "
        "while mmap left up to %s of the file in the page cache; umap/mmap throughput "
        "(this machine, this run): %s.\n",
        total, HumanBytes(umap_peak).c_str(), HumanBytes(cache).c_str(),
        HumanBytes(mmap_cached).c_str(), ratios.c_str());
    return 0;
  }
  std::printf("verdict: FAIL: %zu check(s) failed: %s\n", problems.size(),
              problems.front().c_str());
  return 1;
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
