// kill: SIGKILL of the worker, at one of the runtime's crash points (drawn point and hit
// count; the point fires inside the worker) or at a random instant of its run.
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "chaos/fault_class.h"

namespace chaos {
namespace {

// Crash points the worker can reach (recovery.mid_replay is armed in umap-recover).
// journal.mid_stream fires only in iterations whose umsyncs go in chunks (the harness's
// --umsync-chunk-blocks).
constexpr const char* kWorkerPoints[] = {
    "journal.before_commit", "journal.mid_stream", "journal.after_commit", "apply.mid_write",
    "apply.after_sync",      "gc.before_delete",   "journal.before_mark"};

class KillFault : public FaultClass {
 public:
  static constexpr const char* kName = "kill";
  static constexpr const char* kHelp =
      "  kill     SIGKILL at a crash point or at a random time (--replayable: crash points)\n";
  static constexpr int kWeight = 3;          // seven crash points to cover
  static constexpr bool kReplayable = true;  // crash points only
  using FaultClass::FaultClass;

  void Arm(Epoch& e) override {
    // Replayable runs kill at crash points only: a timed kill lands where the clock says.
    if (e.rng.Range(0, 9) >= 6 && !run_.config().replayable) {
      e.rec.Describe("SIGKILL at a random time");
      return;
    }
    const std::string point = kWorkerPoints[e.rng.Range(0, std::size(kWorkerPoints) - 1)];
    // Hits per epoch: many writes per apply; a few payload batches per chunked umsync.
    const uint64_t hit = e.rng.Range(
        1, point == "apply.mid_write" ? 40 : point == "journal.mid_stream" ? 8 : 25);
    e.env.push_back(absl::StrCat("UMAP_CRASH_AT=", point, ":", hit));
    e.crash_point = point;
    run_.tally().PointArmed(point);
    e.rec.Describe("kill at crash point ", point, ":", hit);
  }

  // A quarter of the timed kills may land during the map-time replay.
  bool StrikesDuringMapReplay(Epoch& e) override { return e.crash_point.empty() && e.rng.OneIn(4); }

  bool Inject(Epoch& e, Worker& worker) override {
    if (!e.crash_point.empty()) return false;  // the point kills it
    if (e.rng.OneIn(10)) {
      worker.Sleep(static_cast<int>(e.rng.Range(0, 60)));  // during start-up: journal open, map
    } else {
      worker.WaitForFirstAck(20000);
      worker.Sleep(static_cast<int>(e.rng.Range(0, 300)));
    }
    const bool fired = !worker.eof();  // still running: this SIGKILL is the fault
    worker.Kill();
    return fired;
  }
};

}  // namespace

UMAP_CHAOS_REGISTER_FAULT_CLASS(KillFault);

}  // namespace chaos
