// enospc: a disk runs out of space under the worker. data-full fills the data file's disk
// (a small tmpfs; on GlusterFS the brick's ext4, through the mount); journal-full fills the
// journal's tmpfs; journal-injected and journal-sticky make 1 in k journal writes fail with
// NoSpace inside the worker (FaultFs; sticky: every later one too) until it heals them.
// Every umsync error meanwhile must be ENOSPC, and with space back umsync must succeed
// again within a bound (liveness).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "chaos/fault_class.h"

namespace chaos {
namespace {

// The FUSE connection under the writer died: in-flight requests end with ECONNABORTED,
// every later one with ENOTCONN.
bool LostConnection(int err) { return err == ECONNABORTED || err == ENOTCONN; }
bool LostConnection(const absl::Status& s) { return LostConnection(umap::ErrnoFromStatus(s)); }

// Gives the data disk its space back. Through a GlusterFS client that died meanwhile the
// unlink fails, and the brick would stay full for every later iteration (their directories
// could not even be made): remount and unlink again, and say so if even that fails.
void RemoveFiller(RunContext& run, const std::string& filler, IterationRecord& rec) {
  if (::unlink(filler.c_str()) == 0 || errno == ENOENT) return;
  const int err = errno;
  if (run.gluster() && LostConnection(err)) {
    absl::Status s = run.Testbed("remount", {}, 120000);
    if (s.ok() && (::unlink(filler.c_str()) == 0 || errno == ENOENT)) {
      rec.Describe("; the GlusterFS client died while the brick was full: remounted to free it");
      return;
    }
  }
  rec.Violate("harness", absl::StrCat("cannot remove the filler ", filler, " (", strerror(err),
                                      "): the data disk stays full"));
}

enum class Full { kDataFull, kJournalFull, kJournalInjected, kJournalSticky };
constexpr const char* kFullNames[] = {"data-full", "journal-full", "journal-injected",
                                      "journal-sticky"};

class EnospcFault : public FaultClass {
 public:
  static constexpr const char* kName = "enospc";
  static constexpr const char* kHelp =
      "  enospc   data-full (data tmpfs, or the GlusterFS brick, filled; the initial file has\n"
      "           holes, the only blocks that need space), journal-full (journal tmpfs\n"
      "           filled), journal-injected / journal-sticky (FaultFs NoSpace, transient or\n"
      "           sticky, until the worker heals it)\n";
  static constexpr int kWeight = 1;
  static constexpr bool kReplayable = true;  // journal-injected/-sticky only
  using FaultClass::FaultClass;

  absl::Status Prepare() override {
    RETURN_IF_ERROR(run_.Require({"root", "tmpfs-mount"}));
    auto journal_tmpfs = Tmpfs::Create(run_.run_dir() + "/jtmpfs", 24, run_.setup_log());
    if (!journal_tmpfs.ok()) return journal_tmpfs.status();
    journal_tmpfs_.emplace(*std::move(journal_tmpfs));
    // data-full: the data dir on a small tmpfs of its own (on GlusterFS: the small brick).
    if (run_.gluster()) return absl::OkStatus();
    auto data_tmpfs = Tmpfs::Create(run_.run_dir() + "/dtmpfs", 8, run_.setup_log());
    if (!data_tmpfs.ok()) return data_tmpfs.status();
    data_tmpfs_.emplace(*std::move(data_tmpfs));
    return absl::OkStatus();
  }

  void Draw(Rng& variant_rng, IterationRecord* rec) override {
    // Half data-full; the journal's disk full for real, or injected (transient or sticky).
    // Replayable runs inject only: a real disk fills at the pace of the clock.
    if (run_.config().replayable) {
      full_ = variant_rng.OneIn(2) ? Full::kJournalInjected : Full::kJournalSticky;
    } else {
      full_ =
          variant_rng.OneIn(2) ? Full::kDataFull : static_cast<Full>(1 + variant_rng.Range(0, 2));
    }
    rec->variant = kFullNames[static_cast<int>(full_)];
    // Only a write into a hole needs space: the data disk's fault needs holes to meet.
    if (full_ == Full::kDataFull) DrawHoles(variant_rng, rec);
  }

