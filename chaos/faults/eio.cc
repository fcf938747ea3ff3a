// eio: I/O errors. In process: EIO on the data file (FaultEnv: failed writes, fdatasyncs
// that lose their pages, EINTR reads), IOError on the journal's storage (FaultFs: appends,
// syncs that lose their bytes, file creations) or both, then death after a drawn round with
// an optional power cut (chaos/faults/in_process.h). On GlusterFS half the iterations turn
// on the volume's error-gen instead: every umsync error meanwhile must be EIO, and umsync
// must succeed again within 30 s after.
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "chaos/fault_class.h"
#include "chaos/faults/in_process.h"

namespace chaos {
namespace {

class EioFault : public FaultClass {
 public:
  static constexpr const char* kName = "eio";
  static constexpr const char* kHelp =
      "  eio      the data file (FaultEnv: EIO, lost fdatasync, EINTR reads), the journal\n"
      "           (FaultFs: IOError on appends, syncs that lose their bytes, file\n"
      "           creations) or both; death after a drawn round, with an in-process power\n"
      "           cut of the data, the journal or both; --dfs gluster: half the iterations\n"
      "           instead turn on the volume's error-gen (WRITE,FSYNC fail with EIO) for\n"
      "           1-3 s; liveness after\n";
  static constexpr int kWeight = 1;
  static constexpr bool kReplayable = true;
  using FaultClass::FaultClass;

  bool storage_keeps_failing() const override { return true; }

  void Draw(Rng& variant_rng, IterationRecord* rec) override {
    error_gen_ = run_.gluster() && variant_rng.OneIn(2);
    if (run_.gluster()) rec->variant = error_gen_ ? "error-gen" : "in-process";
  }

  void Arm(Epoch& e) override {
    if (error_gen_) {
      e.rounds = 2000;  // Inject describes the fault
      return;
    }
    side_ = ArmInProcessFaults(kName, e, run_.config().replayable);
  }

  bool Inject(Epoch& e, Worker& worker) override {
    return error_gen_ ? ErrorGen(e, worker) : false;  // in process: it dies by itself
  }

  void Judge(Epoch& e, Worker& worker, const Exit& exit) override {
    if (error_gen_) return;
    e.fired = InProcessFaultsFired(worker, exit);
    if (side_ != FaultySide::kData && worker.journal_zeroed().has_value()) {
      // A journal power cut after failed syncs that lost their bytes: fired when it zeroed
      // any.
      run_.tally().DrawArmed("eio/journal cut zeroes lost syncs");
      if (*worker.journal_zeroed() > 0) run_.tally().DrawFired("eio/journal cut zeroes lost syncs");
    }
  }

 private:
  bool ErrorGen(Epoch& e, Worker& worker);

  bool error_gen_ = false;               // this iteration's kind (Draw)
  FaultySide side_ = FaultySide::kData;  // this epoch's in-process side (Arm)
};

// error-gen fails the volume's writes and fsyncs with EIO for 1-3 s (gluster-testbed
// errors), from the worker's first acknowledged umsync on.
bool EioFault::ErrorGen(Epoch& e, Worker& worker) {
  const EpochEvents& ev = worker.events();
  const std::string draw = "eio/error-gen";
  run_.tally().DrawArmed(draw);
  worker.WaitForFirstAck(20000);
  const int hold_ms = static_cast<int>(e.rng.Range(1000, 3000));
  const size_t errors_before = ev.errors.size();
  int on_ms = 0, off_ms = 0;
  absl::Status on =
      run_.TimedTestbed("errors", {"--errno", "EIO", "--fops", "WRITE,FSYNC"}, &on_ms);
  worker.Sleep(hold_ms);
  absl::Status off = run_.TimedTestbed("errors", {"--off"}, &off_ms);
  const size_t errors_during = ev.errors.size() - errors_before;
  std::map<int, int> errnos;
  for (size_t i = errors_before; i < ev.errors.size(); ++i) errnos[ev.errors[i].second]++;
  e.rec.Describe("GlusterFS error-gen: WRITE,FSYNC fail with EIO for ", hold_ms, " ms (",
                 errors_during, " umsync errors");
  for (const auto& [err, n] : errnos) e.rec.Describe(", errno ", err, " x", n);
  e.rec.Describe("; switching on ", on_ms, " ms, off ", off_ms, " ms)");
  for (const auto& [err, n] : errnos) {
    if (err != EIO) {
      e.rec.Violate("errno", absl::StrCat(n, " umsync errors with errno ", err, " (", strerror(err),
                                          ") while GlusterFS returned EIO"));
    }
  }
  const uint64_t acked_at_off = ev.last_acked.value_or(0);
  if (!on.ok() || !off.ok()) {
    e.rec.Violate("harness",
                  absl::StrCat("gluster-testbed errors: ", on.ToString(), " / ", off.ToString()));
  } else if (!worker.WaitForAckAfter(acked_at_off, 30000) && !worker.eof()) {
    e.rec.Violate("liveness",
                  "no umsync acknowledged within 30 s after error-gen was switched off");
  }
  worker.Sleep(static_cast<int>(e.rng.Range(0, 200)));
  worker.Kill();
  const bool fired = on.ok() && errors_during > 0;
  if (fired) run_.tally().DrawFired(draw);
  return fired;
}

}  // namespace

UMAP_CHAOS_REGISTER_FAULT_CLASS(EioFault);

}  // namespace chaos
