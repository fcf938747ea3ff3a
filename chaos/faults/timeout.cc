// timeout: the DFS stops answering for a while. Locally a data-file fdatasync stalls inside
// the worker's FaultEnv (then fails with ETIMEDOUT or proceeds); on GlusterFS one of three
// real hangs: a stopped brick, an aborted FUSE connection, a delay-gen latency spike. After
// each the worker must acknowledge a umsync again within a bound (liveness).
#include <string>

#include "absl/strings/str_cat.h"
#include "chaos/fault_class.h"

namespace chaos {
namespace {

enum class Hang { kLocalStall, kStopBrick, kAbortFuse, kDelay };
constexpr const char* kGlusterHangs[] = {"stop-brick", "abort-fuse", "delay"};

class TimeoutFault : public FaultClass {
 public:
  static constexpr const char* kName = "timeout";
  static constexpr const char* kHelp =
      "  timeout  local: a data-file fdatasync stalls in FaultEnv; --dfs gluster: one of\n"
      "           stop-brick (SIGSTOP 1-5 s), abort-fuse (ENOTCONN for good; the mount is\n"
      "           brought back before recovery), delay-gen spike (WRITE,FSYNC,READ +20-300 ms\n"
      "           at 20-100 % for 1-3 s); liveness after each\n";
  static constexpr int kWeight = 1;
  static constexpr bool kReplayable = true;  // local stall, death at a drawn round
  using FaultClass::FaultClass;

  void Draw(Rng& variant_rng, IterationRecord* rec) override {
    hang_ = Hang::kLocalStall;
    if (!run_.gluster()) return;
    const uint64_t i = variant_rng.Range(0, 2);
    rec->variant = kGlusterHangs[i];
    hang_ = static_cast<Hang>(static_cast<int>(Hang::kStopBrick) + i);
  }

  void Arm(Epoch& e) override {
    if (hang_ != Hang::kLocalStall) {
      e.rounds = 2000;  // Inject describes the fault
      return;
    }
    e.rounds = 400;
    const uint64_t round = e.first_round + e.rng.Range(1, 5);
    const uint64_t ms = e.rng.Range(300, 2500);
    e.args.insert(e.args.end(),
                  {"--fault", "timeout", "--fault-seed", absl::StrCat(e.fault_seed),
                   "--stall-round", absl::StrCat(round), "--stall-ms", absl::StrCat(ms)});
    e.rec.Describe("DFS sync stalls ", ms, " ms after round ", round,
                   (e.fault_seed & 1) ? " then ETIMEDOUT" : " then proceeds");
    if (run_.config().replayable) {
      // The worker dies by itself, instead of being killed when the clock says: inside the
      // stall, or a few rounds after it; half the time with a power cut of the data file.
      const bool in_stall = e.rng.OneIn(2);
      const uint64_t die = round + e.rng.Range(2, 8);
      e.args.insert(e.args.end(), {"--die-round", absl::StrCat(die)});
      if (in_stall) e.args.push_back("--die-in-stall");
      const bool cut = e.rng.OneIn(2);
      if (cut) e.args.push_back("--die-power-cut");
      e.rec.Describe(
          in_stall ? ", dies inside the stall" : absl::StrCat(", dies after round ", die),
          cut ? " with a DFS power cut" : "");
    }
  }

  bool Inject(Epoch& e, Worker& worker) override {
    if (hang_ == Hang::kLocalStall) return LocalStall(e, worker);
    const std::string draw = absl::StrCat("timeout/", e.rec.variant);
    run_.tally().DrawArmed(draw);
    worker.WaitForFirstAck(20000);
    const bool fired = hang_ == Hang::kStopBrick   ? StopBrick(e, worker)
                       : hang_ == Hang::kAbortFuse ? AbortFuse(e, worker)
                                                   : DelaySpike(e, worker);
    if (fired) run_.tally().DrawFired(draw);
    return fired;
  }

 private:
  bool LocalStall(Epoch& e, Worker& worker);
  bool StopBrick(Epoch& e, Worker& worker);
  bool AbortFuse(Epoch& e, Worker& worker);
  bool DelaySpike(Epoch& e, Worker& worker);

