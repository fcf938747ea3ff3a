// umap-chaos: the chaos harness (docs/chaos.md). Per iteration it draws a fault
// class and its parameters from a seeded PRNG, runs the real worker (umap-chaos-worker) on a
// file in a data directory with its journal in a journal directory, injects the fault, runs
// the real umap-recover (twice; sometimes killed mid-run and rerun) and checks the
// invariants with an oracle that lives here, outside the faulty storage.
//
// Reproduce an iteration: umap-chaos --seed S --faults <same list> --iteration I [...]
// (printed with every violation). Kill timing is real time, so a timed kill lands at a
// different instruction; crash-point kills and injected faults are drawn from the seed.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "chaos/journal_rot.h"
#include "chaos/oracle.h"
#include "chaos/system.h"
#include "chaos/workload.h"

#ifndef UMAP_CHAOS_WORKER
#define UMAP_CHAOS_WORKER "umap-chaos-worker"
#endif
#ifndef UMAP_RECOVER
#define UMAP_RECOVER "umap-recover"
#endif
#ifndef UMAP_GLUSTER_TESTBED
#define UMAP_GLUSTER_TESTBED "gluster-testbed"
#endif

namespace chaos {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kClassNames[] = {"kill", "reboot", "timeout", "enospc", "eio", "torn"};
// Crash points the worker can reach (recovery.mid_replay is armed in umap-recover).
constexpr const char* kWorkerPoints[] = {"journal.before_commit", "journal.after_commit",
                                         "apply.mid_write", "apply.after_sync",
                                         "gc.before_delete"};
constexpr uint64_t kBlocks = 64;
constexpr uint64_t kCacheBlocks = 16;
// Bound on a worker's growth (VmRSS) from its first umsync to its peak: RocksDB's two 8 MiB
// memtables (journal/journal.cc), plus room for flush and compaction buffers and malloc
// arenas. Measured: 12-13 MiB over 3000 fault-free rounds (docs/chaos.md, "Memory").
constexpr uint64_t kRssGrowthBoundKib = 32 << 10;

struct Config {
  uint64_t seed = 0;
  int iterations = 0;  // 0: until --duration
  std::string duration = "0";
  std::vector<std::string> faults;
  std::string dfs = "local";
  std::string report_dir;
  std::string mutation;
  std::string work_dir;
  std::string worker = UMAP_CHAOS_WORKER;
  std::string recover = UMAP_RECOVER;
  std::string testbed = UMAP_GLUSTER_TESTBED;
  int only_iteration = -1;
  bool expect_violation = false;
  bool keep = false;
  bool keep_crash = false;  // copy data and journal dirs before every recovery (evidence)
  bool verbose = false;
  std::string faults_arg;
  std::string self = "umap-chaos";  // this binary, for the printed reproduction commands
};

struct ClassStats {
  uint64_t iterations = 0, fired = 0, recoveries = 0, violations = 0, crashes = 0;
  uint64_t skipped = 0;
  std::string skip_reason;
  uint64_t max_rss_growth_kib = 0, max_rss_kib = 0;
  std::map<int, uint64_t> crash_signals;  // signal -> crashes
  // "3 (SIGBUS 2, SIGABRT 1)"
  std::string CrashText() const {
    std::string out = absl::StrCat(crashes);
    if (crash_signals.empty()) return out;
    std::vector<std::string> parts;
    for (const auto& [sig, n] : crash_signals) {
      parts.push_back(absl::StrCat(sigabbrev_np(sig) ? "SIG" : "signal ",
                                   sigabbrev_np(sig) ? sigabbrev_np(sig) : absl::StrCat(sig).c_str(),
                                   " ", n));
    }
    return absl::StrCat(out, " (", absl::StrJoin(parts, ", "), ")");
  }
};

struct ViolationRecord {
  int iteration;
  std::string cls;
  Violation v;
  std::string repro;
  std::string dir;
};

struct IterationRecord {
  int index;
  std::string cls;
  std::string policy;
  std::string what;  // one line: the fault and its parameters
  double seconds = 0;
  std::vector<Violation> violations;
  bool skipped = false;
  std::string skip_reason;
  int epochs_run = 0;
  // Which kind of fault of the class this iteration draws (DrawVariant): timeout on GlusterFS
  // "stop-brick", "abort-fuse" or "delay"; enospc "data-full", "journal-full",
  // "journal-injected" or "journal-sticky"; reboot on
  // GlusterFS "brick-power-cut"; eio on GlusterFS "error-gen" (the volume's writes and
  // fsyncs fail) or "in-process" (FaultEnv/FaultFs as locally). Empty: the class has one kind.
  std::string variant;
  std::vector<bool> holes;  // blocks left as holes in the initial file (empty: none)
};

// A worker run whose crash was not recovered by umap-recover: the next worker's runtime
// replays the journal when it maps the file again (Runtime::Map), and reports what it then
// sees. That view is checked against this run's oracle.
struct PendingCheck {
  Model model;
  EpochEvents ev;
  uint64_t upto;
  std::vector<Decoded> pre;
};

// ---- the worker process -------------------------------------------------------------------

class Worker {
 public:
  static absl::StatusOr<std::unique_ptr<Worker>> Start(const Config& c,
                                                       const std::vector<std::string>& args,
                                                       const std::vector<std::string>& env,
                                                       const std::string& log) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return absl::InternalError("pipe for the worker report");
    std::vector<std::string> argv = {c.worker, "--report-fd", "3"};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<pid_t> pid = Spawn({argv, env, log, p[1]});
    ::close(p[1]);
    if (!pid.ok()) {
      ::close(p[0]);
      return pid.status();
    }
    auto w = std::unique_ptr<Worker>(new Worker());
    w->pid_ = *pid;
    w->fd_ = p[0];
    w->start_ = Clock::now();
    return w;
  }
  ~Worker() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      Reap(10000);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  // Reads report lines until pred() holds, EOF, or timeout_ms. Returns pred().
  bool PumpUntil(const std::function<bool()>& pred, int timeout_ms) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!pred()) {
      if (eof_) return false;
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (left <= 0) return false;
      pollfd pf{fd_, POLLIN, 0};
      int rc = ::poll(&pf, 1, left);
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        eof_ = true;
        return pred();
      }
      buf_.append(buf, n);
      for (size_t nl; (nl = buf_.find('\n')) != std::string::npos;) {
        Parse(buf_.substr(0, nl));
        buf_.erase(0, nl + 1);
      }
    }
    return true;
  }
  void Sleep(int ms) {
    PumpUntil([] { return false; }, ms);
  }
  // Freezes it: what its threads are doing in the kernel completes, nothing reaches user space.
  void Stop() {
    if (!reaped_) ::kill(pid_, SIGSTOP);
  }
  void Cont() {
    if (!reaped_) ::kill(pid_, SIGCONT);
  }
  void Kill() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      killed_by_us_ = true;
    }
  }
  // Drains the pipe to EOF, then reaps (bound timeout_ms; a hung worker is SIGKILLed).
  Exit Reap(int timeout_ms) {
    if (reaped_) return exit_;
    PumpUntil([] { return false; }, timeout_ms);
    exit_ = Wait(pid_, eof_ ? 10000 : 0);
    reaped_ = true;
    return exit_;
  }
  bool alive() {
    if (reaped_) return false;
    return ::kill(pid_, 0) == 0;
  }
  EpochEvents& events() { return ev_; }
  // "V": the block versions the worker read through its new mapping (-1: torn/foreign).
  const std::optional<std::vector<int64_t>>& base() const { return base_; }
  bool eof() const { return eof_; }
  bool killed_by_us() const { return killed_by_us_; }
  // "M": memory after each umsync.
  struct Memory {
    uint64_t samples = 0, first_rss_kib = 0, first_round = 0, max_rss_kib = 0, max_round = 0;
    uint64_t max_cache_bytes = 0;
  };
  const Memory& memory() const { return mem_; }
  // "F": injected failures fired so far (data file, journal).
  uint64_t data_fired() const { return data_fired_; }
  uint64_t journal_fired() const { return journal_fired_; }
  // "H": the round during which the journal's fault rules ended.
  const std::optional<uint64_t>& healed_round() const { return healed_; }
  // "Z": the worker cut the journal's power; the bytes of failed syncs it zeroed.
  const std::optional<uint64_t>& journal_zeroed() const { return zeroed_; }
  int errors_with(int err) const {
    int n = 0;
    for (auto& [r, e] : ev_.errors) n += e == err;
    return n;
  }

 private:
  Worker() = default;
  void Parse(const std::string& line) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    uint64_t a = 0, b = 0;
    if (f.size() >= 2) (void)absl::SimpleAtoi(f[1], &a);
    if (f.size() >= 3) (void)absl::SimpleAtoi(f[2], &b);
    if (f[0] == "R") ev_.ready = true;
    if (f[0] == "B") ev_.last_begun = a;
    if (f[0] == "A") ev_.last_acked = a;
    if (f[0] == "E") ev_.errors.emplace_back(a, static_cast<int>(b));
    if (f[0] == "T") ev_.stall_round = a;
    if (f[0] == "U") ev_.unmap_rc = static_cast<int>(a);
    if (f[0] == "F") {
      data_fired_ = a;
      journal_fired_ = b;
    }
    if (f[0] == "H") healed_ = a;
    if (f[0] == "Z") zeroed_ = a;
    if (f[0] == "M" && f.size() >= 4) {
      uint64_t cache = 0;
      (void)absl::SimpleAtoi(f[3], &cache);
      if (mem_.samples++ == 0) {
        mem_.first_rss_kib = b;
        mem_.first_round = a;
      }
      if (b > mem_.max_rss_kib) {
        mem_.max_rss_kib = b;
        mem_.max_round = a;
      }
      mem_.max_cache_bytes = std::max(mem_.max_cache_bytes, cache);
    }
    if (f[0] == "V" && f.size() >= 2) {
      std::vector<int64_t> v;
      for (absl::string_view x : absl::StrSplit(f[1], ',')) {
        int64_t n = -1;
        if (!absl::SimpleAtoi(x, &n)) n = -1;
        v.push_back(n);
      }
      base_ = std::move(v);
    }
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buf_;
  bool eof_ = false, reaped_ = false, killed_by_us_ = false;
  Exit exit_;
  EpochEvents ev_;
  Memory mem_;
  uint64_t data_fired_ = 0, journal_fired_ = 0;
  std::optional<uint64_t> healed_, zeroed_;
  std::optional<std::vector<int64_t>> base_;
  Clock::time_point start_;
};

// ---- the harness ---------------------------------------------------------------------------

