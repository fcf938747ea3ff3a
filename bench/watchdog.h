// Watches the workers of one run; when no op finishes (and no phase change happens) for
// `stall_seconds`, prints what every thread is doing plus `extra()` and exits the process
// with status 4. A benchmark that hangs says where instead of timing out silently.
#ifndef UMAP_BENCH_WATCHDOG_H_
#define UMAP_BENCH_WATCHDOG_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/worker.h"

namespace umap_bench {

class Watchdog {
 public:
  // `workers` must outlive the watchdog; stall_seconds <= 0 never fires.
  Watchdog(const std::vector<std::unique_ptr<Worker>>& workers, double stall_seconds,
           std::string what, std::function<std::string()> extra);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Names the current phase ("final sync", "unmap", ...) and counts as progress.
  // `phase` must be a string literal (it is kept by pointer). Thread-safe.
  void SetPhase(const char* phase);

 private:
  void Loop();
  [[noreturn]] void ReportStallAndExit();

  const std::vector<std::unique_ptr<Worker>>& workers_;
  const double stall_;
  const std::string what_;
  std::function<std::string()> extra_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> bump_{0};
  std::atomic<const char*> phase_{"ops"};
  std::thread thread_;  // last: starts after the members above are ready
};

}  // namespace umap_bench

#endif  // UMAP_BENCH_WATCHDOG_H_
