// The options of one umap-chaos run (chaos/chaos_main.cc parses them; docs/chaos.md lists
// them). Plain data: read by the harness and the fault classes, never changed after parsing.
#ifndef UMAP_CHAOS_CONFIG_H_
#define UMAP_CHAOS_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#ifndef UMAP_CHAOS_WORKER
#define UMAP_CHAOS_WORKER "umap-chaos-worker"
#endif
#ifndef UMAP_RECOVER
#define UMAP_RECOVER "umap-recover"
#endif
#ifndef UMAP_GLUSTER_TESTBED
#define UMAP_GLUSTER_TESTBED "gluster-testbed"
#endif
#include "chaos/capability.h"  // UMAP_PROBE_CAPABILITY

namespace chaos {

struct Config {
  uint64_t seed = 0;
  int iterations = 0;  // 0: until --duration
  std::string duration = "0";
  std::vector<std::string> faults;  // class names, in --faults order
  std::string faults_arg;           // --faults as given, for the printed reproductions
  std::string dfs = "local";        // "local" or "gluster"
  std::string report_dir;
  std::string mutation;  // a base/mutation.h switch armed in the workers (and umap-recover)
  std::string work_dir;
  std::string worker = UMAP_CHAOS_WORKER;
  std::string recover = UMAP_RECOVER;
  std::string testbed = UMAP_GLUSTER_TESTBED;
  std::string probe = UMAP_PROBE_CAPABILITY;  // faultinject/probe-capability
  int only_iteration = -1;  // --iteration: run this one only
  bool expect_violation = false;
  bool keep = false;
  bool keep_crash = false;  // copy data and journal dirs before every recovery (evidence)
  bool verbose = false;
  // Every event of an iteration is a function of the seed, so that a violation replays bit
  // for bit (docs/chaos.md, "Replayable runs"): the in-process classes only, no timed kill,
  // no eviction, journal faults on the WAL only, deaths at drawn rounds.
  bool replayable = false;
  // 1 in N iterations run the worker with --defer-file-sync (0: none).
  uint64_t defer_file_sync_one_in = 0;
  std::string self = "umap-chaos";  // this binary, for the printed reproduction commands
  // Parallel lanes (chaos/lanes.h): --jobs N runs N lane processes; a lane process runs
  // the iterations whose index is `lane` modulo `lanes` and writes its results to
  // `lane_report` for the parent to merge.
  int jobs = 1;
  int lane = 0, lanes = 1;
  std::string lane_report;
};

}  // namespace chaos

#endif  // UMAP_CHAOS_CONFIG_H_
