#include "chaos/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chaos/capability.h"

namespace chaos {
namespace {

using Clock = std::chrono::steady_clock;

// Bound on a worker's growth (VmRSS) from its first umsync to its peak: RocksDB's two 8 MiB
// memtables (journal/journal.cc), plus room for flush and compaction buffers and malloc
// arenas. Measured: 12-13 MiB over 3000 fault-free rounds (docs/chaos.md, "Memory").
constexpr uint64_t kRssGrowthBoundKib = 32 << 10;

// 64-bit FNV-1a: a digest of the recovered file for the printed evidence. Not CRC32C:
// every block image ends with its own CRC32C, and a CRC over such blocks is the same
// constant whatever they hold.
uint64_t Fnv1a(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Bytes in `path` now (0 when it does not exist yet).
uint64_t LogSize(const std::string& path) {
  std::error_code ec;
  const uint64_t n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

// What `path` got after its first `from` bytes.
std::string ReadFrom(const std::string& path, uint64_t from) {
  absl::StatusOr<std::string> all = ReadWholeFile(path);
  if (!all.ok() || all->size() < from) return "";
  return all->substr(from);
}

// Whether umap-recover's report names damage (a damaged or corrupt journal or record).
bool NamesDamage(const std::string& report) {
  for (const char* what : {"is damaged", "DATA_LOSS", "corrupt", "Corruption", "damaged"}) {
    if (absl::StrContains(report, what)) return true;
  }
  return false;
}

// Crash points after which committed transactions are likely left to replay.
bool LeavesCommittedWork(const std::string& point) {
  return point == "journal.after_commit" || point == "journal.before_mark" ||
         point == "apply.mid_write" || point == "apply.after_sync";
}

// The initial file: version 0 of every block, except the holes (ftruncate'd, never written).
absl::Status WriteInitialFile(const std::string& path, uint64_t tag,
                              const std::vector<bool>& holes) {
  std::string initial(kBlocks * kBlockSize, '\0');
  for (uint64_t b = 0; b < kBlocks; ++b) {
    FillBlock(tag, b, 0, absl::MakeSpan(initial.data() + b * kBlockSize, kBlockSize));
  }
  if (holes.empty()) return WriteWholeFile(path, initial, /*sync=*/true);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("create ", path, ": ", strerror(errno)));
  auto fail = [&](const std::string& what) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat(what, " ", path, ": ", strerror(err)));
  };
  if (::ftruncate(fd, static_cast<off_t>(kBlocks * kBlockSize)) != 0) return fail("ftruncate");
  for (uint64_t b = 0; b < kBlocks; ++b) {
    if (holes[b]) continue;
    if (::pwrite(fd, initial.data() + b * kBlockSize, kBlockSize,
                 static_cast<off_t>(b * kBlockSize)) != static_cast<ssize_t>(kBlockSize)) {
      return fail(absl::StrCat("write block ", b, " of"));
    }
  }
  if (::fsync(fd) != 0) return fail("fsync");
  ::close(fd);
  return absl::OkStatus();
}

}  // namespace

struct Harness::Iteration {
  Iteration(int index, uint64_t seed) : rng(Mix(seed) ^ Mix(static_cast<uint64_t>(index) + 1)) {
    rec.index = index;
  }
  IterationRecord rec;
  Rng rng;
  FaultClass* fault = nullptr;
  Policy policy = Policy::kAtomic;
  bool defer_file_sync = false;  // the worker's umsyncs leave the file's fdatasync to later
  // The worker's umsyncs capture this many blocks at a time and its journal writes larger
  // transactions in batches of as many (RuntimeOptions::umsync_chunk_bytes); 0: the
  // default, larger than the worker's file.
  uint64_t umsync_chunk_blocks = 0;
  std::string data_dir, journal_dir;
  uint64_t tag = 0, wseed = 0;
  Model model{0, 0, {}};                // what the file holds before the next epoch (its base)
  uint64_t first_round = 1;             // the next epoch's first round
  std::optional<PendingCheck> pending;  // an epoch left to the next one's map-time replay
};

