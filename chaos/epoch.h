// The state one umap-chaos iteration and each of its epochs carry through the phases of the
// epoch loop (chaos/harness.cc) and the fault class's hooks (chaos/fault_class.h).
//
// An iteration is one data file with its journal, written by 1-3 worker runs ("epochs") in
// turn; every epoch crashes or ends its worker, and is then either recovered and judged or
// left to the next epoch's map-time replay.
#ifndef UMAP_CHAOS_EPOCH_H_
#define UMAP_CHAOS_EPOCH_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chaos/oracle.h"
#include "chaos/workload.h"

namespace chaos {

// The geometry of every iteration's file: kBlocks blocks of kBlockSize, a cache of
// kCacheBlocks (a quarter: half-file rounds evict dirty blocks). Replayable runs cache the
// whole file, so that no eviction races the rounds: kBlocks resident blocks plus the
// runtime's shadow buffers (1/16 of the budget, at least 4).
inline constexpr uint64_t kBlocks = 64;
inline constexpr uint64_t kCacheBlocks = 16;
inline uint64_t CacheBlocks(bool replayable) {
  return replayable ? kBlocks + kBlocks / 8 : kCacheBlocks;
}

// What one iteration did, as reported (console, JUnit, Markdown).
struct IterationRecord {
  int index = 0;
  std::string cls;
  std::string policy;
  std::string what;  // the faults and their parameters, epoch after epoch ("... | ...")
  double seconds = 0;
  std::vector<Violation> violations;
  bool skipped = false;
  std::string skip_reason;
  int epochs_run = 0;
  // The kind of fault of the class this iteration draws (FaultClass::Draw), e.g. enospc
  // "data-full"; empty: the class has one kind.
  std::string variant;
  std::vector<bool> holes;  // blocks left as holes in the initial file (empty: none)
  std::string dir;          // the iteration's directory in the run dir (evidence)

  template <typename... Parts>
  void Describe(const Parts&... parts) {
    absl::StrAppend(&what, parts...);
  }
  void Violate(std::string invariant, std::string detail) {
    violations.push_back({std::move(invariant), std::move(detail)});
  }
};

// A worker run whose crash was not recovered by umap-recover: the next worker's runtime
// replays the journal when it maps the file again, and reports what it then sees. That view
// is checked against this run's oracle.
struct PendingCheck {
  Model model;
  EpochEvents events;
  uint64_t upto;
  std::vector<Decoded> pre;
};

// One epoch. The loop fills the first block; the fault class's Arm fills the second; the
// loop and the class's Inject and Judge fill `fired`.
struct Epoch {
  IterationRecord& rec;
  Rng& rng;
  const Policy policy;
  const std::string data_dir, journal_dir;
  const std::string file;  // the data file
  const std::string log;   // the worker's output
  const uint64_t first_round;
  const uint64_t fault_seed;      // the worker's fault PRNG (--fault-seed), from rng
  const bool checks_earlier_run;  // an earlier epoch was left to this one's map-time replay

  // Arm: the worker's rounds, its cache (in blocks: the memory bound the loop checks), its
  // extra flags and environment, the crash point it arms
  // (UMAP_CRASH_AT; the loop counts it fired when the worker dies of SIGKILL it did not
  // get from the driver), the fault-draw rows it arms (counted fired with `fired`), and
  // whether this epoch must be recovered by umap-recover (never left to the next map).
  uint64_t rounds;
  uint64_t cache_blocks;
  std::vector<std::string> args;
  std::vector<std::string> env = {};
  std::string crash_point = {};
  std::vector<std::string> draws = {};
  bool must_recover_now = false;
  // Commands the worker and umap-recover run under (the namespaces of one node of a
  // multi-node testbed: `gluster-testbed client-exec ... --`); empty: run as they are.
  std::vector<std::string> worker_prefix = {};
  std::vector<std::string> recover_prefix = {};
  // The driver reads the data file with O_DIRECT: other clients of a DFS write it, and the
  // driver's own client would show its cached pages instead of what the servers hold.
  bool fresh_reads = false;

  bool fired = false;  // the fault happened (the "faults fired" column)
  // Judged by a umap-recover refusal (journal rot), set by FaultClass::DamageJournal.
  bool expect_refusal = false;
  // The journal's files were damaged (journal-damage), set by FaultClass::DamageJournal:
  // recovery either restores every acknowledged umsync (exit 0 or 1, the oracle holds) or
  // exits non-zero naming the damage; which one is not known in advance.
  bool judge_damage = false;

  // For -v: when the worker started and when its run was judged.
  std::chrono::steady_clock::time_point started = {}, worker_judged = {};
};

}  // namespace chaos

#endif  // UMAP_CHAOS_EPOCH_H_