class Harness {
 public:
  explicit Harness(Config c) : c_(std::move(c)) {}
  int Run();

 private:
  absl::Status PrepareClass(const std::string& cls);
  IterationRecord RunIteration(int index);
  // One worker run + fault + recovery + checks. Returns false when the iteration must stop
  // (refused journal, set-up failure).
  // *pending: set when the previous run was left for replay at map time; this run checks
  // it and clears it, or sets it (never on the last run, `last`).
  bool RunEpoch(IterationRecord* rec, Rng& rng, const std::string& dir_data,
                const std::string& dir_journal, uint64_t tag, uint64_t wseed, Policy policy,
                Model* model, uint64_t* first_round, std::optional<PendingCheck>* pending,
                bool last);
  // Runs umap-recover until a run completes (killed runs are rerun); returns that run's code.
  // pending_likely: the worker died where committed transactions are left to replay, so a
  // kill inside the replay (recovery.mid_replay) is worth arming.
  int Recover(const std::string& journal, const std::string& log, Rng& rng, bool allow_kill,
              bool pending_likely, IterationRecord* rec);
  std::string Repro(int index) const;
  // The DFS-side fault kinds (docs/chaos.md). Drawn from a PRNG of their own, so that adding
  // them did not change the draws of the existing classes.
  void DrawVariant(int index, IterationRecord* rec);
  // The initial file: version 0 of every block, except the holes (ftruncate'd, never written).
  absl::Status WriteInitialFile(const std::string& path, uint64_t tag,
                                const std::vector<bool>& holes);
  // Runs `gluster-testbed SUBCOMMAND --name N ARGS...`; the error names the log.
  absl::Status Testbed(const std::string& subcommand, const std::vector<std::string>& args,
                       int timeout_ms);
  // The same, bounded to 60 s, with the time it took in *ms (switching a debug layer).
  absl::Status TimedTestbed(const std::string& subcommand, const std::vector<std::string>& args,
                            int* ms) {
    const auto t0 = Clock::now();
    absl::Status s = Testbed(subcommand, args, 60000);
    *ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
    return s;
  }
  // timeout on GlusterFS, after the worker started: stop-brick / abort-fuse / delay-gen spike.
  // Returns whether the fault happened; violations (liveness, harness) go to rec.
  bool GlusterTimeout(IterationRecord* rec, Rng& rng, Worker& wk);
  // eio on GlusterFS, after the worker's first acknowledged umsync: error-gen fails the
  // volume's writes and fsyncs with EIO for 1-3 s (gluster-testbed errors); every umsync
  // error meanwhile must be EIO, and one must be acknowledged within 30 s after.
  bool GlusterErrors(IterationRecord* rec, Rng& rng, Worker& wk);
  // enospc data-full: fills the data file's disk (tmpfs, or the GlusterFS brick through the
  // mount), checks umsync's errors, frees it, checks liveness.
  bool DataDiskFull(IterationRecord* rec, Rng& rng, Worker& wk, Policy policy,
                    const std::string& data_dir);
  // FillUntilEnospc in a child process, bounded: a GlusterFS client can leave a write
  // unanswered for good (docs/chaos.md), and the harness must not hang in the kernel with it.
  // *hung: the child still waited after timeout_ms (then the FUSE connection is aborted, which
  // ends the request, and the mount brought back).
  absl::StatusOr<uint64_t> FillBounded(const std::string& path, int timeout_ms, bool* hung);
  void Armed(const std::string& kind) { draw_armed_[kind]++; }
  void Fired(const std::string& kind) { draw_fired_[kind]++; }
  void Violate(IterationRecord* rec, std::string invariant, std::string detail) {
    rec->violations.push_back({std::move(invariant), std::move(detail)});
  }
  void WriteReports(double seconds);

  Config c_;
  std::string run_dir_;
  std::map<std::string, ClassStats> stats_;
  std::map<std::string, uint64_t> point_fired_, point_armed_;
  std::vector<ViolationRecord> violations_;
  std::vector<IterationRecord> records_;
  std::optional<LoopFs> jfs_, dfs_;
  std::optional<Tmpfs> tmpfs_;
  std::optional<Tmpfs> data_tmpfs_;  // enospc data-full, local data dir
  std::map<std::string, uint64_t> draw_armed_, draw_fired_;  // "class/kind"
  std::string gluster_mount_, gluster_name_;
  std::map<std::string, std::string> unavailable_;  // class -> why
  std::set<std::string> prepared_;
};

std::string Harness::Repro(int index) const {
  std::string cmd = absl::StrCat(c_.self, " --seed ", c_.seed, " --faults ", c_.faults_arg,
                                 " --dfs ", c_.dfs, " --iteration ", index);
  if (!c_.mutation.empty()) absl::StrAppend(&cmd, " --mutation ", c_.mutation);
  return cmd;
}

absl::Status Harness::PrepareClass(const std::string& cls) {
  if (prepared_.count(cls)) {
    auto it = unavailable_.find(cls);
    return it == unavailable_.end() ? absl::OkStatus() : absl::UnavailableError(it->second);
  }
  prepared_.insert(cls);
  const std::string log = run_dir_ + "/setup.log";
  absl::Status s = absl::OkStatus();
  if (cls == "reboot") {
    auto j = LoopFs::Create(run_dir_ + "/journal.img", run_dir_ + "/jfs", 96, log);
    if (!j.ok()) {
      s = j.status();
    } else {
      jfs_.emplace(*std::move(j));
      // On GlusterFS the data disk is the brick's ext4 image (gluster-testbed --small-brick,
      // power-cut with shutdown-brick); locally a loop ext4 of our own.
      if (gluster_mount_.empty()) {
        auto d = LoopFs::Create(run_dir_ + "/data.img", run_dir_ + "/dfs", 32, log);
        if (!d.ok()) {
          s = d.status();
        } else {
          dfs_.emplace(*std::move(d));
        }
      }
    }
  } else if (cls == "enospc") {
    auto t = Tmpfs::Create(run_dir_ + "/jtmpfs", 24, log);
    if (!t.ok()) {
      s = t.status();
    } else {
      tmpfs_.emplace(*std::move(t));
    }
    // data-full: the data dir on a small tmpfs of its own (on GlusterFS: the small brick).
    if (s.ok() && gluster_mount_.empty()) {
      auto d = Tmpfs::Create(run_dir_ + "/dtmpfs", 8, log);
      if (!d.ok()) {
        s = d.status();
      } else {
        data_tmpfs_.emplace(*std::move(d));
      }
    }
  }
  if (!s.ok()) {
    unavailable_[cls] = std::string(s.message());
    std::fprintf(stderr, "umap-chaos: fault class %s cannot run here: %s\n", cls.c_str(),
                 std::string(s.message()).c_str());
  }
  return s;
}

int Harness::Recover(const std::string& journal, const std::string& log, Rng& rng,
                     bool allow_kill, bool pending_likely, IterationRecord* rec) {
  const std::vector<std::string> argv = {c_.recover, "-j", journal, "--missing-ok",
                                         "--progress", "never", "replay"};
  std::vector<std::string> env;
  if (c_.mutation == "skip_crc") env.push_back("UMAP_TEST_MUTATION=skip_crc");
  if (allow_kill && (pending_likely ? !rng.OneIn(3) : rng.OneIn(3))) {
    // A kill during recovery: at a crash point, or at a random instant.
    const int mode = pending_likely && !rng.OneIn(3) ? 0 : static_cast<int>(rng.Range(0, 2));
    std::vector<std::string> kenv = env;
    std::string point;
    if (mode == 0) point = absl::StrCat("recovery.mid_replay:", rng.Range(1, 3));
    if (mode == 1) point = "gc.before_delete:1";
    if (!point.empty()) kenv.push_back("UMAP_CRASH_AT=" + point);
    absl::StatusOr<pid_t> pid = Spawn({argv, kenv, log, -1});
    if (pid.ok()) {
      bool ours = false;
      if (point.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(rng.Range(0, 15)));
        ours = ::kill(*pid, SIGKILL) == 0;
      }
      Exit e = Wait(*pid, 120000);
      const std::string name = point.empty() ? "" : point.substr(0, point.find(':'));
      point_armed_[name.empty() ? "(timed kill of umap-recover)" : name]++;
      if (!e.exited && e.signal == SIGKILL) {
        if (!name.empty() && !ours) point_fired_[name]++;
        if (point.empty()) point_fired_["(timed kill of umap-recover)"]++;
        absl::StrAppend(&rec->what, "; umap-recover killed (", point.empty() ? "timed" : point, ")");
      }
    }
  }
  Exit e;
  for (int attempt = 0; attempt < 3; ++attempt) {
    e = chaos::Run(argv, log, 120000, env);
    stats_[rec->cls].recoveries++;
    if (!(e.exited && e.code == 3)) break;  // 3: I/O error, "safe to rerun"
  }
  if (!e.exited) return 1000 + e.signal;
  return e.code;
}

