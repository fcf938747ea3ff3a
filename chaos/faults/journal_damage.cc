// journal-damage: the journal's files damaged after the worker died (a torn copy, a disk
// that filled during a copy, an admin's truncate, a bad sector, bit rot): 1-3 random files
// of the journal directory, each cut at a random offset, zeroed over a random range, or
// with bytes flipped at random offsets. Unlike `torn`'s journal rot, the outcome is not
// known in advance, and the invariant is the one a user can rely on: either recovery
// restores every acknowledged umsync (it exits 0 or 1 and the oracle holds), or it exits
// non-zero and its report names the damage (and a second run says the same, and no block
// of the file is torn or foreign). Never a silent loss.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chaos/fault_class.h"

namespace chaos {
namespace {

// Kills that leave a journal with committed work in it: right after a commit, during an
// apply, or when the clock says. (A worker that ends by itself leaves a closed journal.)
constexpr const char* kPoints[] = {"journal.after_commit", "apply.mid_write",
                                   "journal.before_mark"};

// The journal's regular files, by name, sorted (deterministic for a seed).
std::vector<std::string> JournalFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// RocksDB's own files and the log are drawn four times as often as the rest (OPTIONS,
// IDENTITY, LOCK, UMAP-OWNER, UMAP-COMMITTED, ...): that is where the commits are.
bool HoldsRecords(const std::string& name) {
  return absl::EndsWith(name, ".log") || absl::EndsWith(name, ".sst") ||
         absl::StartsWith(name, "MANIFEST-") || name == "CURRENT";
}

// Damages `path` (its size `size`) as drawn; returns what was done.
absl::StatusOr<std::string> DamageFile(const std::string& path, uint64_t size, Rng& rng) {
  const int kind = static_cast<int>(rng.Range(0, 2));
  if (kind == 0 || size == 0) {  // cut short
    const uint64_t at = size == 0 ? 0 : rng.Range(0, size - 1);
    std::error_code ec;
    std::filesystem::resize_file(path, at, ec);
    if (ec) return absl::InternalError(absl::StrCat("truncate ", path, ": ", ec.message()));
    return absl::StrCat("cut at ", at, " of ", size);
  }
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) return absl::InternalError(absl::StrCat("open ", path, " to damage it"));
  if (kind == 1) {  // a zeroed range: a sector, a page, or more
    const uint64_t len = std::min<uint64_t>(
        size, rng.Range(1, 4) == 1 ? rng.Range(1, 65536) : 512 * rng.Range(1, 8));
    const uint64_t at = rng.Range(0, size - len);
    const std::string zeros(len, '\0');
    f.seekp(static_cast<std::streamoff>(at));
    f.write(zeros.data(), static_cast<std::streamsize>(len));
    if (!f) return absl::InternalError(absl::StrCat("write ", path));
    return absl::StrCat("zeroed ", at, "..", at + len, " of ", size);
  }
  const int flips = static_cast<int>(rng.Range(1, 8));  // bytes flipped at random offsets
  std::string where;
  for (int i = 0; i < flips; ++i) {
    const uint64_t at = rng.Range(0, size - 1);
    char c = 0;
    f.seekg(static_cast<std::streamoff>(at));
    f.get(c);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(c ^ static_cast<char>(rng.Range(1, 255))));
    absl::StrAppend(&where, i == 0 ? "" : ",", at);
  }
  if (!f) return absl::InternalError(absl::StrCat("write ", path));
  return absl::StrCat(flips, " bytes flipped at ", where, " of ", size);
}

class JournalDamageFault : public FaultClass {
 public:
  static constexpr const char* kName = "journal-damage";
  static constexpr const char* kHelp =
      "  journal-damage  after a kill, 1-3 journal files cut short, zeroed over a range or\n"
      "           with bytes flipped; recovery restores every acknowledged umsync or exits\n"
      "           non-zero naming the damage\n";
  static constexpr int kWeight = 1;
  static constexpr bool kReplayable = false;  // timed kills; the damage itself is seeded
  using FaultClass::FaultClass;

  void Arm(Epoch& e) override {
    e.must_recover_now = true;  // judged by this epoch's umap-recover
    timed_ = e.rng.OneIn(3);
    if (timed_) {
      e.rec.Describe("SIGKILL at a random time, then journal damage");
      return;
    }
    const std::string point = kPoints[e.rng.Range(0, std::size(kPoints) - 1)];
    const uint64_t hit = e.rng.Range(1, point == "apply.mid_write" ? 40 : 25);
    e.env.push_back(absl::StrCat("UMAP_CRASH_AT=", point, ":", hit));
    e.crash_point = point;
    run_.tally().PointArmed(point);
    e.rec.Describe("kill at ", point, ":", hit, ", then journal damage");
  }

  bool Inject(Epoch& e, Worker& worker) override {
    if (!timed_) return false;  // the crash point kills it
    worker.WaitForFirstAck(20000);
    worker.Sleep(static_cast<int>(e.rng.Range(0, 300)));
    const bool alive = !worker.eof();
    worker.Kill();
    return alive;
  }

  absl::Status DamageJournal(Epoch& e, const Exit& /*exit*/) override {
    Rng rng(e.fault_seed ^ 0x6a6f75726e616cull);  // "journal"
    std::vector<std::string> files = JournalFiles(e.journal_dir);
    if (files.empty()) return absl::OkStatus();
    std::vector<std::string> weighted;
    for (const std::string& f : files) {
      for (int i = 0; i < (HoldsRecords(f) ? 4 : 1); ++i) weighted.push_back(f);
    }
    const int n = static_cast<int>(rng.Range(1, 3));
    for (int i = 0; i < n; ++i) {
      const std::string name = weighted[rng.Range(0, weighted.size() - 1)];
      const std::string path = absl::StrCat(e.journal_dir, "/", name);
      std::error_code ec;
      const uint64_t size = std::filesystem::file_size(path, ec);
      if (ec) continue;  // gone (damaged twice by truncation to nothing is fine)
      absl::StatusOr<std::string> what = DamageFile(path, size, rng);
      if (!what.ok()) return what.status();
      e.rec.Describe("; ", name, " ", *what);
    }
    e.fired = true;
    e.judge_damage = true;
    return absl::OkStatus();
  }

 private:
  bool timed_ = false;  // this epoch's kill is timed (Arm)
};

}  // namespace

UMAP_CHAOS_REGISTER_FAULT_CLASS(JournalDamageFault);

}  // namespace chaos
