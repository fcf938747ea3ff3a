#include "chaos/faults/in_process.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace chaos {

FaultySide ArmInProcessFaults(const char* cls, Epoch& e, bool replayable) {
  const bool eio = std::string(cls) == "eio";
  // Which storage breaks: 0 the data file, 1 the journal, 2 both. The journal's FaultFs has
  // no torn writes: its "torn" is the power cut below, tearing the WAL's unsynced tail (with
  // a garbled sector).
  const uint64_t side = e.rng.Range(0, 2);
  const uint64_t one_in = e.rng.Range(5, 40);
  const uint64_t die = e.first_round + e.rng.Range(3, e.rounds);
  // At death: 0 no power cut, 1 the data file's storage, 2 the journal's, 3 both.
  uint64_t cut = e.rng.Range(0, 3);
  // torn on the journal's side alone: its only tearing is the power cut's.
  if (!eio && side == 1 && cut < 2) cut = 2;
  static constexpr const char* kSides[] = {"data", "journal", "both"};
  static constexpr const char* kCuts[] = {"none", "data", "journal", "both"};
  e.draws.push_back(absl::StrCat(cls, "/", kSides[side]));
  e.draws.push_back(absl::StrCat(cls, "/power cut: ", kCuts[cut]));
  e.args.insert(e.args.end(),
                {"--fault-seed", absl::StrCat(e.fault_seed), "--die-round", absl::StrCat(die)});
  if (side != 1) {
    e.args.insert(e.args.end(), {"--fault", cls, "--fault-one-in", absl::StrCat(one_in)});
    e.rec.Describe(eio ? "EIO on 1 in " : "torn write on 1 in ", one_in, " data writes",
                   eio ? " and lost-page fsyncs" : "");
  }
  if (side != 0 && eio) {
    const uint64_t journal_one_in = e.rng.Range(10, 80);
    e.args.insert(e.args.end(), {"--journal-fault", "eio", "--journal-fault-one-in",
                                 absl::StrCat(journal_one_in)});
    if (e.rng.OneIn(4)) e.args.push_back("--journal-fault-at-open");
    if (replayable) e.args.push_back("--journal-fault-wal-only");
    e.rec.Describe(side == 2 ? ", " : "", "IOError on 1 in ", journal_one_in,
                   " journal appends, syncs (losing their bytes) and file creations");
  }
  if (side == 1 && !eio) e.rec.Describe("no write fault");
  // Half the journal-faulty eio runs whose journal is cut die at their first failed umsync
  // from that round on: the cut then meets the failed sync's lost bytes (before any reopen
  // of the journal flushes them to a synced table).
  const bool die_on_error = eio && side != 0 && cut >= 2 && ((e.fault_seed >> 3) & 1);
  if (die_on_error) e.args.push_back("--die-on-error");
  e.rec.Describe(
      die_on_error ? ", dies at the first failed umsync from round " : ", dies after round ", die);
  if (cut == 1 || cut == 3) e.args.push_back("--die-power-cut");
  if (cut >= 2) {
    e.args.push_back("--die-journal-power-cut");
    if (!eio || e.rng.OneIn(2)) e.args.push_back("--journal-garble");
  }
  e.rec.Describe(cut == 0   ? ""
                 : cut == 1 ? " with a DFS power cut"
                 : cut == 2 ? " with a power cut of the journal's disk (in process)"
                            : " with a power cut of both (in process)");
  return static_cast<FaultySide>(side);
}

bool InProcessFaultsFired(const Worker& worker, const Exit& exit) {
  return !worker.events().errors.empty() || worker.data_fired() + worker.journal_fired() > 0 ||
         (!exit.exited && !worker.killed_by_us());
}

}  // namespace chaos
