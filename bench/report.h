// Report: collects the RunResults of umap-bench and prints them as tables (text, Markdown)
// and gnuplot data. Per workload: the median throughput of each backend per thread count
// with its min-max over the repeats, and the ratios of every umap-family backend to every
// other backend, computed per repeat (so each ratio compares runs of one round) before
// taking the median; then one row per thread count and backend with the medians of memory
// (cgroup peak, RSS, page cache, umap's cache), CPU time and context switches per op,
// faults, storage misses and umap's merged I/O sizes.
//
// Not thread-safe; used from umap-bench's main thread.
#ifndef UMAP_BENCH_REPORT_H_
#define UMAP_BENCH_REPORT_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bench/run_result.h"

namespace umap_bench {

// Median and spread of a sample.
struct Spread {
  double median = 0, min = 0, max = 0;
  size_t n = 0;
};
Spread SpreadOf(std::vector<double> v);

class Report {
 public:
  // `backends` (names) fixes the column order; `context` is printed above each table.
  Report(std::vector<std::string> backends, std::string context)
      : backends_(std::move(backends)), context_(std::move(context)) {}

  void Add(const RunResult& r, const std::string& workload_title);

  // Plain-text tables for the terminal.
  std::string Text() const;
  // Markdown: one section per workload, titled with `label`.
  std::string Markdown(const std::string& label) const;
  // Writes <dir>/<label>-<workload>.dat (threads; per backend median min max) and a .gp
  // script next to it that renders <same name>.png with gnuplot.
  absl::Status WritePlots(const std::string& dir, const std::string& label) const;

 private:
  using Table = std::vector<std::vector<std::string>>;
  struct Key {
    unsigned threads;
    int repeat;
    bool operator<(const Key& o) const {
      return threads != o.threads ? threads < o.threads : repeat < o.repeat;
    }
  };
  struct PerWorkload {
    std::string title;
    // backend -> (threads, repeat) -> result
    std::map<std::string, std::map<Key, RunResult>> runs;
  };
  std::vector<unsigned> Threads(const PerWorkload& pw) const;
  Spread Metric(const PerWorkload& pw, const std::string& b, unsigned threads,
                double (*get)(const RunResult&)) const;
  // Ratio a/b of ops/s per repeat, then the spread.
  Spread Ratio(const PerWorkload& pw, const std::string& a, const std::string& b,
               unsigned threads) const;
  bool Has(const PerWorkload& pw, const std::string& b) const { return pw.runs.count(b) > 0; }
  // (subject, reference) pairs with runs in pw: umap-family backends against the others.
  std::vector<std::pair<std::string, std::string>> RatioPairs(const PerWorkload& pw) const;
  // ops/s median (min–max), or why there is none ("OOM", "FAILED").
  std::string OpsCell(const PerWorkload& pw, const std::string& b, unsigned threads) const;
  // threads | ops/s per backend | ratios (markdown: ratios first, the umap/mmap one bold).
  Table ThroughputTable(const PerWorkload& pw, bool markdown) const;
  // One row per thread count and backend: memory, CPU, switches, faults, misses, I/O.
  Table DetailTable(const PerWorkload& pw) const;
  int Failed(const PerWorkload& pw) const;  // runs that did not verify

  std::vector<std::string> backends_;
  std::string context_;
  std::vector<std::string> order_;  // workload names, first-seen order
  std::map<std::string, PerWorkload> workloads_;
};

}  // namespace umap_bench

#endif  // UMAP_BENCH_REPORT_H_
