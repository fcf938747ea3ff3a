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
#include <vector>

#include "absl/status/status.h"
#include "bench/workload.h"

namespace umap_bench {

// Median and spread of a sample.
struct Spread {
  double median = 0, min = 0, max = 0;
  size_t n = 0;
};
Spread SpreadOf(std::vector<double> v);

class Report {
 public:
  // `backends` fixes the column order; `context` is printed above each table.
  Report(std::vector<Backend> backends, std::string context)
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
    std::map<Backend, std::map<Key, RunResult>> runs;
  };
  std::vector<unsigned> Threads(const PerWorkload& pw) const;
  Spread Metric(const PerWorkload& pw, Backend b, unsigned threads,
                double (*get)(const RunResult&)) const;
  // Ratio a/b of ops/s per repeat, then the spread.
  Spread Ratio(const PerWorkload& pw, Backend a, Backend b, unsigned threads) const;
  bool Has(const PerWorkload& pw, Backend b) const { return pw.runs.count(b) > 0; }

  std::vector<Backend> backends_;
  std::string context_;
  std::vector<std::string> order_;  // workload names, first-seen order
  std::map<std::string, PerWorkload> workloads_;
};

}  // namespace umap_bench

#endif  // UMAP_BENCH_REPORT_H_