Harness::Harness(RunContext& run) : run_(run) {
  for (const std::string& name : run_.config().faults) {
    if (classes_.count(name) == 0) classes_[name] = FaultRegistry::Find(name)->make(run_);
  }
}

Harness::~Harness() = default;

absl::Status Harness::PrepareClass(const std::string& name) {
  if (auto it = prepare_errors_.find(name); it != prepare_errors_.end()) return it->second;
  if (!prepared_.insert(name).second) return absl::OkStatus();
  absl::Status s = classes_.at(name)->Prepare();
  if (s.ok()) return s;
  prepare_errors_[name] = s;
  if (IsMissingCapability(s)) {
    std::printf("umap-chaos: fault class %s skipped: %s\n", name.c_str(),
                std::string(s.message()).c_str());
  } else {
    std::printf(
        "umap-chaos: fault class %s could not be set up (a harness failure, not a "
        "skip): %s\n",
        name.c_str(), s.ToString().c_str());
  }
  std::fflush(stdout);
  return s;
}

IterationRecord Harness::RunIteration(int index) {
  const Config& c = run_.config();
  Iteration it(index, c.seed);
  IterationRecord& rec = it.rec;
  std::vector<std::string> pool;  // each class as often as its weight
  for (const std::string& f : c.faults) {
    for (int k = 0; k < FaultRegistry::Find(f)->weight; ++k) pool.push_back(f);
  }
  rec.cls = pool[it.rng.Range(0, pool.size() - 1)];
  it.policy = it.rng.OneIn(2) ? Policy::kAtomic : Policy::kRelaxed;
  rec.policy = it.policy == Policy::kAtomic ? "atomic" : "relaxed";
  // The file's writes and fdatasync left to the sink's applier (RuntimeOptions::
  // defer_file_sync) only on request (--defer-file-sync-one-in N) until a nightly has run
  // with it (docs/chaos.md, "Deferred file sync").
  it.defer_file_sync = c.defer_file_sync_one_in != 0 && it.rng.OneIn(c.defer_file_sync_one_in);
  if (it.defer_file_sync) rec.Describe("deferred file sync; ");
  // Half the iterations umsync in chunks of 4 blocks, so that atomic umsyncs stage chunks
  // and commit in several journal batches (crash point journal.mid_stream). A draw of its
  // own, so that the other draws of a seed stay what they were.
  if (Mix(Mix(c.seed) ^ Mix(static_cast<uint64_t>(index) + 1) ^ 0x6368756e6bull) % 2 == 0) {
    it.umsync_chunk_blocks = 4;
    rec.Describe("umsyncs in chunks of 4 blocks; ");
  }
  ClassStats& st = run_.tally().of(rec.cls);
  const auto t0 = Clock::now();
  if (absl::Status s = PrepareClass(rec.cls); IsMissingCapability(s)) {
    rec.skipped = true;
    rec.skip_reason = std::string(s.message());
    st.skipped++;
    st.skip_reason = rec.skip_reason;
    return rec;
  } else if (!s.ok()) {
    st.iterations++;
    st.violations++;
    rec.Violate("harness",
                absl::StrCat("fault class ", rec.cls, " could not be set up: ", s.ToString()));
    return rec;
  }
  st.iterations++;
  // A testbed client that died in an earlier iteration is reported once, here, and mounted
  // again, instead of failing every later iteration at its first create.
  if (absl::Status s = run_.ReviveDeadMount(); !s.ok()) rec.Violate("harness", s.ToString());
  it.fault = classes_.at(rec.cls).get();
  // The variant has a PRNG of its own, so that adding variants to a class does not change
  // the draws of the others.
  Rng variant_rng(Mix(c.seed) ^ Mix(static_cast<uint64_t>(index) + 1) ^ 0x64667376617269ull);
  it.fault->Draw(variant_rng, &rec);
  rec.dir = absl::StrCat(run_.run_dir(), "/it-", index);
  Placement place{rec.dir,
                  run_.gluster() ? absl::StrCat(run_.gluster_mount(), "/it-", index) : rec.dir,
                  rec.dir};
  it.fault->Place(rec, &place);
  it.data_dir = place.data_parent + "/data";
  it.journal_dir = place.journal_parent + "/journal";
  it.tag = it.rng.Next() | 1;
  it.wseed = it.rng.Next();
  // A directory that cannot be made (a data disk left full, a dead mount) is the harness's
  // failure, named here rather than as the create's ENOENT further down.
  absl::Status dirs = MakeDirs(it.data_dir);
  dirs.Update(MakeDirs(rec.dir));
  dirs.Update(MakeDirs(place.journal_parent));
  if (!dirs.ok()) {
    rec.Violate("harness",
                absl::StrCat("cannot make the iteration's directories: ", dirs.ToString()));
  } else if (absl::Status s = WriteInitialFile(it.data_dir + "/data.umap", it.tag, rec.holes);
             !s.ok()) {
    rec.Violate("harness", s.ToString());
  } else {
    it.model = Model(it.wseed, kBlocks, std::vector<uint64_t>(kBlocks, 0), rec.holes);
    const int epochs = static_cast<int>(it.rng.Range(1, 3));
    for (int e = 0; e < epochs; ++e) {
      if (e > 0) rec.Describe(" | ");
      if (!RunEpoch(it, e + 1 == epochs)) break;
    }
  }
  rec.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!rec.violations.empty()) {
    st.violations += rec.violations.size();
    // Keep the evidence: copy what lives on the loop/tmpfs disks into the run dir.
    if (place.data_parent != rec.dir) {
      Run({"cp", "-a", place.data_parent, rec.dir + "/data-copy"}, run_.setup_log(), 30000);
    }
    if (place.journal_parent != rec.dir) {
      Run({"cp", "-a", place.journal_parent, rec.dir + "/journal-copy"}, run_.setup_log(), 30000);
    }
  } else if (!c.keep) {
    RemoveTree(rec.dir).IgnoreError();  // best effort: a leftover directory only costs space
    if (place.data_parent != rec.dir) RemoveTree(place.data_parent).IgnoreError();
    if (place.journal_parent != rec.dir) RemoveTree(place.journal_parent).IgnoreError();
  }
  return rec;
}