bool Harness::RunEpoch(IterationRecord* rec, Rng& rng, const std::string& dir_data,
                       const std::string& dir_journal, uint64_t tag, uint64_t wseed,
                       Policy policy, Model* model, uint64_t* first_round,
                       std::optional<PendingCheck>* pending, bool last) {
  const std::string& cls = rec->cls;
  ClassStats& st = stats_[cls];
  const std::string file = dir_data + "/data.umap";
  const std::string log = dir_data + "/../iteration.log";
  const uint64_t first = *first_round;
  uint64_t rounds = rng.Range(15, 60);
  std::vector<std::string> args = {"--file", file, "--journal", dir_journal, "--policy",
                                   policy == Policy::kAtomic ? "atomic" : "relaxed", "--seed",
                                   absl::StrCat(wseed), "--tag", absl::StrCat(tag),
                                   "--first-round", absl::StrCat(first), "--blocks",
                                   absl::StrCat(kBlocks), "--cache-blocks",
                                   absl::StrCat(kCacheBlocks)};
  std::vector<std::string> env;
  if (!c_.mutation.empty()) env.push_back("UMAP_TEST_MUTATION=" + c_.mutation);
  bool fired = false, rot = false, brick_cut = false;
  int heal_ms = 0;
  std::string draw, draw_cut;  // eio/torn: which storage failed, which power cut (fault draw table)
  std::string point;
  const uint64_t fault_seed = rng.Next();

  // Set-up of the fault that has to be decided before the worker starts.
  if (cls == "kill" && rng.Range(0, 9) < 6) {
    point = kWorkerPoints[rng.Range(0, std::size(kWorkerPoints) - 1)];
    const uint64_t n = rng.Range(1, point == "apply.mid_write" ? 40 : 25);
    env.push_back(absl::StrCat("UMAP_CRASH_AT=", point, ":", n));
    point_armed_[point]++;
    absl::StrAppend(&rec->what, "kill at crash point ", point, ":", n);
  } else if (cls == "torn" && rng.OneIn(3)) {
    rot = true;
    const uint64_t n = rng.Range(1, 10);
    point = "journal.after_commit";
    env.push_back(absl::StrCat("UMAP_CRASH_AT=", point, ":", n));
    point_armed_[point]++;
    absl::StrAppend(&rec->what, "journal rot after a kill at ", point, ":", n);
  } else if (cls == "eio" && rec->variant == "error-gen") {
    rounds = 2000;  // GlusterErrors describes the fault in rec->what
  } else if (cls == "eio" || cls == "torn") {
    // Which storage breaks: 0 the data file, 1 the journal, 2 both. The journal's FaultFs
    // has no torn writes: its "torn" is the power cut below, tearing the WAL's unsynced tail
    // (with a garbled sector).
    const uint64_t side = rng.Range(0, 2);
    const uint64_t one_in = rng.Range(5, 40);
    const uint64_t die = first + rng.Range(3, rounds);
    // At death: 0 no power cut, 1 the data file's storage, 2 the journal's, 3 both.
    uint64_t cut = rng.Range(0, 3);
    // torn on the journal's side alone: its only tearing is the power cut's.
    if (cls == "torn" && side == 1 && cut < 2) cut = 2;
    static constexpr const char* kSides[] = {"data", "journal", "both"};
    static constexpr const char* kCuts[] = {"none", "data", "journal", "both"};
    draw = absl::StrCat(cls, "/", kSides[side]);
    draw_cut = absl::StrCat(cls, "/power cut: ", kCuts[cut]);
    args.insert(args.end(), {"--fault-seed", absl::StrCat(fault_seed), "--die-round",
                             absl::StrCat(die)});
    if (side != 1) {
      args.insert(args.end(), {"--fault", cls, "--fault-one-in", absl::StrCat(one_in)});
      absl::StrAppend(&rec->what, cls == "eio" ? "EIO on 1 in " : "torn write on 1 in ", one_in,
                      " data writes", cls == "eio" ? " and lost-page fsyncs" : "");
    }
    if (side != 0 && cls == "eio") {
      const uint64_t j_one_in = rng.Range(10, 80);
      args.insert(args.end(), {"--journal-fault", "eio", "--journal-fault-one-in",
                               absl::StrCat(j_one_in)});
      if (rng.OneIn(4)) args.push_back("--journal-fault-at-open");
      absl::StrAppend(&rec->what, side == 2 ? ", " : "", "IOError on 1 in ", j_one_in,
                      " journal appends, syncs (losing their bytes) and file creations");
    }
    if (side == 1 && cls == "torn") absl::StrAppend(&rec->what, "no write fault");
    // Half the journal-faulty eio runs whose journal is cut die at their first failed umsync
    // from that round on: the cut then meets the failed sync's lost bytes (before any reopen
    // of the journal flushes them to a synced table).
    const bool die_on_error = cls == "eio" && side != 0 && cut >= 2 && ((fault_seed >> 3) & 1);
    if (die_on_error) args.push_back("--die-on-error");
    absl::StrAppend(&rec->what, die_on_error ? ", dies at the first failed umsync from round "
                                             : ", dies after round ",
                    die);
    if (cut == 1 || cut == 3) args.push_back("--die-power-cut");
    if (cut >= 2) {
      args.push_back("--die-journal-power-cut");
      if (cls == "torn" || rng.OneIn(2)) args.push_back("--journal-garble");
    }
    absl::StrAppend(&rec->what, cut == 0   ? ""
                                : cut == 1 ? " with a DFS power cut"
                                : cut == 2 ? " with a power cut of the journal's disk (in process)"
                                           : " with a power cut of both (in process)");
  } else if (cls == "timeout" && !gluster_mount_.empty()) {
    rounds = 2000;  // GlusterTimeout describes the fault in rec->what
  } else if (cls == "timeout") {
    rounds = 400;
    const uint64_t k = first + rng.Range(1, 5);
    const uint64_t ms = rng.Range(300, 2500);
    args.insert(args.end(), {"--fault", "timeout", "--fault-seed", absl::StrCat(fault_seed),
                             "--stall-round", absl::StrCat(k), "--stall-ms", absl::StrCat(ms)});
    absl::StrAppend(&rec->what, "DFS sync stalls ", ms, " ms after round ", k,
                    (fault_seed & 1) ? " then ETIMEDOUT" : " then proceeds");
  } else if (cls == "enospc" && rec->variant == "data-full") {
    rounds = 2000;  // DataDiskFull describes the fault in rec->what
  } else if (cls == "enospc") {
    rounds = 2000;
    // journal-full: the journal's real tmpfs filled; journal-injected: injected NoSpace on
    // 1 in k journal writes (transient); journal-sticky: the same, sticky (a disk that stays
    // full). The injected ones end after heal_ms.
    if (rec->variant == "journal-full") {
      absl::StrAppend(&rec->what, "journal tmpfs filled to ENOSPC, then freed");
    } else {
      const uint64_t k = rng.Range(2, 30);
      heal_ms = static_cast<int>(rng.Range(200, 2500));
      args.insert(args.end(), {"--fault-seed", absl::StrCat(fault_seed), "--journal-fault",
                               "enospc", "--journal-fault-one-in", absl::StrCat(k), "--heal-ms",
                               absl::StrCat(heal_ms)});
      if (rec->variant == "journal-sticky") args.push_back("--journal-sticky");
      const bool at_open = rng.OneIn(4);
      if (at_open) args.push_back("--journal-fault-at-open");
      absl::StrAppend(&rec->what, "injected journal ENOSPC on 1 in ", k, " writes",
                      rec->variant == "journal-sticky" ? ", sticky" : "",
                      at_open ? ", from the journal's open" : "",
                      ", space back after ", heal_ms, " ms");
    }
  } else if (cls == "reboot") {
    rounds = 400;
  } else {
    absl::StrAppend(&rec->what, "SIGKILL at a random time");
  }
  args.insert(args.end(), {"--rounds", absl::StrCat(rounds)});
  if (pending->has_value()) args.push_back("--report-base");

  const auto t_epoch = Clock::now();
  auto w = Worker::Start(c_, args, env, log);
  if (!w.ok()) {
    Violate(rec, "harness", absl::StrCat("starting the worker: ", w.status().ToString()));
    return false;
  }
  Worker& wk = **w;
  EpochEvents& ev = wk.events();
  ev.first_round = first;
  auto acked_after = [&](uint64_t r) { return [&, r] { return ev.last_acked && *ev.last_acked > r; }; };
  auto check_base = [&]() {
    // The previous run's crash as the runtime's replay at map time repaired it.
    std::vector<Decoded> seen;
    for (int64_t v : *wk.base()) {
      Decoded d;
      d.kind = v >= 0 ? Decoded::Kind::kVersion : v == -2 ? Decoded::Kind::kZero : Decoded::Kind::kTorn;
      d.version = v >= 0 ? static_cast<uint64_t>(v) : 0;
      if (v == -1) d.why = "torn or foreign, as read through the new mapping";
      if (v == -2) d.why = "all zeros, as read through the new mapping";
      seen.push_back(d);
    }
    for (Violation& v : Check((*pending)->model, policy, (*pending)->ev, (*pending)->upto, seen,
                              (*pending)->pre)) {
      v.invariant = "map-time replay: " + v.invariant;
      rec->violations.push_back(std::move(v));
    }
    std::vector<uint64_t> base;
    for (int64_t v : *wk.base()) base.push_back(v >= 0 ? static_cast<uint64_t>(v) : 0);
    *model = Model(wseed, kBlocks, std::move(base), model->holes());
    pending->reset();
  };
  if (pending->has_value() && !(cls == "kill" && point.empty() && rng.OneIn(4))) {
    // (A quarter of timed kills may land during the map-time replay instead.)
    if (wk.PumpUntil([&] { return wk.base().has_value(); }, 30000)) check_base();
  }

  if (cls == "kill" && point.empty()) {
    if (rng.OneIn(10)) {
      wk.Sleep(static_cast<int>(rng.Range(0, 60)));  // during start-up: journal open, map
    } else {
      wk.PumpUntil([&] { return ev.last_acked.has_value(); }, 20000);
      wk.Sleep(static_cast<int>(rng.Range(0, 300)));
    }
    fired = !wk.eof();  // still running: the SIGKILL below is the fault
    wk.Kill();
  } else if (cls == "reboot") {
    wk.PumpUntil([&] { return ev.last_acked.has_value(); }, 20000);
    wk.Sleep(static_cast<int>(rng.Range(0, 300)));
    // Some dirty pages reach the disk before the crash (kernel write-back), the rest not.
    int written_back = 0;
    if (rng.OneIn(2)) {
      for (uint64_t i = 0, n = rng.Range(1, 6); i < n; ++i) {
        if (WriteBackRange(file, rng.Range(0, kBlocks - 1) * kBlockSize, kBlockSize).ok()) {
          ++written_back;
        }
      }
    }
    const uint64_t which = rng.Range(0, 4);  // 0-2 both, 3 data only, 4 journal only
    // Freeze the worker first (SIGSTOP: no system call result reaches it any more), as a real
    // power cut of the node does. FS_IOC_SHUTDOWN is not atomic with an fdatasync in flight:
    // that fdatasync can return 0 and its data still be gone after the remount (measured here:
    // docs/chaos.md, "FS_IOC_SHUTDOWN and in-flight fdatasync"). A worker left running would act
    // on that false success, e.g. apply a transaction to the data disk whose journal commit the
    // journal disk then lost: not a fault a real machine produces.
    wk.Stop();
    absl::Status s1, s2;
    if (!gluster_mount_.empty()) {
      // The data disk is the GlusterFS brick's ext4: the journal disk first (instantly), then
      // the brick's power cut, which also restarts the brick (a few seconds; the worker is
      // frozen meanwhile).
      s2 = which != 3 ? jfs_->Shutdown() : absl::OkStatus();
      if (which != 4) {
        Armed("reboot/brick-power-cut");
        s1 = Testbed("shutdown-brick", {}, 120000);
        if (s1.ok()) Fired("reboot/brick-power-cut");
      }
    } else {
      s1 = which != 4 ? dfs_->Shutdown() : absl::OkStatus();
      s2 = which != 3 ? jfs_->Shutdown() : absl::OkStatus();
    }
    brick_cut = !gluster_mount_.empty() && which != 4 && s1.ok();
    fired = s1.ok() && s2.ok();
    if (!fired) {
      Violate(rec, "harness", absl::StrCat("FS_IOC_SHUTDOWN failed: ", s1.ToString(), " / ",
                                           s2.ToString()));
    }
    absl::StrAppend(&rec->what, "power cut (SIGSTOP, FS_IOC_SHUTDOWN NOLOGFLUSH) of ",
                    which <= 2 ? "journal and data disks" : which == 3 ? "the data disk" : "the journal disk",
                    gluster_mount_.empty() || which == 4 ? "" : " (the GlusterFS brick's ext4)",
                    ", ", written_back, " blocks written back before");
    wk.Kill();
  } else if (cls == "timeout" && !gluster_mount_.empty()) {
    fired = GlusterTimeout(rec, rng, wk);
  } else if (cls == "eio" && rec->variant == "error-gen") {
    fired = GlusterErrors(rec, rng, wk);
  } else if (cls == "timeout") {
    if (wk.PumpUntil([&] { return ev.stall_round.has_value(); }, 20000)) {
      fired = true;
      const uint64_t k = *ev.stall_round;
      if (rng.OneIn(3)) {
        wk.Sleep(static_cast<int>(rng.Range(0, 300)));  // killed while the DFS hangs
      } else if (!wk.PumpUntil(acked_after(k), 30000)) {
        if (!wk.eof()) {
          Violate(rec, "liveness", absl::StrCat("no umsync acknowledged within 30 s after the ",
                                                "DFS stall of round ", k, " ended"));
        }
      } else {
        wk.Sleep(static_cast<int>(rng.Range(0, 200)));
      }
    }
    wk.Kill();
  } else if (cls == "enospc" && rec->variant == "data-full") {
    fired = DataDiskFull(rec, rng, wk, policy, dir_data);
  } else if (cls == "enospc" && rec->variant != "journal-full") {
    if (!wk.PumpUntil([&] { return wk.healed_round().has_value(); }, heal_ms + 30000)) {
      if (!wk.eof()) Violate(rec, "harness", "the worker never reported the end of the fault");
    } else {
      fired = wk.journal_fired() > 0;
      const uint64_t h = *wk.healed_round();
      absl::StrAppend(&rec->what, " (", wk.journal_fired(), " fired, ", ev.errors.size(),
                      " umsync errors, healed in round ", h, ")");
      for (const auto& [round, err] : ev.errors) {
        if (err != ENOSPC) {
          Violate(rec, "enospc", absl::StrCat("umsync of round ", round, " failed with errno ",
                                              err, " (", std::strerror(err),
                                              ") on a journal that only ran out of space"));
          break;
        }
      }
      // Liveness: with space back, umsync must succeed again within the bound.
      if (!wk.PumpUntil(acked_after(h), 20000) && !wk.eof()) {
        Violate(rec, "liveness", absl::StrCat("no umsync acknowledged within 20 s after the ",
                                              "journal's space came back in round ", h));
      }
      wk.Sleep(static_cast<int>(rng.Range(0, 200)));
    }
    wk.Kill();
  } else if (cls == "enospc") {
    wk.PumpUntil([&] { return ev.last_acked.has_value(); }, 20000);
    const std::string filler = tmpfs_->mount() + "/filler";
    absl::StatusOr<uint64_t> filled = tmpfs_->Fill(filler);
    if (!filled.ok()) {
      Violate(rec, "harness", filled.status().ToString());
    } else {
      // The fault fired when umsync reports an error; a worker may also block instead (a
      // fault waiting for a cache block whose spill to the journal fails): both must end
      // once space is back.
      const uint64_t acked_at_fill = ev.last_acked.value_or(0);
      const bool errored = wk.PumpUntil([&] { return !ev.errors.empty(); }, 4000);
      wk.Sleep(static_cast<int>(rng.Range(100, 800)));
      // Fired: umsync failed, or the worker was held back (no acknowledgement while full).
      fired = errored || ev.last_acked.value_or(0) == acked_at_fill;
      if (errored) {
        absl::StrAppend(&rec->what, " (", *filled >> 10, " KiB; umsync errno ",
                        ev.errors.front().second, " from round ", ev.errors.front().first, ")");
        if (ev.errors.front().second != ENOSPC) {
          Violate(rec, "enospc", absl::StrCat("umsync failed with errno ", ev.errors.front().second,
                                              " on a full journal, expected ENOSPC"));
        }
      } else {
        absl::StrAppend(&rec->what, " (", *filled >> 10, " KiB; no umsync error within 4 s, ",
                        ev.last_acked.value_or(0) - acked_at_fill, " acknowledged while full)");
      }
      const uint64_t acked_at_free = ev.last_acked.value_or(0);
      ::unlink(filler.c_str());
      // Liveness: with space back, umsync must succeed again within the bound.
      if (!wk.PumpUntil(acked_after(acked_at_free), 20000) && !wk.eof()) {
        Violate(rec, "liveness", absl::StrCat("no umsync acknowledged within 20 s after the ",
                                              "journal's space came back (last acknowledged ",
                                              acked_at_free, ", ", ev.errors.size(),
                                              " umsync errors)"));
      }
      wk.Sleep(static_cast<int>(rng.Range(0, 200)));
    }
    ::unlink(filler.c_str());
    wk.Kill();
  }
  // Everything else ends by itself: a crash point, an injected death, or the last round.
  // Under sustained injected DFS errors the runtime may wait up to a minute for a cache
  // block before its SIGBUS; the harness does not wait that long (no liveness promise holds
  // while the DFS keeps failing).
  const bool faulty_dfs = cls == "eio" || cls == "torn";
  Exit ex = wk.Reap(faulty_dfs ? 15000 : 90000);
  if (ex.timed_out && !faulty_dfs) {
    Violate(rec, "liveness", "the worker did not finish within 90 s (killed)");
  } else if (ex.timed_out) {
    absl::StrAppend(&rec->what, "; still stuck on failing write-backs after 15 s, killed");
  }
  const bool by_us = wk.killed_by_us();
  if (!ex.exited && ex.signal == SIGKILL && !by_us && !point.empty()) {
    point_fired_[point]++;
    fired = true;
  }
  if ((cls == "eio" || cls == "torn") && !rot && rec->variant != "error-gen") {
    fired = !ev.errors.empty() || wk.data_fired() + wk.journal_fired() > 0 ||
            (!ex.exited && !by_us);
  }
  // Invariant 8, dirty memory stays bounded: the cache never exceeds its bound, and the
  // process does not grow with the backlog of failing umsyncs (docs/chaos.md, "Memory").
  const Worker::Memory& mem = wk.memory();
  if (mem.samples >= 2) {
    const uint64_t growth = mem.max_rss_kib > mem.first_rss_kib ? mem.max_rss_kib - mem.first_rss_kib : 0;
    st.max_rss_growth_kib = std::max(st.max_rss_growth_kib, growth);
    st.max_rss_kib = std::max(st.max_rss_kib, mem.max_rss_kib);
    if (growth > kRssGrowthBoundKib) {
      Violate(rec, "memory", absl::StrCat("the worker grew by ", growth >> 10, " MiB (", mem.first_rss_kib >> 10,
                                          " MiB after round ", mem.first_round, ", ",
                                          mem.max_rss_kib >> 10, " MiB after round ", mem.max_round,
                                          "), bound ", kRssGrowthBoundKib >> 10, " MiB"));
    }
  }
  if (mem.max_cache_bytes > kCacheBlocks * kBlockSize) {
    Violate(rec, "memory", absl::StrCat("the cache held ", mem.max_cache_bytes,
                                        " bytes, more than its bound of ",
                                        kCacheBlocks * kBlockSize));
  }
  if (!ex.exited && ex.signal != SIGKILL) {
    st.crashes++;  // SIGABRT (RocksDB 7.8.3 assertion), SIGBUS (read error): one more crash
    st.crash_signals[ex.signal]++;
    absl::StrAppend(&rec->what, "; worker died of ", strsignal(ex.signal));
  }
  if (ex.exited && ex.code == 4 && faulty_dfs) {
    absl::StrAppend(&rec->what, "; uunmap kept failing under injected faults");
  } else if (ex.exited && ex.code == 5 && faulty_dfs) {
    absl::StrAppend(&rec->what, "; umap refused the file: its map-time replay hit an injected EIO");
  } else if (ex.exited && ex.code != 0) {
    Violate(rec, ex.code == 4 ? "liveness" : "harness",
            absl::StrCat("worker ", ex.ToString(), ex.code == 4 ? ": uunmap failed" : "",
                         " (see ", log, ")"));
  }
  if (fired) st.fired++;
  if (cls == "enospc" && rec->variant != "data-full") {
    Armed("enospc/" + rec->variant);
    if (fired) Fired("enospc/" + rec->variant);
  }
  for (const std::string& d : {draw, draw_cut}) {
    if (d.empty()) continue;
    Armed(d);
    if (fired) Fired(d);
  }
  if ((draw == "eio/journal" || draw == "eio/both") && wk.journal_zeroed().has_value()) {
    // A journal power cut after failed syncs that lost their bytes: fired when it zeroed any.
    Armed("eio/journal cut zeroes lost syncs");
    if (*wk.journal_zeroed() > 0) Fired("eio/journal cut zeroes lost syncs");
  }
  if (!ev.ready && ex.exited && ex.code == 0) {
    Violate(rec, "harness", "worker exited 0 without reporting");
  }

  const auto t_worker = Clock::now();
  // A reboot: the disks come back (ext4 replays its own log).
  if (cls == "reboot") {
    for (LoopFs* fs : {jfs_ ? &*jfs_ : nullptr, dfs_ ? &*dfs_ : nullptr}) {
      if (fs == nullptr) continue;
      if (absl::Status s = fs->Remount(); !s.ok()) {
        Violate(rec, "harness", s.ToString());
        return false;
      }
    }
    // The client's page cache still holds bytes the brick lost (measured: docs/chaos.md);
    // the node reboots with its disk, so the client mounts again and sees the brick's truth.
    if (brick_cut) {
      if (absl::Status s = Testbed("remount", {}, 120000); !s.ok()) {
        Violate(rec, "harness", s.ToString());
        return false;
      }
    }
  }

  auto decode = [&](const std::string& bytes) {
    std::vector<Decoded> out;
    for (uint64_t b = 0; b < kBlocks; ++b) {
      if ((b + 1) * kBlockSize > bytes.size()) {
        out.push_back({Decoded::Kind::kTorn, 0, "beyond end of file"});
      } else {
        out.push_back(DecodeBlock(tag, b, absl::MakeConstSpan(bytes.data() + b * kBlockSize,
                                                              kBlockSize)));
      }
    }
    return out;
  };
  if (c_.keep_crash) {
    const std::string to = absl::StrCat(run_dir_, "/it-", rec->index, "/crash-state-",
                                        rec->epochs_run);
    MakeDirs(to).IgnoreError();  // cp below reports what fails
    chaos::Run({"cp", "-a", dir_data, dir_journal, to}, run_dir_ + "/setup.log", 60000);
  }
  ++rec->epochs_run;
  absl::StatusOr<std::string> pre_bytes = ReadWholeFile(file);
  std::vector<Decoded> pre;
  if (pre_bytes.ok()) pre = decode(*pre_bytes);

  if (pending->has_value() && wk.base().has_value()) check_base();
  const uint64_t upto = std::min(first + rounds - 1, ev.last_begun.value_or(first - 1) + 1);
  if (!pending->has_value() && !last && !rot && rec->violations.empty() && rng.OneIn(3)) {
    // Leave this crash to the next run's runtime (replay at map time), not to umap-recover.
    absl::StrAppend(&rec->what, "; not recovered: left to the next run's map");
    *pending = PendingCheck{*model, ev, upto, pre};
    *first_round = std::max(first + rounds, ev.last_begun.value_or(first) + 2);
    return true;
  }
  // A pending check still set here: this worker died before it reported what it mapped
  // (before writing anything), so the file must satisfy the earlier run's oracle.
  const bool judge_pending = pending->has_value();
  if (judge_pending) absl::StrAppend(&rec->what, "; died before reporting the replayed file");

  std::string rotted;
  if (rot && !ex.exited) {
    absl::StatusOr<std::string> r = RotOnePayload(dir_journal, fault_seed);
    if (!r.ok()) {
      Violate(rec, "harness", r.status().ToString());
      return false;
    }
    rotted = *r;
    if (!rotted.empty()) absl::StrAppend(&rec->what, "; ", rotted);
  }

  const std::string rlog = dir_data + "/../recover.log";
  const bool pending_likely = (point == "journal.after_commit" || point == "apply.mid_write" ||
                               point == "apply.after_sync") &&
                              !ex.exited && !by_us;
  const int code1 = Recover(dir_journal, rlog, rng, /*allow_kill=*/rotted.empty(), pending_likely,
                            rec);
  absl::StatusOr<std::string> bytes1 = ReadWholeFile(file);
  Exit se1, se2;
  const std::vector<std::string> status_argv = {c_.recover, "-j", dir_journal, "--missing-ok",
                                                "status", "--json"};
  absl::StatusOr<std::string> status1 = Capture(status_argv, rlog, &se1);
  const int code2 = Recover(dir_journal, rlog, rng, false, false, rec);
  absl::StatusOr<std::string> bytes2 = ReadWholeFile(file);
  absl::StatusOr<std::string> status2 = Capture(status_argv, rlog, &se2);
  if (!bytes1.ok() || !bytes2.ok()) {
    Violate(rec, "harness", absl::StrCat("reading the recovered file: ",
                                         (bytes1.ok() ? bytes2 : bytes1).status().ToString()));
    return false;
  }
  const bool expect_refusal = !rotted.empty();
  auto code_ok = [&](int code) { return expect_refusal ? code == 2 : (code == 0 || code == 1); };
  if (!code_ok(code1)) {
    Violate(rec, expect_refusal ? "crc" : "recovery",
            absl::StrCat("umap-recover replay exited ", code1,
                         expect_refusal ? " on a journal with a corrupt payload (expected 2: refused)"
                                        : " (expected 0 or 1)",
                         "; see ", rlog));
  }
  if (code2 != (expect_refusal ? 2 : 0)) {
    Violate(rec, "idempotence", absl::StrCat("second umap-recover replay exited ", code2,
                                             ", expected ", expect_refusal ? 2 : 0, "; see ", rlog));
  }
  if (*bytes1 != *bytes2) {
    Violate(rec, "idempotence", "the file differs after a second recovery run");
  }
  static const std::regex kDuration("\"duration_us\": *[0-9]+");
  auto norm = [](const absl::StatusOr<std::string>& s) {
    return s.ok() ? std::regex_replace(*s, kDuration, "") : std::string("<error>");
  };
  if (norm(status1) != norm(status2) || !status1.ok()) {
    Violate(rec, "idempotence", "umap-recover status differs after a second recovery run");
  }
  std::vector<Decoded> after = decode(*bytes1);
  if (judge_pending) {
    for (Violation& v : Check((*pending)->model, policy, (*pending)->ev, (*pending)->upto, after,
                              (*pending)->pre)) {
      rec->violations.push_back(std::move(v));
    }
    pending->reset();
  } else {
    for (Violation& v : Check(*model, policy, ev, upto, after, pre)) {
      rec->violations.push_back(std::move(v));
    }
  }
  if (c_.verbose) {
    std::fprintf(stderr, "  epoch rounds %llu.. acked %lld begun %lld errors %zu exit %s rc %d/%d "
                 "worker %.1f s, recovery %.1f s\n",
                 static_cast<unsigned long long>(first),
                 ev.last_acked ? static_cast<long long>(*ev.last_acked) : -1,
                 ev.last_begun ? static_cast<long long>(*ev.last_begun) : -1, ev.errors.size(),
                 ex.ToString().c_str(), code1, code2,
                 std::chrono::duration<double>(t_worker - t_epoch).count(),
                 std::chrono::duration<double>(Clock::now() - t_worker).count());
  }
  if (!rec->violations.empty() || expect_refusal) return false;
  // The next run starts from this recovered file; its rounds never reuse a version.
  *model = Model(wseed, kBlocks, Versions(after), model->holes());
  *first_round = std::max(first + rounds, ev.last_begun.value_or(first) + 2);
  return true;
}

