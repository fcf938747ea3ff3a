#include "bench/watchdog.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace umap_bench {

Watchdog::Watchdog(const std::vector<std::unique_ptr<Worker>>& workers, double stall_seconds,
                   std::string what, std::function<std::string()> extra)
    : workers_(workers),
      stall_(stall_seconds),
      what_(std::move(what)),
      extra_(std::move(extra)),
      thread_([this] { Loop(); }) {}

Watchdog::~Watchdog() {
  stop_.store(true);
  thread_.join();
}

void Watchdog::SetPhase(const char* phase) {
  phase_.store(phase);
  bump_.fetch_add(1);
}

void Watchdog::Loop() {
  using Clock = std::chrono::steady_clock;
  uint64_t last = ~0ull;
  auto last_change = Clock::now();
  while (!stop_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    uint64_t sum = bump_.load();
    for (auto& w : workers_) sum += w->done.load(std::memory_order_relaxed);
    const auto now = Clock::now();
    if (sum != last) {
      last = sum;
      last_change = now;
      continue;
    }
    if (stall_ > 0 && std::chrono::duration<double>(now - last_change).count() > stall_) {
      ReportStallAndExit();
    }
  }
}

void Watchdog::ReportStallAndExit() {
  std::string msg =
      absl::StrFormat("umap-bench: STALL: no progress for %.0f s during %s (phase: %s)\n", stall_,
                      what_, phase_.load());
  for (size_t t = 0; t < workers_.size(); ++t) {
    const uint64_t item = workers_[t]->item_now.load();
    absl::StrAppendFormat(&msg, "  thread %u: %u ops done, at item %s\n", t,
                          workers_[t]->done.load(),
                          item == ~0ull ? std::string("-") : absl::StrCat(item));
  }
  if (extra_) msg += extra_();
  std::fputs(msg.c_str(), stderr);
  std::fflush(stderr);
  ::_exit(4);
}

}  // namespace umap_bench