// The protocol of one epoch: arm, start the worker, (judge an earlier epoch's map-time
// replay,) inject, reap, judge the worker's run, restore the storage; then leave the crash
// to the next epoch's map, or damage the journal (if the class does), recover and judge.
bool Harness::RunEpoch(Iteration& it, bool last) {
  const uint64_t rounds = it.rng.Range(15, 60);
  const uint64_t fault_seed = it.rng.Next();
  const std::string file = it.data_dir + "/data.umap";
  Epoch e{.rec = it.rec,
          .rng = it.rng,
          .policy = it.policy,
          .data_dir = it.data_dir,
          .journal_dir = it.journal_dir,
          .file = file,
          .log = it.data_dir + "/../iteration.log",
          .first_round = it.first_round,
          .fault_seed = fault_seed,
          .checks_earlier_run = it.pending.has_value(),
          .rounds = rounds,
          .cache_blocks = CacheBlocks(run_.config().replayable),
          .args = {"--file", file, "--journal", it.journal_dir, "--policy", it.rec.policy, "--seed",
                   absl::StrCat(it.wseed), "--tag", absl::StrCat(it.tag), "--first-round",
                   absl::StrCat(it.first_round), "--blocks", absl::StrCat(kBlocks)}};
  if (it.defer_file_sync) e.args.push_back("--defer-file-sync");
  if (it.umsync_chunk_blocks != 0) {
    e.args.insert(e.args.end(),
                  {"--umsync-chunk-blocks", absl::StrCat(it.umsync_chunk_blocks)});
  }
  if (!run_.config().mutation.empty()) {
    e.env.push_back("UMAP_TEST_MUTATION=" + run_.config().mutation);
  }
  it.fault->Arm(e);

  std::unique_ptr<Worker> worker = StartWorker(it, e);
  if (worker == nullptr) return false;
  if (e.checks_earlier_run && !it.fault->StrikesDuringMapReplay(e)) {
    if (worker->PumpUntil([&] { return worker->base().has_value(); }, 30000)) {
      JudgeReplayedFile(it, *worker);
    }
  }
  e.fired = it.fault->Inject(e, *worker);
  const Exit exit = ReapWorker(it, e, *worker);
  // Still alive after SIGKILL (a violation said so): its file and journal are not settled,
  // so nothing after this can be judged.
  if (exit.unkillable) return false;
  it.fault->Judge(e, *worker, exit);
  JudgeWorkerRun(it, e, *worker, exit);
  e.worker_judged = Clock::now();
  if (absl::Status s = it.fault->Restore(e); !s.ok()) {
    it.rec.Violate("harness", s.ToString());
    return false;
  }

  // The file as the crash left it, before any recovery (for monotonicity).
  if (run_.config().keep_crash) {
    const std::string to = absl::StrCat(it.rec.dir, "/crash-state-", it.rec.epochs_run);
    MakeDirs(to).IgnoreError();  // cp below reports what fails
    Run({"cp", "-a", it.data_dir, it.journal_dir, to}, run_.setup_log(), 60000);
  }
  ++it.rec.epochs_run;
  std::vector<Decoded> crashed;
  if (absl::StatusOr<std::string> bytes = ReadDataFile(e); bytes.ok()) {
    crashed = DecodeFile(it, *bytes);
  }
  if (it.pending.has_value() && worker->base().has_value()) JudgeReplayedFile(it, *worker);
  const EpochEvents& ev = worker->events();
  const uint64_t upto =
      std::min(e.first_round + e.rounds - 1, ev.last_begun.value_or(e.first_round - 1) + 1);
  if (!it.pending.has_value() && !last && !e.must_recover_now && it.rec.violations.empty() &&
      it.rng.OneIn(3)) {
    it.rec.Describe("; not recovered: left to the next run's map");
    it.pending = PendingCheck{it.model, ev, upto, crashed};
    it.first_round = std::max(e.first_round + e.rounds, ev.last_begun.value_or(e.first_round) + 2);
    return true;
  }
  // A pending check still set here: this worker died before it reported what it mapped
  // (before writing anything), so the file must satisfy the earlier run's oracle.
  if (it.pending.has_value()) it.rec.Describe("; died before reporting the replayed file");
  if (absl::Status s = it.fault->DamageJournal(e, exit); !s.ok()) {
    it.rec.Violate("harness", s.ToString());
    return false;
  }
  return RecoverAndJudge(it, e, *worker, exit, upto, crashed);
}

