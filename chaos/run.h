// The run loop of umap-chaos: the iterations the options select, the summary, the reports
// and the exit code (docs/chaos.md). chaos_main.cc parses the options; chaos/lanes.h runs
// several lanes of this loop at once.
#ifndef UMAP_CHAOS_RUN_H_
#define UMAP_CHAOS_RUN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "chaos/config.h"
#include "chaos/epoch.h"
#include "chaos/report.h"
#include "chaos/tally.h"

namespace chaos {

// Seconds in "N", "Ns", "Nm" or "Nh"; ~0 when malformed.
uint64_t ParseDuration(const std::string& s);

// What one lane (or a whole single-process run) did.
struct RunOutcome {
  Tally tally;
  std::vector<IterationRecord> records;
  double seconds = 0;
  int exit_code = -1;  // >= 0: the run ended before its iterations (a set-up failure)
};

// Runs the iterations of c's lane (all of them when c.lanes == 1) in c.work_dir, which
// must exist: probes, starts the GlusterFS testbed if asked, prints each iteration that is
// verbose, violated or skipped.
RunOutcome RunLane(const Config& c, uint64_t budget);

// The violations of the records, each with the command that reproduces it.
std::vector<ViolationRecord> ViolationsOf(const Config& c,
                                          const std::vector<IterationRecord>& records);

// Prints the summary, writes the reports, removes the work dir when nothing was violated
// (unless --keep), and returns the exit code: 0 passed; 1 violations of an invariant (or
// --expect-violation unmet); 3 the harness failed (never a verdict on Umap, never a skip);
// 77 a requested class was skipped for a missing capability and nothing failed.
int FinishRun(const Config& c, RunOutcome& outcome);

// The whole run as the options say; returns the exit code.
int RunChaos(Config c);

}  // namespace chaos

#endif  // UMAP_CHAOS_RUN_H_