  void Place(const IterationRecord& rec, Placement* p) override {
    const std::string it = absl::StrCat("/it-", rec.index);
    if (full_ == Full::kDataFull) {
      // The data file's disk fills up; the journal has room (the run dir).
      p->data_parent = run_.gluster() ? run_.gluster_mount() + it : data_tmpfs_->mount() + it;
    } else {
      // The journal's disk fills up; the data file stays in the run dir, even on GlusterFS.
      p->data_parent = p->iteration_dir;
      p->journal_parent = journal_tmpfs_->mount() + it;
    }
  }

  void Arm(Epoch& e) override;
  bool Inject(Epoch& e, Worker& worker) override;

 private:
  bool DataDiskFull(Epoch& e, Worker& worker);
  bool JournalDiskFull(Epoch& e, Worker& worker);
  bool JournalFaultsHealed(Epoch& e, Worker& worker);
  void ArmReplayable(Epoch& e);
  // FillUntilEnospc in a child process, bounded: a GlusterFS client can leave a write
  // unanswered for good (docs/chaos.md), and the harness must not hang in the kernel with
  // it. *hung: the child still waited after timeout_ms (then the FUSE connection is aborted,
  // which ends the request, and the mount brought back).
  absl::StatusOr<uint64_t> FillBounded(const std::string& path, int timeout_ms, bool* hung);

