// FaultClass: one kind of failure umap-chaos inflicts on a worker (kill, power cut, ...),
// with everything that differs between kinds: how it is armed, injected and judged. The
// epoch loop (chaos/harness.cc) is the same for every class and calls, per epoch:
//
//   Arm            before the worker starts: draw the fault's parameters from e.rng, set
//                  e.rounds, add worker flags, environment and crash point, describe it;
//   (StrikesDuringMapReplay, when the epoch checks an earlier run's map-time replay)
//   Inject         while the worker runs: do the fault (kill it, fill a disk, stop a
//                  brick), check what the protocol promises meanwhile (errno, liveness);
//                  return whether it fired. The default waits for the worker to end by
//                  itself (a crash point, an injected death, its last round);
//   Judge          after the worker was reaped: what its report and exit say about the
//                  fault (fired, the fault-draw rows);
//   Restore        after the crash: bring the storage back (remount after a power cut);
//   DamageJournal  just before recovery: damage the journal on purpose; when it did,
//                  set e.expect_refusal (recovery must refuse).
// and, per iteration:
//   Draw           from a PRNG of its own: the variant and the initial file's holes;
//   Place          where the iteration's data file and journal live.
// and once, before the class's first iteration, Prepare: what it needs from the machine
// (loop devices, tmpfs mounts). It first asks RunContext::Require for the capabilities it
// needs: a missing one skips the class (the skip names it); any later error is a failure
// of the harness, reported in every iteration of the class, never a skip.
//
// Reproducibility: every draw comes from e.rng (Draw: its own PRNG) in program order, so
// an iteration depends only on (seed, index, class list) and --iteration I replays it.
//
// Lifetime: one object per class per run, made by its registration's factory with the
// run's RunContext, used by one thread, one epoch at a time; so what Arm decides for Inject
// and Judge may live in members (Arm resets them). The destructor releases what Prepare
// acquired.
//
// Adding a class: one file that defines it and ends with UMAP_CHAOS_REGISTER_FAULT_CLASS,
// listed in chaos/CMakeLists.txt (tests/chaos/registry_test.cc does it for a trivial one).
#ifndef UMAP_CHAOS_FAULT_CLASS_H_
#define UMAP_CHAOS_FAULT_CLASS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "chaos/epoch.h"
#include "chaos/run_context.h"
#include "chaos/system.h"
#include "chaos/worker.h"
#include "chaos/workload.h"

namespace chaos {

// Where an iteration's data directory and journal directory are created (each gets a
// "/data" or "/journal" below it). Place is handed data and journal in iteration_dir (the
// iteration's directory in the run dir), except the data on the GlusterFS mount when one
// runs; it moves either onto the storage its fault breaks.
struct Placement {
  std::string iteration_dir;
  std::string data_parent;
  std::string journal_parent;
};

// Draws holes for the initial file (for Draw): a share of 25-75 % of the blocks, each left
// unwritten (ftruncate'd) with that probability.
inline void DrawHoles(Rng& variant_rng, IterationRecord* rec) {
  const uint64_t percent = variant_rng.Range(25, 75);
  rec->holes.assign(kBlocks, false);
  for (uint64_t b = 0; b < kBlocks; ++b) rec->holes[b] = variant_rng.Range(1, 100) <= percent;
}

class FaultClass {
 public:
  explicit FaultClass(RunContext& run) : run_(run) {}
  virtual ~FaultClass() = default;
  FaultClass(const FaultClass&) = delete;
  FaultClass& operator=(const FaultClass&) = delete;

  virtual absl::Status Prepare() { return absl::OkStatus(); }
  virtual void Draw(Rng& /*variant_rng*/, IterationRecord* /*rec*/) {}
  virtual void Place(const IterationRecord& /*rec*/, Placement* /*p*/) {}

  virtual void Arm(Epoch& e) = 0;
  // Asked (after Arm, once the worker started) only when the epoch checks an earlier run's
  // map-time replay: true when the fault may strike during that replay, so the loop must
  // not wait for the worker's report of the replayed file before Inject.
  virtual bool StrikesDuringMapReplay(Epoch& /*e*/) { return false; }
  virtual bool Inject(Epoch& /*e*/, Worker& /*worker*/) { return false; }
  virtual void Judge(Epoch& /*e*/, Worker& /*worker*/, const Exit& /*exit*/) {}
  virtual absl::Status Restore(Epoch& /*e*/) { return absl::OkStatus(); }
  virtual absl::Status DamageJournal(Epoch& /*e*/, const Exit& /*exit*/) {
    return absl::OkStatus();
  }

  // The worker's storage keeps failing during the run (injected EIO, torn writes): the
  // runtime may then wait a minute for a cache block, so the loop reaps after 15 s, not
  // 90 s, without a liveness violation, and accepts the worker's exits 4 (uunmap kept
  // failing) and 5 (umap refused the file: its map-time replay hit the fault).
  virtual bool storage_keeps_failing() const { return false; }

 protected:
  RunContext& run_;
};

// The registered fault classes. Registration happens during static initialisation (the
// macro below), so read the registry from main() on.
struct FaultClassInfo {
  const char* name;  // as in --faults
  const char* help;  // --help lines, each "  name     text\n" (continuations indented)
  int weight;        // relative draw weight among the --faults classes
  // Runs under --replayable: every event of its epochs then follows from the seed.
  bool replayable;
  std::unique_ptr<FaultClass> (*make)(RunContext& run);
};

class FaultRegistry {
 public:
  // Returns true (for the static initialiser). Two classes of one name abort.
  static bool Add(const FaultClassInfo& info);
  // nullptr when no class has that name.
  static const FaultClassInfo* Find(const std::string& name);
  // Every class: first those of `preferred` (a comma-separated list), in its order, then
  // the rest by name.
  static std::vector<const FaultClassInfo*> All(const std::string& preferred);
};

}  // namespace chaos

// Registers Type (a FaultClass with static members kName, kHelp, kWeight and kReplayable,
// constructed from a RunContext&). Put it at namespace scope in the class's file.
#define UMAP_CHAOS_REGISTER_FAULT_CLASS(Type)                                         \
  [[maybe_unused]] static const bool kRegistered##Type = ::chaos::FaultRegistry::Add( \
      {Type::kName, Type::kHelp, Type::kWeight, Type::kReplayable,                    \
       [](::chaos::RunContext& run) -> std::unique_ptr<::chaos::FaultClass> {         \
         return std::make_unique<Type>(run);                                          \
       }})

#endif  // UMAP_CHAOS_FAULT_CLASS_H_