std::unique_ptr<Worker> Harness::StartWorker(Iteration& it, Epoch& e) {
  e.args.insert(e.args.end(), {"--rounds", absl::StrCat(e.rounds), "--cache-blocks",
                               absl::StrCat(e.cache_blocks)});
  if (e.checks_earlier_run) e.args.push_back("--report-base");
  e.started = Clock::now();
  absl::StatusOr<std::unique_ptr<Worker>> w =
      Worker::Start(run_.config().worker, e.args, e.env, e.log, e.worker_prefix);
  if (!w.ok()) {
    it.rec.Violate("harness", absl::StrCat("starting the worker: ", w.status().ToString()));
    return nullptr;
  }
  (*w)->events().first_round = e.first_round;
  return *std::move(w);
}

Exit Harness::ReleaseStuckWorker(Iteration& it, Worker& worker, const Exit& stuck) {
  if (!run_.gluster()) {
    it.rec.Violate("liveness", absl::StrCat("the worker outlived SIGKILL by ", kKillGraceMs / 1000,
                                            " s: ", stuck.stuck));
    return stuck;
  }
  // A GlusterFS limit, not a Umap result (as a client that hangs while the brick fills,
  // enospc.cc): a thread of the worker waits for a FUSE request that the client took and
  // never answered (seen: a write held by write-behind, whose window was full of writes
  // that had failed with ENOSPC and waited to be retried). Only the client's end frees it:
  // the remount kills the client, the kernel fails the request, the worker dies.
  run_.tally().DrawArmed("GlusterFS client hung: the SIGKILLed worker stuck in it");
  it.rec.Describe("; the worker outlived SIGKILL (", stuck.stuck,
                  "): the GlusterFS client never answered it; FUSE remounted");
  if (absl::Status s = run_.Testbed("remount", {}, 120000); !s.ok()) {
    it.rec.Violate("harness", s.ToString());
  }
  Exit exit = worker.Reap(10000);
  if (exit.unkillable) {
    it.rec.Violate("harness", absl::StrCat("the worker outlived SIGKILL and the remount of its "
                                           "GlusterFS client: ",
                                           exit.stuck));
  }
  return exit;
}

