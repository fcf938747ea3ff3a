// Harness: runs umap-chaos iterations (docs/chaos.md, "One iteration"). An
// iteration is drawn from (seed, index): its fault class (weighted), policy, variant and
// 1-3 epochs; each epoch runs the real worker, injects the class's fault, reaps the worker,
// judges its run, then recovers with the real umap-recover (twice; sometimes killed and
// rerun) and judges the file with the oracle, or leaves the crash to the next epoch's
// map-time replay and judges that.
//
// Thread safety: none. One Harness per lane; lanes of a parallel run are processes.
#ifndef UMAP_CHAOS_HARNESS_H_
#define UMAP_CHAOS_HARNESS_H_

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "chaos/epoch.h"
#include "chaos/fault_class.h"
#include "chaos/run_context.h"

namespace chaos {

class Harness {
 public:
  // REQUIRES: every name in run.config().faults is registered (FaultRegistry).
  explicit Harness(RunContext& run);
  // Releases what the fault classes prepared (mounts, loop devices).
  ~Harness();

  // Runs iteration `index`; the returned record says what happened. Counts go to
  // run.tally().
  IterationRecord RunIteration(int index);

 private:
  struct Iteration;

  // Prepares the class once per run; every later call returns the first call's result (a
  // missing capability: the class is skipped; another error: a harness failure).
  absl::Status PrepareClass(const std::string& name);
  // One epoch. Returns false when the iteration must stop (a violation, a refused journal,
  // a set-up failure).
  bool RunEpoch(Iteration& it, bool last);
  std::unique_ptr<Worker> StartWorker(Iteration& it, Epoch& e);
  Exit ReapWorker(Iteration& it, Epoch& e, Worker& worker);
  // A worker that SIGKILL did not end (Exit::unkillable): on GlusterFS the client is
  // remounted, which frees it, and it is reaped again; otherwise a liveness violation.
  Exit ReleaseStuckWorker(Iteration& it, Worker& worker, const Exit& stuck);
  // The worker's run as a whole: memory bound, crashes, exit code, the tally.
  void JudgeWorkerRun(Iteration& it, Epoch& e, Worker& worker, const Exit& exit);
  // The earlier epoch's crash as this worker's map-time replay repaired it (its "V" line).
  void JudgeReplayedFile(Iteration& it, const Worker& worker);
  // Recovers the crash twice with umap-recover and judges the file; false: stop.
  bool RecoverAndJudge(Iteration& it, Epoch& e, const Worker& worker, const Exit& exit,
                       uint64_t upto, const std::vector<Decoded>& crashed);
  // Runs umap-recover until a run completes (killed runs are rerun); returns that run's code.
  // pending_likely: the worker died where committed transactions are left to replay, so a
  // kill inside the replay (recovery.mid_replay) is worth arming. Runs under
  // epoch.recover_prefix (on another node of a multi-node testbed).
  int Recover(Iteration& it, const Epoch& epoch, const std::string& log, bool allow_kill,
              bool pending_likely);
  // The data file as the driver judges it (epoch.fresh_reads: through O_DIRECT).
  absl::StatusOr<std::string> ReadDataFile(const Epoch& epoch) const;
  std::vector<Decoded> DecodeFile(const Iteration& it, const std::string& bytes) const;

  RunContext& run_;
  std::map<std::string, std::unique_ptr<FaultClass>> classes_;
  std::set<std::string> prepared_;                     // classes whose Prepare ran
  std::map<std::string, absl::Status> prepare_errors_;  // class -> why it cannot run
};

}  // namespace chaos

#endif  // UMAP_CHAOS_HARNESS_H_
