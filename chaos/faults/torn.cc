// torn: torn data-file writes and garbled journal power cuts in process (as eio, with torn
// writes instead of errors: chaos/faults/in_process.h), or journal rot: a kill right after a
// commit, then one bit of a committed block image in the journal flipped below Umap's CRCs
// (chaos/journal_rot.h), which recovery must refuse (exit 2) without writing anything.
#include <string>

#include "absl/strings/str_cat.h"
#include "chaos/fault_class.h"
#include "chaos/faults/in_process.h"
#include "chaos/journal_rot.h"

namespace chaos {
namespace {

class TornFault : public FaultClass {
 public:
  static constexpr const char* kName = "torn";
  static constexpr const char* kHelp =
      "  torn     as eio with torn data-file writes and garbled journal power cuts, or one bit\n"
      "           of a committed journal payload flipped\n";
  static constexpr int kWeight = 1;
  static constexpr bool kReplayable = true;
  using FaultClass::FaultClass;

  bool storage_keeps_failing() const override { return true; }

  void Arm(Epoch& e) override {
    rot_ = e.rng.OneIn(3);
    if (!rot_) {
      ArmInProcessFaults(kName, e, run_.config().replayable);
      return;
    }
    const uint64_t hit = e.rng.Range(1, 10);
    e.crash_point = "journal.after_commit";
    e.env.push_back(absl::StrCat("UMAP_CRASH_AT=", e.crash_point, ":", hit));
    run_.tally().PointArmed(e.crash_point);
    e.must_recover_now = true;  // the rot is judged by umap-recover's refusal
    e.rec.Describe("journal rot after a kill at ", e.crash_point, ":", hit);
  }

  void Judge(Epoch& e, Worker& worker, const Exit& exit) override {
    if (!rot_) e.fired = InProcessFaultsFired(worker, exit);
  }

  absl::Status DamageJournal(Epoch& e, const Exit& exit) override {
    if (!rot_ || exit.exited) return absl::OkStatus();  // no crash: nothing committed to rot
    absl::StatusOr<std::string> rotted = RotOnePayload(e.journal_dir, e.fault_seed);
    if (!rotted.ok()) return rotted.status();
    if (rotted->empty()) return absl::OkStatus();  // the journal held no payload
    e.rec.Describe("; ", *rotted);
    e.expect_refusal = true;
    return absl::OkStatus();
  }

 private:
  bool rot_ = false;  // this epoch rots the journal (Arm)
};

}  // namespace

UMAP_CHAOS_REGISTER_FAULT_CLASS(TornFault);

}  // namespace chaos
