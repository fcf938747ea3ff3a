// Reading the stats segments of running Umap processes (runtime/stats/stats_segment.h) for
// umap-stat: find them, check that they can be trusted, and copy them consistently.
#ifndef UMAP_TOOLS_UMAP_STAT_READER_H_
#define UMAP_TOOLS_UMAP_STAT_READER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/stats/stats_segment.h"

namespace umap::tools {

struct StatsSnapshot {
  std::string path;
  std::unique_ptr<runtime::StatsLayout> layout;  // a consistent copy (about 100 KiB)
  uint64_t read_mono_us = 0;                     // CLOCK_MONOTONIC when copied
};

// Reads one segment of process `pid`. Checks, in order: the file opens for us (else
// kPermissionDenied), is a regular file of mode 0600 owned by the process's user, is big
// enough, has the magic, version and size of this build's layout, names `pid`, and was
// created by the process that has `pid` now (its start time), else kFailedPrecondition
// saying which. Retries while the publisher is writing.
absl::StatusOr<StatsSnapshot> ReadSegment(const std::string& path, pid_t pid);

// The segments of process `pid` in `dir` (one per runtime, by runtime index). kNotFound
// when the process does not exist, or has none (no Umap runtime yet, or stats off:
// UMAP_STATS_PERIOD_MS=0); otherwise the first segment that fails ReadSegment's checks.
absl::StatusOr<std::vector<StatsSnapshot>> ReadProcess(pid_t pid, const std::string& dir);

// The pids with a segment in `dir` whose process is alive, ascending.
std::vector<pid_t> ListProcesses(const std::string& dir);

}  // namespace umap::tools

#endif  // UMAP_TOOLS_UMAP_STAT_READER_H_
