// What umap-chaos prints and writes at the end of a run (docs/chaos.md, "Output"): the summary
// tables on stdout, and with --report a JUnit XML file and a Markdown summary.
#ifndef UMAP_CHAOS_REPORT_H_
#define UMAP_CHAOS_REPORT_H_

#include <string>
#include <vector>

#include "chaos/config.h"
#include "chaos/epoch.h"
#include "chaos/oracle.h"
#include "chaos/tally.h"

namespace chaos {

struct ViolationRecord {
  int iteration;
  std::string cls;
  Violation v;
  std::string repro;
  std::string dir;  // the evidence
};

// A violation of the harness itself (it could not set up or drive the run), not of an
// invariant of Umap's.
inline bool IsHarnessError(const Violation& v) { return v.invariant == "harness"; }

// The command that runs iteration `index` of this run again.
std::string Repro(const Config& c, int index);

// The per-class table, crash signals, crash-point and fault-draw tables and the totals line.
void PrintSummary(const Config& c, const Tally& tally, size_t iterations, size_t violations,
                  double seconds);

// chaos-junit.xml and chaos-summary.md in c.report_dir (nothing without --report). A
// failure to write is printed, not returned: the run's verdict does not depend on it.
void WriteReports(const Config& c, const Tally& tally, const std::vector<IterationRecord>& records,
                  const std::vector<ViolationRecord>& violations, double seconds);

}  // namespace chaos

#endif  // UMAP_CHAOS_REPORT_H_
