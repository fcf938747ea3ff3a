// node-loss: the job loses its node while its journal lives on the shared volume, and
// restarts on another node (docs/operations.md §4, docs/durability.md "Restart on another
// node"). A GlusterFS testbed of the class's own: one storage node and two client nodes, a
// and b, each a network, mount and UTS namespace mounting the volume at the same path; the
// data file and the journal are on the volume. Each epoch's worker runs on one node and
// umap-recover on the other (the next epoch's worker too: the job goes on there).
//   kill  the worker is SIGKILLed;
//   cut   its node is cut off from the volume while the worker keeps running; once the
//         bricks dropped it, the other node recovers (taking the journal over); the node
//         comes back: the worker's next umsyncs must fail with ESTALE, none may be
//         acknowledged, and the file and the journal must stay exactly as the takeover left
//         them (checked with O_DIRECT reads, so no client cache can hide a write).
#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "chaos/fault_class.h"

namespace chaos {
namespace {

// The journal directory's files (but the owner record, which every new owner rewrites), each
// with its bytes as the servers hold them.
std::map<std::string, std::string> JournalFiles(const std::string& dir) {
  std::map<std::string, std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || name == "UMAP-OWNER") continue;
    absl::StatusOr<std::string> bytes = ReadWholeFileDirect(dir + "/" + name);
    out[name] = bytes.ok() ? *bytes : absl::StrCat("<", bytes.status().ToString(), ">");
  }
  ::closedir(d);
  return out;
}

class NodeLossFault : public FaultClass {
 public:
  static constexpr const char* kName = "node-loss";
  static constexpr const char* kHelp =
      "  node-loss  data and journal on a GlusterFS volume of its own, mounted by client nodes a\n"
      "           and b (namespaces); the worker runs on one node, umap-recover on the other:\n"
      "           kill: SIGKILL; cut: the worker's node is cut off from the volume, the other\n"
      "           takes the journal over, the node comes back: its umsyncs must fail with\n"
      "           ESTALE and it must write nothing into the file or the journal\n";
  static constexpr int kWeight = 1;
  static constexpr bool kReplayable = false;  // the bricks notice a cut when the clock says
  using FaultClass::FaultClass;

  ~NodeLossFault() override {
    if (up_) {
      Run({run_.config().testbed, "down", "--name", name_}, run_.setup_log(), 180000);
    }
  }

  absl::Status Prepare() override {
    RETURN_IF_ERROR(run_.Require({"root"}));  // the testbed probes everything else itself
    name_ = absl::StrCat("chaosnl", ::getpid());
    mount_ = run_.run_dir() + "/nodeloss";
    MakeDirs(mount_).IgnoreError();  // the testbed reports a missing mount point itself
    const std::string log = run_.run_dir() + "/nodeloss-up.log";
    // The bricks drop a silent client after about 3 s (keepalive, user timeout), releasing
    // its locks as a server does after its own timeouts; clients give up after 3 s.
    absl::Status s = run_.RunTestbed(
        {"up-cluster", "--name", name_, "--nodes", "1", "--type", "distribute", "--mount",
         mount_, "--ping-timeout", "3", "--option", "server.keepalive-time=1", "--option",
         "server.keepalive-interval=1", "--option", "server.keepalive-count=2", "--option",
         "server.tcp-user-timeout=3"},
        log, 180000);
    up_ = s.ok() || !IsMissingCapability(s);  // a half-built testbed is torn down too
    RETURN_IF_ERROR(s);
    for (const char* node : {"a", "b"}) {
      RETURN_IF_ERROR(
          run_.RunTestbed({"client-add", "--name", name_, "--client", node}, log, 120000));
    }
    return absl::OkStatus();
  }

  void Place(const IterationRecord& rec, Placement* p) override {
    p->data_parent = p->journal_parent = absl::StrCat(mount_, "/it-", rec.index);
  }

  void Arm(Epoch& e) override {
    cut_ = e.rng.OneIn(2);
    const bool on_a = e.rec.epochs_run % 2 == 0;
    // assign(), not operator= of a literal: GCC 12 warns (-Wrestrict) on the inlined copy.
    node_.assign(1, on_a ? 'a' : 'b');
    other_.assign(1, on_a ? 'b' : 'a');
    e.worker_prefix = On(node_);
    e.recover_prefix = On(other_);
    e.fresh_reads = true;
    after_takeover_.reset();
    if (cut_) {
      // It must outlive the cut, the takeover and its return (it is killed after), with
      // nothing to read from the file meanwhile: a node cut off from its file system cannot
      // fault data in (SIGBUS, as mmap's EIO). So the whole file fits its cache, and the
      // worker reads every block first (--report-base).
      e.rounds = 3000;
      e.must_recover_now = true;
      e.cache_blocks = CacheBlocks(/*replayable=*/true);  // the whole file
      if (!e.checks_earlier_run) e.args.push_back("--report-base");  // else the loop adds it
    }
    e.draws.push_back(cut_ ? "node-loss/cut" : "node-loss/kill");
  }