Exit Harness::ReapWorker(Iteration& it, Epoch& e, Worker& worker) {
  // Everything else ends by itself: a crash point, an injected death, or the last round.
  // Under storage that keeps failing the runtime may wait up to a minute for a cache block
  // before its SIGBUS; the harness does not wait that long (no liveness promise holds while
  // the storage keeps failing).
  const bool keeps_failing = it.fault->storage_keeps_failing();
  Exit exit = worker.Reap(keeps_failing ? 15000 : 90000);
  if (exit.unkillable) {
    exit = ReleaseStuckWorker(it, worker, exit);
  } else if (exit.timed_out && !keeps_failing) {
    it.rec.Violate("liveness", "the worker did not finish within 90 s (killed)");
  } else if (exit.timed_out) {
    it.rec.Describe("; still stuck on failing write-backs after 15 s, killed");
  }
  if (!exit.exited && exit.signal == SIGKILL && !worker.killed_by_us() && !e.crash_point.empty()) {
    run_.tally().PointFired(e.crash_point);
    e.fired = true;
  }
  return exit;
}

void Harness::JudgeWorkerRun(Iteration& it, Epoch& e, Worker& worker, const Exit& exit) {
  ClassStats& st = run_.tally().of(it.rec.cls);
  // Invariant 8, dirty memory stays bounded: the cache never exceeds its bound, and the
  // process does not grow with the backlog of failing umsyncs (docs/chaos.md, "Memory").
  const Worker::Memory& mem = worker.memory();
  if (mem.samples >= 2) {
    const uint64_t growth =
        mem.max_rss_kib > mem.first_rss_kib ? mem.max_rss_kib - mem.first_rss_kib : 0;
    st.max_rss_growth_kib = std::max(st.max_rss_growth_kib, growth);
    st.max_rss_kib = std::max(st.max_rss_kib, mem.max_rss_kib);
    if (growth > kRssGrowthBoundKib) {
      it.rec.Violate("memory",
                     absl::StrCat("the worker grew by ", growth >> 10, " MiB (",
                                  mem.first_rss_kib >> 10, " MiB after round ", mem.first_round,
                                  ", ", mem.max_rss_kib >> 10, " MiB after round ", mem.max_round,
                                  "), bound ", kRssGrowthBoundKib >> 10, " MiB"));
    }
  }
  const uint64_t cache_bound = e.cache_blocks * kBlockSize;
  if (mem.max_cache_bytes > cache_bound) {
    it.rec.Violate("memory", absl::StrCat("the cache held ", mem.max_cache_bytes,
                                          " bytes, more than its bound of ", cache_bound));
  }
  if (!exit.exited && exit.signal != SIGKILL) {
    st.crashes++;  // SIGABRT (RocksDB 7.8.3 assertion), SIGBUS (read error): one more crash
    st.crash_signals[exit.signal]++;
    it.rec.Describe("; worker died of ", strsignal(exit.signal));
  }
  const bool keeps_failing = it.fault->storage_keeps_failing();
  if (exit.exited && exit.code == 4 && keeps_failing) {
    it.rec.Describe("; uunmap kept failing under injected faults");
  } else if (exit.exited && exit.code == 5 && keeps_failing) {
    it.rec.Describe("; umap refused the file: its map-time replay hit an injected EIO");
  } else if (exit.exited && exit.code != 0) {
    it.rec.Violate(exit.code == 4 ? "liveness" : "harness",
                   absl::StrCat("worker ", exit.ToString(), exit.code == 4 ? ": uunmap failed" : "",
                                " (see ", e.log, ")"));
  }
  if (e.fired) st.fired++;
  for (const std::string& draw : e.draws) {
    run_.tally().DrawArmed(draw);
    if (e.fired) run_.tally().DrawFired(draw);
  }
  if (!worker.events().ready && exit.exited && exit.code == 0) {
    it.rec.Violate("harness", "worker exited 0 without reporting");
  }
}

