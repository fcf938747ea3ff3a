// The oracle of umap-chaos: what the file may hold after a crash and recovery, given what
// the worker reported over its pipe (acknowledged and in-flight umsyncs). It lives in the
// driver, outside the faulty storage, and is the only judge of a run.
//
// Invariants (docs/chaos.md, "Invariants checked after every recovery"):
//   durability   every block is at least at its version after the last acknowledged umsync;
//   atomicity    no block is torn or foreign; atomic policy: the whole file equals the model
//                after the last acknowledged umsync or after one that was in flight or
//                failed later (prefix order: never a later one without its predecessors,
//                never a partial one, never unsynced writes);
//   relaxed      every block holds a version that was written to it, never older than its
//                last acknowledged one;
//   monotonicity recovery never moves a block to an older version than the file held
//                before it ran.
#ifndef UMAP_CHAOS_ORACLE_H_
#define UMAP_CHAOS_ORACLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "chaos/workload.h"

namespace chaos {

struct Violation {
  std::string invariant;  // "durability", "atomicity", "prefix", "monotonicity", ...
  std::string detail;
};

// What one worker run reported.
struct EpochEvents {
  uint64_t first_round = 1;              // the first round this run writes
  std::optional<uint64_t> last_acked;    // highest "A"
  std::optional<uint64_t> last_begun;    // highest "B"
  std::vector<std::pair<uint64_t, int>> errors;  // "E": round, errno
  std::optional<uint64_t> stall_round;   // "T"
  bool ready = false;                    // "R"
  std::optional<int> unmap_rc;           // "U"
  // Highest failed round whose journal commit cannot have failed (the fault was a full *data*
  // disk; the journal's disk had room): per docs/durability.md its transaction is committed,
  // so it is as durable as an acknowledged one. Set by the driver, atomic policy only.
  std::optional<uint64_t> committed;
};

enum class Policy { kAtomic, kRelaxed };

class Model {
 public:
  // holes: blocks the harness left as holes in the initial file (empty: none). Such a block
  // may read as all zeros while it is at version 0; no other block ever may.
  Model(uint64_t seed, uint64_t blocks, std::vector<uint64_t> base,
        std::vector<bool> holes = {})
      : seed_(seed), blocks_(blocks), base_(std::move(base)), holes_(std::move(holes)) {}

  // The block versions after rounds first..k were all applied on top of base (k < first:
  // base).
  std::vector<uint64_t> StateAfter(uint64_t first, uint64_t k) const;
  // Whether round `version` (first <= version <= hi) wrote `block`, or it is the base.
  bool Written(uint64_t block, uint64_t version, uint64_t first, uint64_t hi) const;
  const std::vector<uint64_t>& base() const { return base_; }
  uint64_t blocks() const { return blocks_; }
  bool hole(uint64_t block) const { return block < holes_.size() && holes_[block]; }
  const std::vector<bool>& holes() const { return holes_; }

 private:
  const std::vector<uint64_t>& Round(uint64_t r) const;
  uint64_t seed_, blocks_;
  std::vector<uint64_t> base_;
  std::vector<bool> holes_;
  mutable std::map<uint64_t, std::vector<uint64_t>> rounds_;
};

// Checks the recovered file `after` (one Decoded per block). `before`: the file as the crash
// left it, before recovery ran (for monotonicity), or empty. `writes_possible_upto`: the last
// round whose writes may have reached the cache (last begun + 1, capped by the budget).
std::vector<Violation> Check(const Model& model, Policy policy, const EpochEvents& ev,
                             uint64_t writes_possible_upto, const std::vector<Decoded>& after,
                             const std::vector<Decoded>& before);

// Checks the file alone, when a run with the deferral (RuntimeOptions::defer_file_sync) had
// its journal refused by recovery (a damaged committed record). Acknowledged rounds the
// background applier had not written yet were held only by that journal, so the file owes
// no round of this run: durability and prefix order are not judged. What still holds: every
// block is at a version that was written to it (its base or a round of this run begun by
// `writes_possible_upto`), none is torn, foreign or zeroed, and recovery moved none back.
std::vector<Violation> CheckFileAlone(const Model& model, const EpochEvents& ev,
                                      uint64_t writes_possible_upto,
                                      const std::vector<Decoded>& after,
                                      const std::vector<Decoded>& before);

// The versions of `file` (every block kVersion), for the next run's base.
std::vector<uint64_t> Versions(const std::vector<Decoded>& file);

}  // namespace chaos

#endif  // UMAP_CHAOS_ORACLE_H_