  bool Inject(Epoch& e, Worker& worker) override {
    if (!worker.WaitForFirstAck(30000)) {
      e.rec.Violate("harness", absl::StrCat("no umsync acknowledged on node ", node_, " in 30 s"));
      worker.Kill();
      return false;
    }
    worker.Sleep(static_cast<int>(e.rng.Range(0, 300)));
    if (!cut_) {
      e.rec.Describe("node ", node_, ": worker SIGKILLed after round ",
                     worker.events().last_acked.value_or(0), "; recovery on node ", other_);
      worker.Kill();
      return true;
    }
    return CutOff(e, worker);
  }

  void Judge(Epoch& e, Worker& /*worker*/, const Exit& /*exit*/) override {
    if (!after_takeover_.has_value()) return;
    // Reaped: whatever it had in flight has ended. Nothing of it may have landed.
    absl::StatusOr<std::string> file = ReadWholeFileDirect(e.file);
    if (!file.ok() || *file != after_takeover_->file) {
      e.rec.Violate("fencing", absl::StrCat("node ", node_, " wrote into the data file after node ",
                                            other_, " took its journal over"));
    }
    if (JournalFiles(e.journal_dir) != after_takeover_->journal) {
      e.rec.Violate("fencing", absl::StrCat("node ", node_, " wrote into the journal after node ",
                                            other_, " took it over"));
    }
  }

 private:
  struct Snapshot {
    std::string file;
    std::map<std::string, std::string> journal;
  };

  // `gluster-testbed client-exec` into `node`: it execs the command, so a pid is the
  // command's own.
  std::vector<std::string> On(const std::string& node) const {
    return {run_.config().testbed, "client-exec", "--name", name_, "--client", node, "--"};
  }
  bool Testbed(Epoch& e, const std::vector<std::string>& args) {
    absl::Status s = run_.RunTestbed(args, run_.run_dir() + "/gluster-faults.log", 120000);
    if (!s.ok()) e.rec.Violate("harness", s.ToString());
    return s.ok();
  }
  bool CutOff(Epoch& e, Worker& worker);

  std::string name_, mount_;
  bool up_ = false;
  bool cut_ = false;
  std::string node_, other_;
  std::optional<Snapshot> after_takeover_;
};

bool NodeLossFault::CutOff(Epoch& e, Worker& worker) {
  if (!Testbed(e, {"client-cut", "--name", name_, "--client", node_, "--wait-gone", "60"})) {
    worker.Kill();
    return false;
  }
  worker.Sleep(10);  // read what it reported meanwhile
  const uint64_t acked_at_cut = worker.events().last_acked.value_or(0);
  // The job restarts on the other node: umap-recover takes the journal over (a new epoch)
  // and replays what the cut-off node committed.
  std::vector<std::string> argv = On(other_);
  argv.insert(argv.end(), {run_.config().recover, "-j", e.journal_dir, "--missing-ok",
                           "--progress", "never", "replay"});
  const Exit takeover = Run(argv, e.data_dir + "/../recover.log", 120000);
  if (!takeover.exited || (takeover.code != 0 && takeover.code != 1)) {
    e.rec.Violate("recovery", absl::StrCat("umap-recover on node ", other_, " (the takeover) ",
                                           takeover.ToString(), "; see ", e.data_dir,
                                           "/../recover.log"));
  }
  absl::StatusOr<std::string> file = ReadWholeFileDirect(e.file);
  if (file.ok()) after_takeover_ = Snapshot{*file, JournalFiles(e.journal_dir)};
  // The node comes back. Its worker is still running: its next umsyncs must be refused.
  if (!Testbed(e, {"client-heal", "--name", name_, "--client", node_})) {
    worker.Kill();
    return false;
  }
  const size_t errors_before = worker.events().errors.size();
  const uint64_t acked_before = worker.events().last_acked.value_or(0);
  const bool refused = worker.PumpUntil(
      [&] {
        const auto& errs = worker.events().errors;
        for (size_t i = errors_before; i < errs.size(); ++i) {
          if (errs[i].second == ESTALE) return true;
        }
        return false;
      },
      30000);
  if (!refused) {
    e.rec.Violate("fencing", absl::StrCat("node ", node_, " came back after node ", other_,
                                          " took its journal over, and none of its umsyncs "
                                          "failed with ESTALE within 30 s"));
  }
  if (worker.events().last_acked.value_or(0) > acked_before) {
    e.rec.Violate("fencing", absl::StrCat("node ", node_, " acknowledged round ",
                                          *worker.events().last_acked, " after node ", other_,
                                          " took its journal over"));
  }
  e.rec.Describe("node ", node_, " cut off after round ", acked_at_cut, ", node ", other_,
                 " took the journal over (umap-recover ", takeover.ToString(), "), node ", node_,
                 refused ? " back and refused (ESTALE)" : " back and NOT refused");
  worker.Kill();
  return true;
}

}  // namespace

UMAP_CHAOS_REGISTER_FAULT_CLASS(NodeLossFault);

}  // namespace chaos