void Harness::DrawVariant(int index, IterationRecord* rec) {
  Rng v(Mix(c_.seed) ^ Mix(static_cast<uint64_t>(index) + 1) ^ 0x64667376617269ull);
  const bool gluster = !gluster_mount_.empty();
  if (rec->cls == "timeout" && gluster) {
    static constexpr const char* kKinds[] = {"stop-brick", "abort-fuse", "delay"};
    rec->variant = kKinds[v.Range(0, 2)];
  } else if (rec->cls == "enospc") {
    // Half data-full; the journal's disk full for real, or injected (transient or sticky).
    static constexpr const char* kKinds[] = {"journal-full", "journal-injected",
                                             "journal-sticky"};
    rec->variant = v.OneIn(2) ? "data-full" : kKinds[v.Range(0, 2)];
  } else if (rec->cls == "reboot" && gluster) {
    rec->variant = "brick-power-cut";
  } else if (rec->cls == "eio" && gluster) {
    rec->variant = v.OneIn(2) ? "error-gen" : "in-process";
  }
  // Holes: always when the data disk fills (only a write into a hole needs space), and in half
  // of the GlusterFS reboots (a lost block allocation must read as zeros only where allowed).
  if (rec->variant == "data-full" || (rec->variant == "brick-power-cut" && v.OneIn(2))) {
    const uint64_t percent = v.Range(25, 75);
    rec->holes.assign(kBlocks, false);
    for (uint64_t b = 0; b < kBlocks; ++b) rec->holes[b] = v.Range(1, 100) <= percent;
  }
}