  Hang hang_ = Hang::kLocalStall;  // this iteration's kind (Draw)
};

bool TimeoutFault::LocalStall(Epoch& e, Worker& worker) {
  EpochEvents& ev = worker.events();
  bool fired = false;
  if (run_.config().replayable) {
    // Liveness as below, without a kill: the worker dies at its --die-round.
    if (worker.PumpUntil([&] { return ev.stall_round.has_value(); }, 20000)) {
      fired = true;
      if (!worker.WaitForAckAfter(*ev.stall_round, 30000) && !worker.eof()) {
        e.rec.Violate("liveness", absl::StrCat("no umsync acknowledged within 30 s after the ",
                                               "DFS stall of round ", *ev.stall_round, " ended"));
      }
    }
    return fired;
  }
  if (worker.PumpUntil([&] { return ev.stall_round.has_value(); }, 20000)) {
    fired = true;
    const uint64_t round = *ev.stall_round;
    if (e.rng.OneIn(3)) {
      worker.Sleep(static_cast<int>(e.rng.Range(0, 300)));  // killed while the DFS hangs
    } else if (!worker.WaitForAckAfter(round, 30000)) {
      if (!worker.eof()) {
        e.rec.Violate("liveness", absl::StrCat("no umsync acknowledged within 30 s after the ",
                                               "DFS stall of round ", round, " ended"));
      }
    } else {
      worker.Sleep(static_cast<int>(e.rng.Range(0, 200)));
    }
  }
  worker.Kill();
  return fired;
}

// A real DFS hang: the brick process stops answering (ping-timeout 3 s), then returns.
bool TimeoutFault::StopBrick(Epoch& e, Worker& worker) {
  const EpochEvents& ev = worker.events();
  absl::Status stop = run_.Testbed("stop-brick", {}, 60000);
  const int hang_ms = static_cast<int>(e.rng.Range(1000, 5000));
  e.rec.Describe("GlusterFS brick stopped (SIGSTOP) for ", hang_ms, " ms, then continued");
  worker.Sleep(hang_ms);
  const uint64_t acked_at_cont = ev.last_acked.value_or(0);
  absl::Status cont = run_.Testbed("cont-brick", {}, 120000);
  if (!stop.ok() || !cont.ok()) {
    e.rec.Violate("harness", absl::StrCat("gluster-testbed stop-brick/cont-brick: ",
                                          stop.ToString(), " / ", cont.ToString()));
  } else if (!worker.WaitForAckAfter(acked_at_cont, 30000) && !worker.eof()) {
    e.rec.Violate("liveness", "no umsync acknowledged within 30 s after the brick came back");
  }
  worker.Kill();
  return stop.ok();
}

// The FUSE connection dies under the worker: every later access is ENOTCONN, for good. The
// worker cannot outlive its mount (its descriptors stay on the dead one): it is killed, the
// mount comes back (gluster-testbed remount, brick data kept), then recovery.
bool TimeoutFault::AbortFuse(Epoch& e, Worker& worker) {
  const EpochEvents& ev = worker.events();
  worker.Sleep(static_cast<int>(e.rng.Range(0, 300)));
  absl::Status abort = run_.Testbed("abort-fuse", {}, 60000);
  const size_t errors_before = ev.errors.size();
  worker.PumpUntil([&] { return ev.errors.size() > errors_before; }, 2000);
  e.rec.Describe("GlusterFS FUSE connection aborted");
  if (ev.errors.size() > errors_before) {
    e.rec.Describe(" (umsync errno ", ev.errors[errors_before].second, ")");
  } else {
    e.rec.Describe(worker.eof() ? " (the worker died)" : " (no umsync error within 2 s)");
  }
  worker.Kill();
  worker.Reap(10000);
  absl::Status remount = run_.Testbed("remount", {}, 120000);
  e.rec.Describe(", mount brought back");
  if (!abort.ok() || !remount.ok()) {
    e.rec.Violate("harness", absl::StrCat("gluster-testbed abort-fuse/remount: ", abort.ToString(),
                                          " / ", remount.ToString()));
  }
  return abort.ok();
}

// A delay-gen latency spike on writes, fsyncs and reads; the worker must keep going.
bool TimeoutFault::DelaySpike(Epoch& e, Worker& worker) {
  const EpochEvents& ev = worker.events();
  const uint64_t percent = e.rng.Range(20, 100);
  const uint64_t usec = e.rng.Range(20000, 300000);
  const int hold_ms = static_cast<int>(e.rng.Range(1000, 3000));
  int on_ms = 0, off_ms = 0;
  absl::Status on = run_.TimedTestbed("delay",
                                      {"--percent", absl::StrCat(percent), "--usec",
                                       absl::StrCat(usec), "--fops", "WRITE,FSYNC,READ"},
                                      &on_ms);
  const uint64_t acked_on = ev.last_acked.value_or(0);
  worker.Sleep(hold_ms);
  const uint64_t acked_during = ev.last_acked.value_or(0) - acked_on;
  absl::Status off = run_.TimedTestbed("delay", {"--off"}, &off_ms);
  e.rec.Describe("GlusterFS delay-gen: ", percent, "% of WRITE,FSYNC,READ +", usec / 1000,
                 " ms for ", hold_ms, " ms (", acked_during,
                 " umsyncs acknowledged meanwhile; switching on ", on_ms, " ms, off ", off_ms,
                 " ms)");
  const uint64_t acked_at_off = ev.last_acked.value_or(0);
  if (!on.ok() || !off.ok()) {
    e.rec.Violate("harness",
                  absl::StrCat("gluster-testbed delay: ", on.ToString(), " / ", off.ToString()));
  } else if (!worker.WaitForAckAfter(acked_at_off, 30000) && !worker.eof()) {
    e.rec.Violate("liveness",
                  "no umsync acknowledged within 30 s after the delay was switched off");
  }
  worker.Sleep(static_cast<int>(e.rng.Range(0, 200)));
  worker.Kill();
  return on.ok();
}

}  // namespace

UMAP_CHAOS_REGISTER_FAULT_CLASS(TimeoutFault);

}  // namespace chaos
