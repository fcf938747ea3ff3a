// reboot: a power cut of the node: the worker is frozen, then its journal disk and/or data
// disk (small ext4 images on loop devices; on GlusterFS the brick's ext4) are shut down with
// FS_IOC_SHUTDOWN NOLOGFLUSH, so everything not yet on the device is lost; the worker is
// killed and the disks are mounted again (ext4 replays its log) before recovery.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "chaos/fault_class.h"

namespace chaos {
namespace {

class RebootFault : public FaultClass {
 public:
  static constexpr const char* kName = "reboot";
  static constexpr const char* kHelp =
      "  reboot   power cut (SIGSTOP, FS_IOC_SHUTDOWN NOLOGFLUSH) of the journal disk and/or the\n"
      "           data disk; --dfs gluster: the data disk is the brick's ext4 (gluster-testbed\n"
      "           shutdown-brick), half of the iterations with holes in the initial file\n";
  static constexpr int kWeight = 1;
  static constexpr bool kReplayable = false;  // a real disk cut lands when the clock says
  using FaultClass::FaultClass;

  absl::Status Prepare() override {
    // Loop-mounted ext4 images; on GlusterFS the brick's power cut freezes its ext4 with
    // xfs_io.
    std::vector<std::string> needs = {"root", "loop-device", "command:mkfs.ext4"};
    if (run_.gluster()) needs.push_back("command:xfs_io");
    RETURN_IF_ERROR(run_.Require(needs));
    auto journal_disk = LoopFs::Create(run_.run_dir() + "/journal.img", run_.run_dir() + "/jfs", 96,
                                       run_.setup_log());
    if (!journal_disk.ok()) return journal_disk.status();
    journal_disk_.emplace(*std::move(journal_disk));
    // On GlusterFS the data disk is the brick's ext4 image (gluster-testbed --small-brick,
    // power-cut with shutdown-brick); locally a loop ext4 of our own.
    if (run_.gluster()) return absl::OkStatus();
    auto data_disk =
        LoopFs::Create(run_.run_dir() + "/data.img", run_.run_dir() + "/dfs", 32, run_.setup_log());
    if (!data_disk.ok()) return data_disk.status();
    data_disk_.emplace(*std::move(data_disk));
    return absl::OkStatus();
  }

  void Draw(Rng& variant_rng, IterationRecord* rec) override {
    if (!run_.gluster()) return;
    rec->variant = "brick-power-cut";
    // Half the GlusterFS reboots start from a file with holes: a lost block allocation must
    // read as zeros only where that is allowed.
    if (variant_rng.OneIn(2)) DrawHoles(variant_rng, rec);
  }

  void Place(const IterationRecord& rec, Placement* p) override {
    const std::string it = absl::StrCat("/it-", rec.index);
    p->data_parent = run_.gluster() ? run_.gluster_mount() + it : data_disk_->mount() + it;
    p->journal_parent = journal_disk_->mount() + it;
  }

  void Arm(Epoch& e) override {
    e.rounds = 400;
    brick_cut_ = false;
  }

  bool Inject(Epoch& e, Worker& worker) override;

  absl::Status Restore(Epoch& /*e*/) override {
    // The disks come back (ext4 replays its own log).
    for (LoopFs* fs :
         {journal_disk_ ? &*journal_disk_ : nullptr, data_disk_ ? &*data_disk_ : nullptr}) {
      if (fs != nullptr) RETURN_IF_ERROR(fs->Remount());
    }
    // The client's page cache still holds bytes the brick lost (docs/chaos.md); the node
    // reboots with its disk, so the client mounts again and sees the brick's truth.
    if (brick_cut_) return run_.Testbed("remount", {}, 120000);
    return absl::OkStatus();
  }

 private:
  std::optional<LoopFs> journal_disk_, data_disk_;
  bool brick_cut_ = false;  // this epoch power-cut the GlusterFS brick
};

bool RebootFault::Inject(Epoch& e, Worker& worker) {
  worker.WaitForFirstAck(20000);
  worker.Sleep(static_cast<int>(e.rng.Range(0, 300)));
  // Some dirty pages reach the disk before the crash (kernel write-back), the rest not.
  int written_back = 0;
  if (e.rng.OneIn(2)) {
    for (uint64_t i = 0, n = e.rng.Range(1, 6); i < n; ++i) {
      if (WriteBackRange(e.file, e.rng.Range(0, kBlocks - 1) * kBlockSize, kBlockSize).ok()) {
        ++written_back;
      }
    }
  }
  const uint64_t which = e.rng.Range(0, 4);  // 0-2 both, 3 data only, 4 journal only
  // Freeze the worker first (SIGSTOP: no system call result reaches it any more), as a real
  // power cut of the node does. FS_IOC_SHUTDOWN is not atomic with an fdatasync in flight:
  // that fdatasync can return 0 and its data still be gone after the remount (docs/chaos.md,
  // "Why `reboot` freezes the worker before the power cut"). A worker left running would act on
  // that false success, e.g. apply a transaction to the data disk whose journal commit the journal
  // disk then lost: not a fault a real machine produces. Stop waits until every thread has
  // stopped: kill(SIGSTOP) returns before the others have been told to stop, and a thread whose
  // fdatasync returns in between runs on (the 3 monotonicity violations of the 2026-12-02
  // nightly: journal-only cut, docs/chaos.md).
  if (absl::Status s = worker.Stop(30000); !s.ok()) {
    e.rec.Violate("harness", absl::StrCat("the worker could not be frozen before the power cut: ",
                                          s.ToString()));
  }
  absl::Status data_cut, journal_cut;
  if (run_.gluster()) {
    // The data disk is the GlusterFS brick's ext4: the journal disk first (instantly), then
    // the brick's power cut, which also restarts the brick (a few seconds; the worker is
    // frozen meanwhile).
    journal_cut = which != 3 ? journal_disk_->Shutdown() : absl::OkStatus();
    if (which != 4) {
      run_.tally().DrawArmed("reboot/brick-power-cut");
      data_cut = run_.Testbed("shutdown-brick", {}, 120000);
      if (data_cut.ok()) run_.tally().DrawFired("reboot/brick-power-cut");
    }
  } else {
    data_cut = which != 4 ? data_disk_->Shutdown() : absl::OkStatus();
    journal_cut = which != 3 ? journal_disk_->Shutdown() : absl::OkStatus();
  }
  brick_cut_ = run_.gluster() && which != 4 && data_cut.ok();
  const bool fired = data_cut.ok() && journal_cut.ok();
  if (!fired) {
    e.rec.Violate("harness", absl::StrCat("FS_IOC_SHUTDOWN failed: ", data_cut.ToString(), " / ",
                                          journal_cut.ToString()));
  }
  e.rec.Describe("power cut (SIGSTOP, FS_IOC_SHUTDOWN NOLOGFLUSH) of ",
                 which <= 2   ? "journal and data disks"
                 : which == 3 ? "the data disk"
                              : "the journal disk",
                 !run_.gluster() || which == 4 ? "" : " (the GlusterFS brick's ext4)", ", ",
                 written_back, " blocks written back before");
  worker.Kill();
  return fired;
}

}  // namespace

UMAP_CHAOS_REGISTER_FAULT_CLASS(RebootFault);

}  // namespace chaos