absl::Status Harness::WriteInitialFile(const std::string& path, uint64_t tag,
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

absl::Status Harness::Testbed(const std::string& subcommand, const std::vector<std::string>& args,
                              int timeout_ms) {
  const std::string glog = run_dir_ + "/gluster-faults.log";
  std::vector<std::string> argv = {c_.testbed, subcommand, "--name", gluster_name_};
  argv.insert(argv.end(), args.begin(), args.end());
  Exit e = chaos::Run(argv, glog, timeout_ms);
  if (!e.exited || e.code != 0) {
    return absl::InternalError(absl::StrCat("`", absl::StrJoin(argv, " "), "` failed: ",
                                            e.ToString(), " (see ", glog, ")"));
  }
  return absl::OkStatus();
}

bool Harness::GlusterTimeout(IterationRecord* rec, Rng& rng, Worker& wk) {
  EpochEvents& ev = wk.events();
  const std::string kind = rec->variant;
  const std::string draw = "timeout/" + kind;
  Armed(draw);
  auto acked_after = [&](uint64_t r) { return [&, r] { return ev.last_acked && *ev.last_acked > r; }; };
  wk.PumpUntil([&] { return ev.last_acked.has_value(); }, 20000);
  bool fired = false;
  if (kind == "stop-brick") {
    // A real DFS hang: the brick process stops answering (ping-timeout 3 s), then returns.
    absl::Status stop = Testbed("stop-brick", {}, 60000);
    fired = stop.ok();
    const int hang_ms = static_cast<int>(rng.Range(1000, 5000));
    absl::StrAppend(&rec->what, "GlusterFS brick stopped (SIGSTOP) for ", hang_ms,
                    " ms, then continued");
    wk.Sleep(hang_ms);
    const uint64_t acked_at_cont = ev.last_acked.value_or(0);
    absl::Status cont = Testbed("cont-brick", {}, 120000);
    if (!stop.ok() || !cont.ok()) {
      Violate(rec, "harness", absl::StrCat("gluster-testbed stop-brick/cont-brick: ",
                                           stop.ToString(), " / ", cont.ToString()));
    } else if (!wk.PumpUntil(acked_after(acked_at_cont), 30000) && !wk.eof()) {
      Violate(rec, "liveness", "no umsync acknowledged within 30 s after the brick came back");
    }
    wk.Kill();
  } else if (kind == "abort-fuse") {
    // The FUSE connection dies under the worker: every later access is ENOTCONN, for good.
    // The worker cannot outlive its mount (its descriptors stay on the dead one): it is
    // killed, the mount comes back (gluster-testbed remount, brick data kept), then recovery.
    wk.Sleep(static_cast<int>(rng.Range(0, 300)));
    absl::Status abort = Testbed("abort-fuse", {}, 60000);
    fired = abort.ok();
    const size_t errors_before = ev.errors.size();
    wk.PumpUntil([&] { return ev.errors.size() > errors_before; }, 2000);
    absl::StrAppend(&rec->what, "GlusterFS FUSE connection aborted");
    if (ev.errors.size() > errors_before) {
      absl::StrAppend(&rec->what, " (umsync errno ", ev.errors[errors_before].second, ")");
    } else {
      absl::StrAppend(&rec->what, wk.eof() ? " (the worker died)" : " (no umsync error within 2 s)");
    }
    wk.Kill();
    wk.Reap(10000);
    absl::Status remount = Testbed("remount", {}, 120000);
    absl::StrAppend(&rec->what, ", mount brought back");
    if (!abort.ok() || !remount.ok()) {
      Violate(rec, "harness", absl::StrCat("gluster-testbed abort-fuse/remount: ",
                                           abort.ToString(), " / ", remount.ToString()));
    }
  } else {
    // delay-gen latency spike on writes, fsyncs and reads; the worker must keep going.
    const uint64_t percent = rng.Range(20, 100);
    const uint64_t usec = rng.Range(20000, 300000);
    const int hold_ms = static_cast<int>(rng.Range(1000, 3000));
    int on_ms = 0, off_ms = 0;
    absl::Status on = TimedTestbed("delay", {"--percent", absl::StrCat(percent), "--usec",
                                             absl::StrCat(usec), "--fops", "WRITE,FSYNC,READ"},
                                   &on_ms);
    fired = on.ok();
    const uint64_t acked_on = ev.last_acked.value_or(0);
    wk.Sleep(hold_ms);
    const uint64_t acked_during = ev.last_acked.value_or(0) - acked_on;
    absl::Status off = TimedTestbed("delay", {"--off"}, &off_ms);
    absl::StrAppend(&rec->what, "GlusterFS delay-gen: ", percent, "% of WRITE,FSYNC,READ +",
                    usec / 1000, " ms for ", hold_ms, " ms (", acked_during,
                    " umsyncs acknowledged meanwhile; switching on ",
                    on_ms, " ms, off ", off_ms,
                    " ms)");
    const uint64_t acked_at_off = ev.last_acked.value_or(0);
    if (!on.ok() || !off.ok()) {
      Violate(rec, "harness", absl::StrCat("gluster-testbed delay: ", on.ToString(), " / ",
                                           off.ToString()));
    } else if (!wk.PumpUntil(acked_after(acked_at_off), 30000) && !wk.eof()) {
      Violate(rec, "liveness", "no umsync acknowledged within 30 s after the delay was switched off");
    }
    wk.Sleep(static_cast<int>(rng.Range(0, 200)));
    wk.Kill();
  }
  if (fired) Fired(draw);
  return fired;
}

bool Harness::GlusterErrors(IterationRecord* rec, Rng& rng, Worker& wk) {
  EpochEvents& ev = wk.events();
  const std::string draw = "eio/error-gen";
  Armed(draw);
  wk.PumpUntil([&] { return ev.last_acked.has_value(); }, 20000);
  const int hold_ms = static_cast<int>(rng.Range(1000, 3000));
  const size_t errors_before = ev.errors.size();
  int on_ms = 0, off_ms = 0;
  absl::Status on = TimedTestbed("errors", {"--errno", "EIO", "--fops", "WRITE,FSYNC"}, &on_ms);
  wk.Sleep(hold_ms);
  absl::Status off = TimedTestbed("errors", {"--off"}, &off_ms);
  const size_t errors_during = ev.errors.size() - errors_before;
  std::map<int, int> errnos;
  for (size_t i = errors_before; i < ev.errors.size(); ++i) errnos[ev.errors[i].second]++;
  absl::StrAppend(&rec->what, "GlusterFS error-gen: WRITE,FSYNC fail with EIO for ", hold_ms,
                  " ms (", errors_during, " umsync errors");
  for (const auto& [err, n] : errnos) absl::StrAppend(&rec->what, ", errno ", err, " x", n);
  absl::StrAppend(&rec->what, "; switching on ", on_ms, " ms, off ", off_ms, " ms)");
  for (const auto& [err, n] : errnos) {
    if (err != EIO) {
      Violate(rec, "errno", absl::StrCat(n, " umsync errors with errno ", err, " (",
                                         strerror(err), ") while GlusterFS returned EIO"));
    }
  }
  const uint64_t acked_at_off = ev.last_acked.value_or(0);
  if (!on.ok() || !off.ok()) {
    Violate(rec, "harness", absl::StrCat("gluster-testbed errors: ", on.ToString(), " / ",
                                         off.ToString()));
  } else if (!wk.PumpUntil([&] { return ev.last_acked.value_or(0) > acked_at_off; }, 30000) &&
             !wk.eof()) {
    Violate(rec, "liveness", "no umsync acknowledged within 30 s after error-gen was switched off");
  }
  wk.Sleep(static_cast<int>(rng.Range(0, 200)));
  wk.Kill();
  const bool fired = on.ok() && errors_during > 0;
  if (fired) Fired(draw);
  return fired;
}

absl::StatusOr<uint64_t> Harness::FillBounded(const std::string& path, int timeout_ms,
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
    const std::string line = n.ok() ? absl::StrCat("ok ", *n) : absl::StrCat("err ", n.status().ToString());
    ssize_t w = ::write(p[1], line.data(), line.size());
    (void)w;
    ::_exit(0);
  }
  ::close(p[1]);
  // Poll, never a blocking wait: chaos::Wait's SIGKILL + waitpid would hang with the child,
  // because SIGKILL does not end a FUSE request the daemon already took.
  Exit e;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      e.exited = WIFEXITED(status);
      e.code = e.exited ? WEXITSTATUS(status) : 0;
      e.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      break;
    }
    if (Clock::now() > deadline) {
      *hung = true;
      // Aborting the connection ends the request; then the child can be killed and reaped.
      Testbed("abort-fuse", {}, 60000).IgnoreError();  // the remount after this reports a dead testbed
      e = Wait(pid, 30000);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  ::close(p[0]);
  if (*hung) return absl::DeadlineExceededError(absl::StrCat("filling ", path, " hung for ", timeout_ms / 1000, " s"));
  uint64_t bytes = 0;
  if (out.rfind("ok ", 0) == 0 && absl::SimpleAtoi(out.substr(3), &bytes)) return bytes;
  return absl::InternalError(absl::StrCat("filler child (", e.ToString(), "): ", out));
}