  std::optional<Tmpfs> journal_tmpfs_, data_tmpfs_;
  Full full_ = Full::kDataFull;  // this iteration's kind (Draw)
  int heal_ms_ = 0;              // journal-injected/-sticky: the worker heals after this
};

void EnospcFault::Arm(Epoch& e) {
  e.rounds = 2000;
  if (full_ == Full::kDataFull) return;  // Inject describes the fault
  e.draws.push_back(absl::StrCat("enospc/", e.rec.variant));
  if (full_ == Full::kJournalFull) {
    e.rec.Describe("journal tmpfs filled to ENOSPC, then freed");
    return;
  }
  if (run_.config().replayable) return ArmReplayable(e);
  // Injected NoSpace on 1 in k journal writes (transient, or sticky: a disk that stays
  // full), ending after heal_ms.
  const uint64_t k = e.rng.Range(2, 30);
  heal_ms_ = static_cast<int>(e.rng.Range(200, 2500));
  e.args.insert(e.args.end(),
                {"--fault-seed", absl::StrCat(e.fault_seed), "--journal-fault", "enospc",
                 "--journal-fault-one-in", absl::StrCat(k), "--heal-ms", absl::StrCat(heal_ms_)});
  const bool sticky = full_ == Full::kJournalSticky;
  if (sticky) e.args.push_back("--journal-sticky");
  const bool at_open = e.rng.OneIn(4);
  if (at_open) e.args.push_back("--journal-fault-at-open");
  e.rec.Describe("injected journal ENOSPC on 1 in ", k, " writes", sticky ? ", sticky" : "",
                 at_open ? ", from the journal's open" : "", ", space back after ", heal_ms_,
                 " ms");
}

// Replayable: the worker heals the journal after a drawn round, and dies a few rounds later
// by itself; the faults hit the WAL only.
void EnospcFault::ArmReplayable(Epoch& e) {
  const uint64_t k = e.rng.Range(2, 30);
  const uint64_t heal = e.first_round + e.rng.Range(2, 12);
  // Half the runs die at their first failed umsync (so the crash meets what a failed commit
  // left behind), the others a few rounds after the heal (so liveness is checked first).
  const bool at_first_error = e.rng.OneIn(2);
  const uint64_t die = at_first_error ? e.first_round : heal + e.rng.Range(3, 10);
  e.rounds = (at_first_error ? heal + 3 : die) - e.first_round + 1;
  heal_ms_ = 0;
  e.args.insert(e.args.end(),
                {"--fault-seed", absl::StrCat(e.fault_seed), "--journal-fault", "enospc",
                 "--journal-fault-one-in", absl::StrCat(k), "--journal-fault-wal-only",
                 "--heal-round", absl::StrCat(heal), "--die-round", absl::StrCat(die)});
  if (at_first_error) e.args.push_back("--die-on-error");
  // The death cuts the data file's power half the time: whatever a failed commit let reach
  // the file unsynced is then torn.
  const bool cut = e.rng.OneIn(2);
  if (cut) e.args.push_back("--die-power-cut");
  const bool sticky = full_ == Full::kJournalSticky;
  if (sticky) e.args.push_back("--journal-sticky");
  // Never from the journal's open: the heal comes from the rounds, which a journal that
  // cannot open never reaches.
  e.rec.Describe("injected journal ENOSPC on 1 in ", k, " WAL writes", sticky ? ", sticky" : "",
                 ", space back after round ", heal,
                 at_first_error ? ", dies at its first failed umsync"
                                : absl::StrCat(", dies after round ", die),
                 cut ? " with a DFS power cut" : "");
}

bool EnospcFault::Inject(Epoch& e, Worker& worker) {
  switch (full_) {
    case Full::kDataFull:
      return DataDiskFull(e, worker);
    case Full::kJournalFull:
      return JournalDiskFull(e, worker);
    default:
      return JournalFaultsHealed(e, worker);
  }
}

bool EnospcFault::JournalFaultsHealed(Epoch& e, Worker& worker) {
  const EpochEvents& ev = worker.events();
  bool fired = false;
  const bool replayable = run_.config().replayable;
  if (!worker.PumpUntil([&] { return worker.healed_round().has_value(); }, heal_ms_ + 30000)) {
    if (!worker.eof()) e.rec.Violate("harness", "the worker never reported the end of the fault");
  } else {
    fired = worker.journal_fired() > 0;
    const uint64_t healed = *worker.healed_round();
    e.rec.Describe(" (", worker.journal_fired(), " fired, ", ev.errors.size(),
                   " umsync errors, healed in round ", healed, ")");
    for (const auto& [round, err] : ev.errors) {
      if (err != ENOSPC) {
        e.rec.Violate("enospc", absl::StrCat("umsync of round ", round, " failed with errno ", err,
                                             " (", std::strerror(err),
                                             ") on a journal that only ran out of space"));
        break;
      }
    }
    // Liveness: with space back, umsync must succeed again within the bound.
    if (!worker.WaitForAckAfter(healed, 20000) && !worker.eof()) {
      e.rec.Violate("liveness", absl::StrCat("no umsync acknowledged within 20 s after the ",
                                             "journal's space came back in round ", healed));
    }
    if (!replayable) worker.Sleep(static_cast<int>(e.rng.Range(0, 200)));
  }
  if (!replayable) worker.Kill();  // replayable: it dies at its --die-round
  return fired;
}

bool EnospcFault::JournalDiskFull(Epoch& e, Worker& worker) {
  const EpochEvents& ev = worker.events();
  worker.WaitForFirstAck(20000);
  const std::string filler = journal_tmpfs_->mount() + "/filler";
  bool fired = false;
  absl::StatusOr<uint64_t> filled = journal_tmpfs_->Fill(filler);
  if (!filled.ok()) {
    e.rec.Violate("harness", filled.status().ToString());
  } else {
    // The fault fired when umsync reports an error; a worker may also block instead (a
    // fault waiting for a cache block whose spill to the journal fails): both must end once
    // space is back.
    const uint64_t acked_at_fill = ev.last_acked.value_or(0);
    const bool errored = worker.PumpUntil([&] { return !ev.errors.empty(); }, 4000);
    worker.Sleep(static_cast<int>(e.rng.Range(100, 800)));
    // Fired: umsync failed, or the worker was held back (no acknowledgement while full).
    fired = errored || ev.last_acked.value_or(0) == acked_at_fill;
    if (errored) {
      e.rec.Describe(" (", *filled >> 10, " KiB; umsync errno ", ev.errors.front().second,
                     " from round ", ev.errors.front().first, ")");
      if (ev.errors.front().second != ENOSPC) {
        e.rec.Violate("enospc", absl::StrCat("umsync failed with errno ", ev.errors.front().second,
                                             " on a full journal, expected ENOSPC"));
      }
    } else {
      e.rec.Describe(" (", *filled >> 10, " KiB; no umsync error within 4 s, ",
                     ev.last_acked.value_or(0) - acked_at_fill, " acknowledged while full)");
    }
    const uint64_t acked_at_free = ev.last_acked.value_or(0);
    ::unlink(filler.c_str());
    // Liveness: with space back, umsync must succeed again within the bound.
    if (!worker.WaitForAckAfter(acked_at_free, 20000) && !worker.eof()) {
      e.rec.Violate("liveness",
                    absl::StrCat("no umsync acknowledged within 20 s after the ",
                                 "journal's space came back (last acknowledged ", acked_at_free,
                                 ", ", ev.errors.size(), " umsync errors)"));
    }
    worker.Sleep(static_cast<int>(e.rng.Range(0, 200)));
  }
  ::unlink(filler.c_str());
  worker.Kill();
  return fired;
}

bool EnospcFault::DataDiskFull(Epoch& e, Worker& worker) {
  EpochEvents& ev = worker.events();
  run_.tally().DrawArmed("enospc/data-full");
  worker.WaitForFirstAck(20000);
  // On GlusterFS through the mount (the brick's ext4 fills), locally on the data tmpfs.
  const std::string filler = e.data_dir + "/../filler";
  // Frozen while the disk fills (through FUSE that takes ~1 s), or its rounds would have
  // written every hole before the disk is full and never meet the fault. (A thread that is
  // slow to stop only writes a few more holes before the disk is full.)
  if (absl::Status s = worker.Stop(10000); !s.ok()) e.rec.Describe("freeze: ", s.message(), "; ");
  bool hung = false;
  absl::StatusOr<uint64_t> filled = FillBounded(filler, 60000, &hung);
  const bool client_lost = run_.gluster() && !filled.ok() && LostConnection(filled.status());
  if (hung || client_lost) {
    // A GlusterFS limit, not a Umap result: the client dropped the brick (ping-timeout on a
    // starved brick) and never answered the filler's write, or the client's connection died
    // under it (ECONNABORTED, then ENOTCONN for good). The mount comes back and the iteration
    // goes on as a dead-client crash: the worker is killed, recovery is judged.
    run_.tally().DrawArmed(hung ? "enospc/data-full: GlusterFS client hung"
                                : "enospc/data-full: GlusterFS client lost");
    e.rec.Describe("GlusterFS client ", hung ? "hung" : "lost its connection",
                   " while filling the brick (", filled.status().message(),
                   "): FUSE remounted");
    worker.Kill();
    worker.Reap(10000);
    if (absl::Status s = run_.Testbed("remount", {}, 120000); !s.ok()) {
      e.rec.Violate("harness", s.ToString());
    }
    RemoveFiller(run_, filler, e.rec);  // what the filler wrote before the client went
    return false;
  }
  worker.Cont();
  e.rec.Describe(run_.gluster() ? "GlusterFS brick" : "data tmpfs", " filled to ENOSPC (",
                 std::count(e.rec.holes.begin(), e.rec.holes.end(), true), " of ", kBlocks,
                 " blocks initially holes)");
  if (!filled.ok()) {
    e.rec.Violate("harness", filled.status().ToString());
    ::unlink(filler.c_str());
    worker.Kill();
    return false;
  }
  const uint64_t acked_at_fill = ev.last_acked.value_or(0);
  const size_t errors_at_fill = ev.errors.size();
  const bool errored = worker.PumpUntil([&] { return ev.errors.size() > errors_at_fill; }, 4000);
  worker.Sleep(static_cast<int>(e.rng.Range(100, 800)));
  // Fired: umsync failed, or the worker was held back (no acknowledgement while full). A run
  // whose rounds only overwrote blocks that already had space did not meet the fault.
  const bool fired = errored || ev.last_acked.value_or(0) == acked_at_fill;
  const uint64_t acked_at_free = ev.last_acked.value_or(0);
  const size_t errors_at_free = ev.errors.size();
  e.rec.Describe(" (", *filled >> 10, " KiB; ", errors_at_free - errors_at_fill, " umsync errors, ",
                 acked_at_free - acked_at_fill, " acknowledged while full)");
  RemoveFiller(run_, filler, e.rec);
  // Liveness: with space back, umsync must succeed again within the bound.
  const int bound_ms = run_.gluster() ? 30000 : 20000;
  if (!worker.WaitForAckAfter(acked_at_free, bound_ms) && !worker.eof()) {
    e.rec.Violate("liveness",
                  absl::StrCat("no umsync acknowledged within ", bound_ms / 1000,
                               " s after the data disk's space came back (last "
                               "acknowledged ",
                               acked_at_free, ", ", ev.errors.size(), " umsync errors)"));
  }
  // A full data disk fails the apply, never the journal: every umsync error is ENOSPC, and
  // in atomic each failed round was committed before its apply failed (docs/durability.md),
  // so it must survive like an acknowledged one.
  for (size_t i = errors_at_fill; i < ev.errors.size(); ++i) {
    const auto [round, err] = ev.errors[i];
    if (err != ENOSPC) {
      e.rec.Violate("enospc",
                    absl::StrCat("umsync of round ", round, " failed with errno ", err, " (",
                                 strerror(err), ") on a full data disk, expected ENOSPC"));
    } else if (e.policy == Policy::kAtomic) {
      ev.committed = std::max(ev.committed.value_or(0), round);
    }
  }
  if (ev.committed) e.rec.Describe("; rounds up to ", *ev.committed, " committed");
  worker.Sleep(static_cast<int>(e.rng.Range(0, 200)));
  worker.Kill();
  if (fired) run_.tally().DrawFired("enospc/data-full");
  return fired;
}

absl::StatusOr<uint64_t> EnospcFault::FillBounded(const std::string& path, int timeout_ms,
                                                  bool* hung) {
  *hung = false;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return absl::InternalError("pipe for the filler child");
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(p[0]);
    ::close(p[1]);
    return absl::InternalError(absl::StrCat("fork for the filler: ", strerror(errno)));
  }
  if (pid == 0) {
    absl::StatusOr<uint64_t> n = FillUntilEnospc(path);
    // "ok BYTES" or "err ERRNO MESSAGE": the errno crosses the pipe so the parent can tell a
    // lost connection from a harness error.
    const std::string line =
        n.ok() ? absl::StrCat("ok ", *n)
               : absl::StrCat("err ", umap::ErrnoFromStatus(n.status()), " ", n.status().ToString());
    ssize_t w = ::write(p[1], line.data(), line.size());
    (void)w;  // the parent reports a child that said nothing
    ::_exit(0);
  }
  ::close(p[1]);
  // Poll, never a blocking wait: chaos::Wait's SIGKILL + waitpid would hang with the child,
  // because SIGKILL does not end a FUSE request the daemon already took.
  Exit e;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      e.exited = WIFEXITED(status);
      e.code = e.exited ? WEXITSTATUS(status) : 0;
      e.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *hung = true;
      // Aborting the connection ends the request; then the child can be killed and reaped.
      // The remount after this reports a dead testbed.
      run_.Testbed("abort-fuse", {}, 60000).IgnoreError();
      e = Wait(pid, 30000);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  ::close(p[0]);
  if (*hung) {
    return absl::DeadlineExceededError(
        absl::StrCat("filling ", path, " hung for ", timeout_ms / 1000, " s"));
  }
  uint64_t bytes = 0;
  if (out.rfind("ok ", 0) == 0 && absl::SimpleAtoi(out.substr(3), &bytes)) return bytes;
  int err = 0;
  const size_t sp = out.find(' ', 4);
  if (out.rfind("err ", 0) == 0 && sp != std::string::npos &&
      absl::SimpleAtoi(out.substr(4, sp - 4), &err) && err > 0) {
    return umap::WithErrno(absl::UnavailableError(absl::StrCat("filler: ", out.substr(sp + 1))),
                           err);
  }
  return absl::InternalError(absl::StrCat("filler child (", e.ToString(), "): ", out));
}

}  // namespace

UMAP_CHAOS_REGISTER_FAULT_CLASS(EnospcFault);

}  // namespace chaos
