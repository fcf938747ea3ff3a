// umap-stat's output: text for people, JSON for scripts, Prometheus text exposition for
// node_exporter's textfile collector. Field meanings: docs/operations.md, "Watching a
// running job".
#ifndef UMAP_TOOLS_UMAP_STAT_RENDER_H_
#define UMAP_TOOLS_UMAP_STAT_RENDER_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tools/umap_stat_reader.h"

namespace umap::tools {

struct StatOptions {
  // A request in flight longer than this is stalled (never later than half its deadline,
  // so that a stall is reported while the request still waits).
  uint64_t stall_ms = 1000;
};

// One process: its pid and the segments of its runtimes.
struct ProcessStats {
  pid_t pid = 0;
  std::vector<StatsSnapshot> runtimes;
};

// Age of a published request now: its age at publication plus the time since.
uint64_t RequestAgeUs(const StatsSnapshot& s, const runtime::StatsRequest& r);
// The threshold in microseconds for snapshot s.
uint64_t StallThresholdUs(const StatsSnapshot& s, const StatOptions& o);
// True when the oldest read or write of s is stalled; *what names it ("read of FILE ...").
bool Stalled(const StatsSnapshot& s, const StatOptions& o, std::string* what);

std::string RenderText(const ProcessStats& p, const StatOptions& o);
std::string RenderJson(const ProcessStats& p, const StatOptions& o);
std::string RenderPrometheus(const std::vector<ProcessStats>& ps, const StatOptions& o);

// "1.5 KiB", "12.0 MiB".
std::string HumanBytes(uint64_t n);

}  // namespace umap::tools

#endif  // UMAP_TOOLS_UMAP_STAT_RENDER_H_