bool Harness::DataDiskFull(IterationRecord* rec, Rng& rng, Worker& wk, Policy policy,
                           const std::string& data_dir) {
  EpochEvents& ev = wk.events();
  auto acked_after = [&](uint64_t r) { return [&, r] { return ev.last_acked && *ev.last_acked > r; }; };
  const bool gluster = !gluster_mount_.empty();
  Armed("enospc/data-full");
  wk.PumpUntil([&] { return ev.last_acked.has_value(); }, 20000);
  // On GlusterFS through the mount (the brick's ext4 fills), locally on the data tmpfs.
  const std::string filler = data_dir + "/../filler";
  // Frozen while the disk fills (through FUSE that takes ~1 s), or its rounds would have
  // written every hole before the disk is full and never meet the fault.
  wk.Stop();
  bool hung = false;
  absl::StatusOr<uint64_t> filled = FillBounded(filler, 60000, &hung);
  if (hung) {
    // A GlusterFS limit, not a Umap result: the client dropped the brick (ping-timeout on a
    // starved brick) and never answered the filler's write. The mount comes back and the
    // iteration goes on as a dead-client crash: the worker is killed, recovery is judged.
    Armed("enospc/data-full: GlusterFS client hung");
    absl::StrAppend(&rec->what, "GlusterFS client hung while filling the brick (",
                    filled.status().message(), "): FUSE aborted and remounted");
    wk.Kill();
    wk.Reap(10000);
    if (absl::Status s = Testbed("remount", {}, 120000); !s.ok()) {
      Violate(rec, "harness", s.ToString());
    }
    return false;
  }
  wk.Cont();
  absl::StrAppend(&rec->what, gluster ? "GlusterFS brick" : "data tmpfs", " filled to ENOSPC (",
                  std::count(rec->holes.begin(), rec->holes.end(), true), " of ", kBlocks,
                  " blocks initially holes)");
  if (!filled.ok()) {
    Violate(rec, "harness", filled.status().ToString());
    ::unlink(filler.c_str());
    wk.Kill();
    return false;
  }
  const uint64_t acked_at_fill = ev.last_acked.value_or(0);
  const size_t errors_at_fill = ev.errors.size();
  const bool errored = wk.PumpUntil([&] { return ev.errors.size() > errors_at_fill; }, 4000);
  wk.Sleep(static_cast<int>(rng.Range(100, 800)));
  // Fired: umsync failed, or the worker was held back (no acknowledgement while full). A run
  // whose rounds only overwrote blocks that already had space did not meet the fault.
  const bool fired = errored || ev.last_acked.value_or(0) == acked_at_fill;
  const uint64_t acked_at_free = ev.last_acked.value_or(0);
  const size_t errors_at_free = ev.errors.size();
  absl::StrAppend(&rec->what, " (", *filled >> 10, " KiB; ", errors_at_free - errors_at_fill,
                  " umsync errors, ", acked_at_free - acked_at_fill, " acknowledged while full)");
  ::unlink(filler.c_str());
  // Liveness: with space back, umsync must succeed again within the bound.
  const int bound_ms = gluster ? 30000 : 20000;
  if (!wk.PumpUntil(acked_after(acked_at_free), bound_ms) && !wk.eof()) {
    Violate(rec, "liveness", absl::StrCat("no umsync acknowledged within ", bound_ms / 1000,
                                          " s after the data disk's space came back (last "
                                          "acknowledged ", acked_at_free, ", ", ev.errors.size(),
                                          " umsync errors)"));
  }
  // A full data disk fails the apply, never the journal: every umsync error is ENOSPC, and in
  // atomic each failed round was committed before its apply failed (docs/durability.md), so
  // it must survive like an acknowledged one.
  for (size_t i = errors_at_fill; i < ev.errors.size(); ++i) {
    const auto [round, err] = ev.errors[i];
    if (err != ENOSPC) {
      Violate(rec, "enospc", absl::StrCat("umsync of round ", round, " failed with errno ", err,
                                          " (", strerror(err), ") on a full data disk, expected ENOSPC"));
    } else if (policy == Policy::kAtomic) {
      ev.committed = std::max(ev.committed.value_or(0), round);
    }
  }
  if (ev.committed) absl::StrAppend(&rec->what, "; rounds up to ", *ev.committed, " committed");
  wk.Sleep(static_cast<int>(rng.Range(0, 200)));
  wk.Kill();
  if (fired) Fired("enospc/data-full");
  return fired;
}

