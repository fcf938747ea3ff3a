// Report: collects RunResults of umap-bench and prints them as tables (text, Markdown) and
// gnuplot data: per workload and thread count the median throughput of each backend with
// its min-max over the repeats, and the ratios umap/mmap and umap/pread computed per repeat
// (so each ratio compares runs of one round) before taking the median.
//
// Not thread-safe; used from umap-bench's main thread.
#ifndef UMAP_BENCH_REPORT_H_
#define UMAP_BENCH_REPORT_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bench/backend.h"
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
  // `backends` (names) fixes the column order; `context` is printed above each table. The
  // ratio columns are every umap-family backend against every other backend.
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

  bool has_ratio() const;

 private:
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
  std::string ThroughputText(const PerWorkload& pw) const;
  std::string MemoryText(const PerWorkload& pw) const;
  int Failed(const PerWorkload& pw) const;  // runs that did not verify
  Spread Metric(const PerWorkload& pw, const std::string& b, unsigned threads,
                double (*get)(const RunResult&)) const;
  // Ratio a/b of ops/s per repeat, then the spread.
  Spread Ratio(const PerWorkload& pw, const std::string& a, const std::string& b,
               unsigned threads) const;
  bool Has(const PerWorkload& pw, const std::string& b) const { return pw.runs.count(b) > 0; }
  // (subject, reference) pairs with runs in pw: umap-family backends against the others.
  std::vector<std::pair<std::string, std::string>> RatioPairs(const PerWorkload& pw) const;
  // The umap-family backends with runs in pw.
  std::vector<std::string> UmapBackends(const PerWorkload& pw) const;

  std::vector<std::string> backends_;
  std::string context_;
  std::vector<std::string> order_;  // workload names, first-seen order
  std::map<std::string, PerWorkload> workloads_;
};

}  // namespace umap_bench

#endif  // UMAP_BENCH_REPORT_H_