void Harness::JudgeReplayedFile(Iteration& it, const Worker& worker) {
  std::vector<Decoded> seen;
  for (int64_t v : *worker.base()) {
    Decoded d;
    d.kind = v >= 0    ? Decoded::Kind::kVersion
             : v == -2 ? Decoded::Kind::kZero
                       : Decoded::Kind::kTorn;
    d.version = v >= 0 ? static_cast<uint64_t>(v) : 0;
    if (v == -1) d.why = "torn or foreign, as read through the new mapping";
    if (v == -2) d.why = "all zeros, as read through the new mapping";
    seen.push_back(d);
  }
  const PendingCheck& p = *it.pending;
  for (Violation& v : Check(p.model, it.policy, p.events, p.upto, seen, p.pre)) {
    v.invariant = "map-time replay: " + v.invariant;
    it.rec.violations.push_back(std::move(v));
  }
  std::vector<uint64_t> base;
  for (int64_t v : *worker.base()) base.push_back(v >= 0 ? static_cast<uint64_t>(v) : 0);
  it.model = Model(it.wseed, kBlocks, std::move(base), it.model.holes());
  it.pending.reset();
}

bool Harness::RecoverAndJudge(Iteration& it, Epoch& e, const Worker& worker, const Exit& exit,
                              uint64_t upto, const std::vector<Decoded>& crashed) {
  const Config& c = run_.config();
  const EpochEvents& ev = worker.events();
  const size_t violations_before = it.rec.violations.size();
  const std::string rlog = it.data_dir + "/../recover.log";
  const bool pending_likely =
      LeavesCommittedWork(e.crash_point) && !exit.exited && !worker.killed_by_us();
  const uint64_t rlog_before = LogSize(rlog);
  const int code1 =
      Recover(it, e, rlog, /*allow_kill=*/!e.expect_refusal && !e.judge_damage, pending_likely);
  const std::string report1 = ReadFrom(rlog, rlog_before);
  absl::StatusOr<std::string> bytes1 = ReadDataFile(e);
  Exit se1, se2;
  std::vector<std::string> status_argv = e.recover_prefix;
  status_argv.insert(status_argv.end(),
                     {c.recover, "-j", it.journal_dir, "--missing-ok", "status", "--json"});
  absl::StatusOr<std::string> status1 = Capture(status_argv, rlog, &se1);
  const int code2 = Recover(it, e, rlog, false, false);
  absl::StatusOr<std::string> bytes2 = ReadDataFile(e);
  absl::StatusOr<std::string> status2 = Capture(status_argv, rlog, &se2);
  if (!bytes1.ok() || !bytes2.ok()) {
    it.rec.Violate("harness", absl::StrCat("reading the recovered file: ",
                                           (bytes1.ok() ? bytes2 : bytes1).status().ToString()));
    return false;
  }
  // Journal damage: a replay that succeeded is judged like any (every acknowledged umsync
  // restored); one that did not must say what is damaged, and is judged like a refusal.
  const bool damage_refused = e.judge_damage && code1 != 0 && code1 != 1;
  if (damage_refused) {
    it.rec.Describe(absl::StrCat("; recovery refused the damaged journal (exit ", code1, ")"));
    if (!NamesDamage(report1)) {
      it.rec.Violate("damage", absl::StrCat("umap-recover replay exited ", code1,
                                            " on a damaged journal without naming the damage; "
                                            "see ",
                                            rlog));
    }
  }
  const bool refusal = e.expect_refusal || damage_refused;
  if (damage_refused ? code1 != 2 && code1 != 3
      : refusal      ? code1 != 2
                     : (code1 != 0 && code1 != 1)) {
    it.rec.Violate(
        refusal ? "crc" : "recovery",
        absl::StrCat("umap-recover replay exited ", code1,
                     refusal ? " on a journal with a corrupt payload (expected 2: refused)"
                             : " (expected 0 or 1)",
                     "; see ", rlog));
  }
  const int want2 = damage_refused ? code1 : refusal ? 2 : 0;
  if (code2 != want2) {
    it.rec.Violate("idempotence", absl::StrCat("second umap-recover replay exited ", code2,
                                               ", expected ", want2, "; see ", rlog));
  }
  if (*bytes1 != *bytes2) {
    it.rec.Violate("idempotence", "the file differs after a second recovery run");
  }
  static const std::regex kDuration("\"duration_us\": *[0-9]+");
  auto norm = [](const absl::StatusOr<std::string>& s) {
    return s.ok() ? std::regex_replace(*s, kDuration, "") : std::string("<error>");
  };
  if (norm(status1) != norm(status2) || !status1.ok()) {
    it.rec.Violate("idempotence", "umap-recover status differs after a second recovery run");
  }
  const std::vector<Decoded> after = DecodeFile(it, *bytes1);
  // With the deferral, acknowledged rounds may be only in the journal; a refused journal
  // leaves the file alone to judge (oracle.h, CheckFileAlone).
  // A refusal of a damaged journal may come after a partial replay (it stops at the first
  // damaged image, docs/recovery.md "A damaged image"): the file owes no round, and a block
  // rewritten by the replayed prefix may be older than the crash left it; what still holds
  // is that no block is torn or foreign.
  const bool file_alone = (refusal && it.defer_file_sync) || damage_refused;
  if (file_alone) it.rec.Describe("; the file judged alone (journal refused)");
  auto judge = [&](const Model& m, const EpochEvents& events, uint64_t hi,
                   const std::vector<Decoded>& before) {
    std::vector<Violation> vs =
        file_alone
            ? CheckFileAlone(m, events, hi, after, damage_refused ? std::vector<Decoded>() : before)
            : Check(m, it.policy, events, hi, after, before);
    for (Violation& v : vs) it.rec.violations.push_back(std::move(v));
  };
  if (it.pending.has_value()) {
    const PendingCheck& p = *it.pending;
    judge(p.model, p.events, p.upto, p.pre);
    it.pending.reset();
  } else {
    judge(it.model, ev, upto, crashed);
  }
  if (it.rec.violations.size() > violations_before) {
    // The evidence in one word: a replay from the seed (--iteration) that reproduces this
    // violation bit for bit prints the same digest (chaos/replay_check.sh).
    it.rec.Describe(absl::StrFormat("; recovered file fnv1a %016x", Fnv1a(*bytes1)));
  }
  if (c.verbose) {
    std::fprintf(stderr,
                 "  epoch rounds %llu.. acked %lld begun %lld errors %zu exit %s rc %d/%d "
                 "worker %.1f s, recovery %.1f s\n",
                 static_cast<unsigned long long>(e.first_round),
                 ev.last_acked ? static_cast<long long>(*ev.last_acked) : -1,
                 ev.last_begun ? static_cast<long long>(*ev.last_begun) : -1, ev.errors.size(),
                 exit.ToString().c_str(), code1, code2,
                 std::chrono::duration<double>(e.worker_judged - e.started).count(),
                 std::chrono::duration<double>(Clock::now() - e.worker_judged).count());
  }
  if (!it.rec.violations.empty() || refusal) return false;
  // The next run starts from this recovered file; its rounds never reuse a version.
  it.model = Model(it.wseed, kBlocks, Versions(after), it.model.holes());
  it.first_round = std::max(e.first_round + e.rounds, ev.last_begun.value_or(e.first_round) + 2);
  return true;
}