IterationRecord Harness::RunIteration(int index) {
  Rng rng(Mix(c_.seed) ^ Mix(static_cast<uint64_t>(index) + 1));
  // Weights: kill x3 (five crash points to cover), every other class x1.
  std::vector<std::string> pool;
  for (const std::string& f : c_.faults) {
    for (int k = 0; k < (f == "kill" ? 3 : 1); ++k) pool.push_back(f);
  }
  IterationRecord rec;
  rec.index = index;
  rec.cls = pool[rng.Range(0, pool.size() - 1)];
  const Policy policy = rng.OneIn(2) ? Policy::kAtomic : Policy::kRelaxed;
  rec.policy = policy == Policy::kAtomic ? "atomic" : "relaxed";
  ClassStats& st = stats_[rec.cls];
  auto t0 = Clock::now();
  if (absl::Status s = PrepareClass(rec.cls); !s.ok()) {
    rec.skipped = true;
    rec.skip_reason = std::string(s.message());
    st.skipped++;
    st.skip_reason = rec.skip_reason;
    return rec;
  }
  st.iterations++;
  DrawVariant(index, &rec);
  const std::string it_dir = absl::StrCat(run_dir_, "/it-", index);
  std::string data_parent = it_dir, journal_parent = it_dir;
  if (rec.cls == "reboot") {
    data_parent = gluster_mount_.empty() ? absl::StrCat(dfs_->mount(), "/it-", index)
                                         : absl::StrCat(gluster_mount_, "/it-", index);
    journal_parent = absl::StrCat(jfs_->mount(), "/it-", index);
  } else if (rec.cls == "enospc" && rec.variant == "data-full") {
    // The data file's disk fills up; the journal has room (the run dir).
    data_parent = gluster_mount_.empty() ? absl::StrCat(data_tmpfs_->mount(), "/it-", index)
                                         : absl::StrCat(gluster_mount_, "/it-", index);
  } else if (rec.cls == "enospc") {
    journal_parent = absl::StrCat(tmpfs_->mount(), "/it-", index);
  } else if (!gluster_mount_.empty()) {
    data_parent = absl::StrCat(gluster_mount_, "/it-", index);
  }
  const std::string data_dir = data_parent + "/data", journal_dir = journal_parent + "/journal";
  MakeDirs(data_dir).IgnoreError();  // reported below when the file cannot be created
  MakeDirs(it_dir).IgnoreError();
  MakeDirs(journal_parent).IgnoreError();
  const uint64_t tag = rng.Next() | 1;
  const uint64_t wseed = rng.Next();
  if (absl::Status s = WriteInitialFile(data_dir + "/data.umap", tag, rec.holes); !s.ok()) {
    Violate(&rec, "harness", s.ToString());
  } else {
    Model model(wseed, kBlocks, std::vector<uint64_t>(kBlocks, 0), rec.holes);
    uint64_t first_round = 1;
    const int epochs = static_cast<int>(rng.Range(1, 3));
    std::optional<PendingCheck> pending;
    for (int e = 0; e < epochs; ++e) {
      if (e > 0) absl::StrAppend(&rec.what, " | ");
      // The log of the iteration sits next to the data dir (on the faulty disk for reboot;
      // a copy goes to the run dir below).
      if (!RunEpoch(&rec, rng, data_dir, journal_dir, tag, wseed, policy, &model, &first_round,
                    &pending, e + 1 == epochs)) {
        break;
      }
    }
  }
  rec.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!rec.violations.empty()) {
    st.violations += rec.violations.size();
    // Keep the evidence: copy what lives on the loop/tmpfs disks into the run dir.
    if (data_parent != it_dir) {
      chaos::Run({"cp", "-a", data_parent, it_dir + "/data-copy"}, run_dir_ + "/setup.log", 30000);
    }
    if (journal_parent != it_dir) {
      chaos::Run({"cp", "-a", journal_parent, it_dir + "/journal-copy"}, run_dir_ + "/setup.log", 30000);
    }
    for (const Violation& v : rec.violations) {
      violations_.push_back({index, rec.cls, v, Repro(index), it_dir});
    }
  } else if (!c_.keep) {
    RemoveTree(it_dir).IgnoreError();  // best effort: a leftover directory only costs space
    if (data_parent != it_dir) RemoveTree(data_parent).IgnoreError();
    if (journal_parent != it_dir) RemoveTree(journal_parent).IgnoreError();
  }
  return rec;
}

uint64_t ParseDuration(const std::string& s) {
  if (s.empty()) return 0;
  uint64_t n = 0;
  std::string num = s, unit = "s";
  if (!std::isdigit(static_cast<unsigned char>(s.back()))) {
    num = s.substr(0, s.size() - 1);
    unit = s.substr(s.size() - 1);
  }
  if (!absl::SimpleAtoi(num, &n)) return ~0ull;
  if (unit == "s") return n;
  if (unit == "m") return n * 60;
  if (unit == "h") return n * 3600;
  return ~0ull;
}

std::string XmlEscape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += ch;
    }
  }
  return o;
}

void Harness::WriteReports(double seconds) {
  if (c_.report_dir.empty()) return;
  if (absl::Status s = MakeDirs(c_.report_dir); !s.ok()) {
    std::fprintf(stderr, "umap-chaos: --report: %s\n", s.ToString().c_str());
    return;
  }
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"umap-chaos\">\n";
  for (const auto& [cls, st] : stats_) {
    int n = 0, fails = 0, skips = 0;
    for (const auto& r : records_) {
      if (r.cls != cls) continue;
      ++n;
      fails += !r.violations.empty();
      skips += r.skipped;
    }
    absl::StrAppend(&xml, "  <testsuite name=\"chaos.", cls, "\" tests=\"", n, "\" failures=\"",
                    fails, "\" skipped=\"", skips, "\">\n");
    for (const auto& r : records_) {
      if (r.cls != cls) continue;
      absl::StrAppend(&xml, "    <testcase classname=\"chaos.", cls, "\" name=\"iteration-",
                      r.index, "-", r.policy, "\" time=\"", r.seconds, "\">");
      if (r.skipped) {
        absl::StrAppend(&xml, "<skipped message=\"", XmlEscape(r.skip_reason), "\"/>");
      }
      for (const Violation& v : r.violations) {
        absl::StrAppend(&xml, "<failure message=\"", XmlEscape(v.invariant), "\">",
                        XmlEscape(v.detail + "\n" + r.what + "\nreproduce: " + Repro(r.index)),
                        "</failure>");
      }
      absl::StrAppend(&xml, "<system-out>", XmlEscape(r.what), "</system-out></testcase>\n");
    }
    absl::StrAppend(&xml, "  </testsuite>\n");
  }
  xml += "</testsuites>\n";
  WriteWholeFile(c_.report_dir + "/chaos-junit.xml", xml, false).IgnoreError();

  std::string md = absl::StrCat("# umap-chaos summary\n\n- seed: `", c_.seed, "`\n- faults: `",
                                c_.faults_arg, "`, dfs `", c_.dfs, "`", 
                                c_.mutation.empty() ? "" : ", mutation `" + c_.mutation + "`",
                                "\n- iterations: ", records_.size(), ", wall time ",
                                static_cast<int>(seconds), " s\n\n",
                                "| class | iterations | faults fired | recoveries | crashes (SIGABRT/SIGBUS) | violations | worker peak RSS growth / peak RSS (MiB) | skipped |\n",
                                "|---|---|---|---|---|---|---|---|\n");
  for (const auto& [cls, st] : stats_) {
    absl::StrAppend(&md, "| ", cls, " | ", st.iterations, " | ", st.fired, " | ", st.recoveries,
                    " | ", st.CrashText(), " | ", st.violations, " | ",
                    absl::StrFormat("%.1f / %.1f", st.max_rss_growth_kib / 1024.0, st.max_rss_kib / 1024.0), " | ",
                    st.skipped ? absl::StrCat(st.skipped, " (", st.skip_reason, ")") : "0", " |\n");
  }
  absl::StrAppend(&md, "\n| crash point | armed | fired |\n|---|---|---|\n");
  std::set<std::string> names;
  for (auto& [k, v] : point_armed_) names.insert(k);
  for (auto& [k, v] : point_fired_) names.insert(k);
  for (const std::string& k : names) {
    absl::StrAppend(&md, "| `", k, "` | ", point_armed_[k], " | ", point_fired_[k], " |\n");
  }
  if (!draw_armed_.empty()) {
    absl::StrAppend(&md, "\n| fault draw | armed (worker runs) | fired |\n|---|---|---|\n");
    for (const auto& [k, n] : draw_armed_) {
      absl::StrAppend(&md, "| `", k, "` | ", n, " | ", draw_fired_[k], " |\n");
    }
  }
  absl::StrAppend(&md, "\n## Violations: ", violations_.size(), "\n\n");
  for (const ViolationRecord& v : violations_) {
    absl::StrAppend(&md, "- iteration ", v.iteration, " (", v.cls, "): **", v.v.invariant, "**: ",
                    v.v.detail, "  \n  reproduce: `", v.repro, "`; evidence in `", v.dir, "`\n");
  }
  WriteWholeFile(c_.report_dir + "/chaos-summary.md", md, false).IgnoreError();
}

