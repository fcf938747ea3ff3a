// Parallel lanes: `umap-chaos --jobs N` runs N lane processes at once. Each is an ordinary
// run (chaos/run.h) of the iterations whose index is its lane number modulo N, in a work
// dir of its own (WORK/lane-K), with fault-class resources (loop disks, tmpfs mounts, a
// GlusterFS testbed) and workers of its own, so that lanes share nothing but the machine.
// An iteration depends only on (seed, index, --faults), so --iteration I reproduces it
// alone, whichever lane ran it. The parent merges the lanes' tallies and records into one
// summary and one report.
#ifndef UMAP_CHAOS_LANES_H_
#define UMAP_CHAOS_LANES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "chaos/config.h"
#include "chaos/run.h"

namespace chaos {

// The parent's side: starts c.jobs lanes, waits for them (bound: budget + 10 minutes when
// the run has a budget; a lane still running then is killed), and returns their merged
// outcome. A lane that dies or reports nothing is a harness error in the outcome.
RunOutcome RunLanes(const Config& c, uint64_t budget);

// The lane's side (c.lane_report set): runs the lane, writes its outcome to
// c.lane_report, and returns its exit code (0, or that of a set-up failure).
int RunLaneProcess(const Config& c, uint64_t budget);

// The lane report's text form; Parse(Serialize(o)) equals o (seconds to a microsecond).
std::string SerializeOutcome(const RunOutcome& o);
absl::StatusOr<RunOutcome> ParseOutcome(const std::string& text);

}  // namespace chaos

#endif  // UMAP_CHAOS_LANES_H_