int Harness::Recover(Iteration& it, const Epoch& epoch, const std::string& log,
                     bool allow_kill, bool pending_likely) {
  const Config& c = run_.config();
  Rng& rng = it.rng;
  std::vector<std::string> argv = epoch.recover_prefix;
  argv.insert(argv.end(), {c.recover, "-j", it.journal_dir, "--missing-ok", "--progress",
                           "never", "replay"});
  std::vector<std::string> env;
  if (c.mutation == "skip_crc") env.push_back("UMAP_TEST_MUTATION=skip_crc");
  if (allow_kill && (pending_likely ? !rng.OneIn(3) : rng.OneIn(3))) {
    // A kill during recovery: at a crash point, or at a random instant (not when the run
    // must replay bit for bit: then at the first crash point instead).
    int mode = pending_likely && !rng.OneIn(3) ? 0 : static_cast<int>(rng.Range(0, 2));
    if (c.replayable && mode == 2) mode = 0;
    std::vector<std::string> kill_env = env;
    std::string point;
    if (mode == 0) point = absl::StrCat("recovery.mid_replay:", rng.Range(1, 3));
    if (mode == 1) point = "gc.before_delete:1";
    if (!point.empty()) kill_env.push_back("UMAP_CRASH_AT=" + point);
    // The file is small (kBlocks blocks): merged, its replay would be one or two writes.
    // Writes of 4 blocks at most give the crash point hits inside the replay, with others
    // in flight.
    std::vector<std::string> kill_argv = argv;
    kill_argv.insert(kill_argv.end() - 1, {"--io-max-kib", "16"});
    absl::StatusOr<pid_t> pid = Spawn({kill_argv, kill_env, log, -1});
    if (pid.ok()) {
      bool ours = false;
      if (point.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(rng.Range(0, 15)));
        ours = ::kill(*pid, SIGKILL) == 0;
      }
      Exit e = Wait(*pid, 120000);
      const std::string name = point.empty() ? "" : point.substr(0, point.find(':'));
      run_.tally().PointArmed(name.empty() ? "(timed kill of umap-recover)" : name);
      if (!e.exited && e.signal == SIGKILL) {
        if (!name.empty() && !ours) run_.tally().PointFired(name);
        if (point.empty()) run_.tally().PointFired("(timed kill of umap-recover)");
        it.rec.Describe("; umap-recover killed (", point.empty() ? "timed" : point, ")");
      }
    }
  }
  Exit e;
  for (int attempt = 0; attempt < 3; ++attempt) {
    e = Run(argv, log, 120000, env);
    run_.tally().of(it.rec.cls).recoveries++;
    if (!(e.exited && e.code == 3)) break;  // 3: I/O error, "safe to rerun"
  }
  if (!e.exited) return 1000 + e.signal;
  return e.code;
}

absl::StatusOr<std::string> Harness::ReadDataFile(const Epoch& e) const {
  return e.fresh_reads ? ReadWholeFileDirect(e.file) : ReadWholeFile(e.file);
}

std::vector<Decoded> Harness::DecodeFile(const Iteration& it, const std::string& bytes) const {
  std::vector<Decoded> out;
  for (uint64_t b = 0; b < kBlocks; ++b) {
    if ((b + 1) * kBlockSize > bytes.size()) {
      out.push_back({Decoded::Kind::kTorn, 0, "beyond end of file"});
    } else {
      out.push_back(
          DecodeBlock(it.tag, b, absl::MakeConstSpan(bytes.data() + b * kBlockSize, kBlockSize)));
    }
  }
  return out;
}

}  // namespace chaos