int Harness::Run() {
  const uint64_t budget = ParseDuration(c_.duration);
  if (budget == ~0ull) {
    std::fprintf(stderr, "umap-chaos: --duration %s: expected N, Ns, Nm or Nh\n", c_.duration.c_str());
    return 2;
  }
  if (c_.work_dir.empty()) c_.work_dir = absl::StrCat("/var/tmp/umap-chaos-", ::getpid());
  run_dir_ = c_.work_dir;
  if (absl::Status s = MakeDirs(run_dir_); !s.ok()) {
    std::fprintf(stderr, "umap-chaos: %s\n", s.ToString().c_str());
    return 2;
  }
  std::printf("umap-chaos: seed %llu, faults %s, dfs %s%s, work dir %s\n",
              static_cast<unsigned long long>(c_.seed), c_.faults_arg.c_str(), c_.dfs.c_str(),
              c_.mutation.empty() ? "" : (", MUTATION " + c_.mutation).c_str(), run_dir_.c_str());
  std::fflush(stdout);
  if (c_.dfs == "gluster") {
    gluster_name_ = absl::StrCat("chaos", ::getpid());
    const std::string mnt = run_dir_ + "/gluster";
    MakeDirs(mnt).IgnoreError();
    // A small brick: the brick's ext4 can be filled (enospc data-full) and power-cut
    // (reboot: gluster-testbed shutdown-brick).
    Exit e = chaos::Run({c_.testbed, "up-single", "--name", gluster_name_, "--mount", mnt,
                  "--ping-timeout", "3", "--small-brick", "24M"},
                 run_dir_ + "/gluster-up.log", 180000);
    if (e.exited && e.code == 0) {
      gluster_mount_ = mnt;
    } else {
      std::fprintf(stderr,
                   "umap-chaos: GlusterFS testbed did not start (%s; see %s): every class runs "
                   "on the local data dir instead and the run counts as skipped\n",
                   e.ToString().c_str(), (run_dir_ + "/gluster-up.log").c_str());
      for (const std::string& f : c_.faults) {
        stats_[f].skip_reason = "GlusterFS testbed did not start";
        stats_[f].skipped++;
      }
    }
  }
  auto t0 = Clock::now();
  int index = c_.only_iteration >= 0 ? c_.only_iteration : 0;
  for (;; ++index) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if (c_.only_iteration >= 0 && index > c_.only_iteration) break;
    if (c_.only_iteration < 0) {
      if (c_.iterations > 0 && index >= c_.iterations) break;
      if (budget > 0 && elapsed >= budget) break;
      if (c_.iterations == 0 && budget == 0) break;
    }
    IterationRecord rec = RunIteration(index);
    const char* verdict = rec.skipped ? "SKIP" : rec.violations.empty() ? "ok" : "VIOLATION";
    if (c_.verbose || !rec.violations.empty() || rec.skipped) {
      std::printf("[%d] %s %s: %s (%.1f s) %s\n", index, rec.cls.c_str(), rec.policy.c_str(),
                  rec.what.c_str(), rec.seconds, verdict);
    }
    for (const Violation& v : rec.violations) {
      std::printf("  VIOLATION %s: %s\n  reproduce: %s\n", v.invariant.c_str(), v.detail.c_str(),
                  Repro(index).c_str());
    }
    std::fflush(stdout);
    records_.push_back(std::move(rec));
    if (c_.expect_violation && !violations_.empty()) break;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!gluster_mount_.empty()) {
    chaos::Run({c_.testbed, "down", "--name", gluster_name_}, run_dir_ + "/gluster-up.log", 120000);
  }
  jfs_.reset();
  dfs_.reset();
  tmpfs_.reset();
  data_tmpfs_.reset();  // before the work dir is removed (its mount point is in it)

  std::printf("\n%-8s %10s %12s %11s %8s %11s %10s %8s\n", "class", "iterations", "faults fired",
              "recoveries", "crashes", "violations", "RSS+ MiB", "skipped");
  bool any_skip = false;
  for (const std::string& f : c_.faults) {
    ClassStats& st = stats_[f];
    std::printf("%-8s %10llu %12llu %11llu %8llu %11llu %10.1f %8llu%s%s\n", f.c_str(),
                static_cast<unsigned long long>(st.iterations),
                static_cast<unsigned long long>(st.fired),
                static_cast<unsigned long long>(st.recoveries),
                static_cast<unsigned long long>(st.crashes),
                static_cast<unsigned long long>(st.violations), st.max_rss_growth_kib / 1024.0,
                static_cast<unsigned long long>(st.skipped), st.skipped ? "  skipped: " : "",
                st.skip_reason.c_str());
    any_skip |= st.skipped > 0;
  }
  for (const std::string& f : c_.faults) {
    if (!stats_[f].crash_signals.empty()) {
      std::printf("crashes of %s: %s\n", f.c_str(), stats_[f].CrashText().c_str());
    }
  }
  std::printf("\n%-26s %8s %8s\n", "crash point", "armed", "fired");
  std::set<std::string> names;
  for (auto& [k, v] : point_armed_) names.insert(k);
  for (auto& [k, v] : point_fired_) names.insert(k);
  for (const std::string& k : names) {
    std::printf("%-26s %8llu %8llu\n", k.c_str(), static_cast<unsigned long long>(point_armed_[k]),
                static_cast<unsigned long long>(point_fired_[k]));
  }
  if (!draw_armed_.empty()) {
    std::printf("\n%-44s %8s %8s\n", "fault draw", "armed", "fired");
    for (const auto& [k, n] : draw_armed_) {
      std::printf("%-44s %8llu %8llu\n", k.c_str(), static_cast<unsigned long long>(n),
                  static_cast<unsigned long long>(draw_fired_[k]));
    }
  }
  std::printf("\n%zu iterations in %.0f s, %zu violations (seed %llu)\n", records_.size(), seconds,
              violations_.size(), static_cast<unsigned long long>(c_.seed));
  WriteReports(seconds);
  if (violations_.empty() && !c_.keep) RemoveTree(run_dir_).IgnoreError();
  if (c_.expect_violation) {
    if (violations_.empty()) {
      std::printf("FAIL: --expect-violation: the suite did not catch%s within the run\n",
                  c_.mutation.empty() ? " anything" : (" mutation " + c_.mutation).c_str());
      return 1;
    }
    std::printf("PASS: caught %s (first: %s)\n",
                c_.mutation.empty() ? "a violation" : ("mutation " + c_.mutation).c_str(),
                violations_.front().v.invariant.c_str());
    return 0;
  }
  if (!violations_.empty()) {
    std::printf("FAIL: %zu violations; reproduce each with the command printed above\n",
                violations_.size());
    return 1;
  }
  if (any_skip) {
    std::printf("SKIPPED: a requested fault class could not run (see above); not a pass\n");
    return 77;
  }
  return 0;
}

}  // namespace
}  // namespace chaos

int main(int argc, char** argv) {
  chaos::Config c;
  CLI::App app{"umap-chaos: kill, power-cut, stall and fill the storage under a real Umap "
               "worker, recover with umap-recover, check the durability invariants "
               "(docs/chaos.md)"};
  bool have_seed = false;
  app.add_option("--seed", c.seed, "PRNG seed (default: from the clock; always printed)")
      ->each([&](const std::string&) { have_seed = true; });
  app.add_option("--iterations", c.iterations, "stop after N iterations (0: use --duration)");
  app.add_option("--duration", c.duration, "stop after this time: N[s|m|h]");
  app.add_option("--faults", c.faults_arg, "comma-separated: kill,reboot,timeout,enospc,eio,torn")
      ->capture_default_str();
  app.footer(
      "Fault classes (docs/chaos.md):\n"
      "  kill     SIGKILL at a crash point or at a random time\n"
      "  reboot   power cut (SIGSTOP, FS_IOC_SHUTDOWN NOLOGFLUSH) of the journal disk and/or the\n"
      "           data disk; --dfs gluster: the data disk is the brick's ext4 (gluster-testbed\n"
      "           shutdown-brick), half of the iterations with holes in the initial file\n"
      "  timeout  local: a data-file fdatasync stalls in FaultEnv; --dfs gluster: one of\n"
      "           stop-brick (SIGSTOP 1-5 s), abort-fuse (ENOTCONN for good; the mount is\n"
      "           brought back before recovery), delay-gen spike (WRITE,FSYNC,READ +20-300 ms\n"
      "           at 20-100 % for 1-3 s); liveness after each\n"
      "  enospc   data-full (data tmpfs, or the GlusterFS brick, filled; the initial file has\n"
      "           holes, the only blocks that need space), journal-full (journal tmpfs\n"
      "           filled), journal-injected / journal-sticky (FaultFs NoSpace, transient or\n"
      "           sticky, until the worker heals it)\n"
      "  eio      the data file (FaultEnv: EIO, lost fdatasync, EINTR reads), the journal\n"
      "           (FaultFs: IOError on appends, syncs that lose their bytes, file\n"
      "           creations) or both; death after a drawn round, with an in-process power\n"
      "           cut of the data, the journal or both; --dfs gluster: half the iterations\n"
      "           instead turn on the volume's error-gen (WRITE,FSYNC fail with EIO) for\n"
      "           1-3 s; liveness after\n"
      "  torn     as eio with torn data-file writes and garbled journal power cuts, or one bit\n"
      "           of a committed journal payload flipped\n"
      "Exit: 0 no violation, 1 violations, 2 usage, 77 a requested class could not run (skip).");
  app.add_option("--dfs", c.dfs, "local or gluster")->check(CLI::IsMember({"local", "gluster"}));
  app.add_option("--report", c.report_dir, "write chaos-junit.xml and chaos-summary.md here");
  app.add_option("--mutation", c.mutation, "arm a test mutation in workers (and umap-recover)")
      ->check(CLI::IsMember({"apply_before_commit", "gc_before_sync", "skip_crc"}));
  app.add_option("--work-dir", c.work_dir, "scratch directory (default /var/tmp/umap-chaos-PID)");
  app.add_option("--worker", c.worker, "umap-chaos-worker binary")->capture_default_str();
  app.add_option("--recover", c.recover, "umap-recover binary")->capture_default_str();
  app.add_option("--gluster-testbed", c.testbed, "faultinject/gluster/gluster-testbed script")
      ->capture_default_str();
  app.add_option("--iteration", c.only_iteration, "run only iteration I (reproduce)");
  app.add_flag("--expect-violation", c.expect_violation,
               "succeed only if a violation is found (mutation tests); stops at the first");
  app.add_flag("--keep", c.keep, "keep the work dir of passing iterations");
  app.add_flag("--keep-crash-state", c.keep_crash,
               "copy the data file and the journal as the crash left them (before any "
               "recovery) into the iteration's directory");
  app.add_flag("-v,--verbose", c.verbose, "print every iteration");
  c.faults_arg = "kill,reboot,timeout,enospc,eio,torn";
  CLI11_PARSE(app, argc, argv);
  {
    std::error_code ec;
    std::filesystem::path self = std::filesystem::canonical("/proc/self/exe", ec);
    if (!ec) c.self = self.string();
  }
  if (!have_seed) {
    c.seed = static_cast<uint64_t>(
        std::chrono::system_clock::now().time_since_epoch().count()) % 1000000007ull;
  }
  for (absl::string_view f : absl::StrSplit(c.faults_arg, ',', absl::SkipEmpty())) {
    if (std::find(std::begin(chaos::kClassNames), std::end(chaos::kClassNames), f) ==
        std::end(chaos::kClassNames)) {
      std::fprintf(stderr, "umap-chaos: --faults: unknown class '%s'\n", std::string(f).c_str());
      return 2;
    }
    c.faults.emplace_back(f);
  }
  if (c.faults.empty()) {
    std::fprintf(stderr, "umap-chaos: --faults is empty\n");
    return 2;
  }
  if (c.iterations == 0 && c.duration == "0" && c.only_iteration < 0) c.iterations = 20;
  std::signal(SIGPIPE, SIG_IGN);
  chaos::Harness h(c);
  return h.Run();
}
