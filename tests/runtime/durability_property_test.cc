// Stateful property test of runtime + journal + recovery together (docs/testing.md).
//
// One process, the production code paths: a runtime::Runtime maps a real file (on tmpfs when
// /dev/shm exists, for cheap fsyncs) through faultinject::FaultEnv, and its RocksDB journal
// runs on faultinject::FaultFs (RuntimeOptions::journal_fs). rapidcheck (rc::state) generates sequences
// of commands:
//
//   Write(block)        a new version of a whole block, through the mapped pointer
//   Read(block)         the mapping returns the version last written
//   Umsync(range|all)   result recorded: OK = acknowledged, error = indeterminate
//   EvictPressure       reads the cold half of the file: dirty hot blocks are evicted
//                       (atomic: staged in the journal; relaxed: committed on their own)
//   Inject(fault, n)    the next n data-file writes/fdatasyncs (EIO, ENOSPC, torn,
//                       fsync-loses-data), WAL appends/syncs (IOError, NoSpace) or journal
//                       file creations fail
//   Heal                clears every fault; a whole umsync must then succeed (liveness)
//   Unmap+Map           uunmap (a whole umsync) and umap again in the same runtime
//   Crash(kind, ...)    kill or power cut (drop all / tear / tear+garble unsynced data),
//                       between commands or inside a umsync at a crash point; optionally
//                       also a crash or an I/O error inside recovery; then recovery,
//                       invariant checks, optionally a second recovery, and a new runtime.
// Each case uses 4 KiB blocks (one page) or 8 KiB blocks (two pages).
//
// A crash "kills" the runtime in process: FaultEnv and FaultFs are frozen (every later call
// fails), then the Runtime is destroyed. Its destructor still tries a final write-back of
// every mapping; with both frozen that write-back can write nothing. This is checked on
// every crash (the data file and every journal file are byte-identical before and after the
// destructor), so what survives is exactly what a SIGKILL at the freeze would leave. A
// power cut then drops unsynced data in both (FaultEnv::DropUnsyncedData,
// FaultFs::DropUnsyncedData).
//
// The oracle (Oracle below) knows, per block, every version written and the base state
// (initial file, or what the last recovery produced), and every umsync attempt since with
// its snapshot of the range and whether it was acknowledged. After each recovery:
//   - no block is torn: every block decodes to exactly one version written to it;
//   - atomic: the file equals base + the acknowledged attempts + some subset of the
//     indeterminate ones, applied in issue order (durability, prefix order, all-or-nothing,
//     never unsynced or merely staged data);
//   - relaxed: every block holds its floor (last acknowledged or last recovered version) or
//     a later version written to it (durability, monotonicity, never resurrected);
//   - recovery reports success; a second run (RecoverTwice) has nothing to do and leaves the
//     file bytes and every journal key and value identical.
// Between commands: after an acknowledged umsync the file holds its snapshot; atomic: the
// file never shows a version that no umsync attempt captured; relaxed: no block below its
// floor. An error from umsync with no fault injected since the last Heal/crash is a failure.
// With deferred file syncs (half the cases) the sink writes the file in the background, so
// the file may lag: it must reach the snapshot of an acknowledged whole umsync once every
// fault is cleared (within 3 s), and relaxed blocks may show any version written, never one
// that was not; the checks after a recovery are the same.
//
// Replay: the seed is printed by rapidcheck ("Using configuration: seed=..."); a failure
// prints RC_PARAMS="reproduce=..." (docs/testing.md). Default 1000 cases per property
// (max_success below, overridable with RC_PARAMS).
#include <execinfo.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/debugging/symbolize.h"
#include "base/crash_point.h"
#include "faultinject/fault_env.h"
#include "faultinject/fault_fs.h"
#include "journal/journal.h"
#include "recovery/recovery.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/iterator.h"
#include "runtime/runtime.h"
#include "tests/runtime/signal_probe.h"

namespace umap::runtime {
namespace {

using faultinject::DropOptions;
using faultinject::DropMode;
using faultinject::Fault;
using faultinject::FaultEnv;
using faultinject::FaultFs;
using faultinject::FileClass;
using faultinject::FsDropOptions;
using faultinject::FsFault;
using faultinject::FsOp;
using faultinject::Op;

// Block size of the current case: 4 KiB (one page) or 8 KiB (two pages: a block's pages are
// filled, protected and captured together). Set by RunProperty before the Sut exists.
size_t g_bs = 4096;
// This case's umsyncs leave the file's writes and fdatasync to the sink's applier thread
// (RuntimeOptions::defer_file_sync): the journal alone makes them durable until then.
bool g_defer = false;
// This case's umsyncs capture at most this many blocks at a time (RuntimeOptions::
// umsync_chunk_bytes), and the journal writes larger transactions in batches of that size:
// 0 = the default (far above this file's size).
uint64_t g_chunk_blocks = 0;
constexpr uint64_t kBlocks = 32;      // file size in blocks
constexpr uint64_t kHot = 16;         // Write targets [0, kHot); EvictPressure reads the rest
size_t CacheBytes() { return 12 * g_bs; }  // 8 cache blocks + 4 shadows: the minimum
constexpr size_t kMaxIndeterminate = 12;  // subsets enumerated by the atomic check

// Sets the default case count before rapidcheck reads RC_PARAMS (it does so on first use,
// inside the first property); an explicit max_success in RC_PARAMS wins.
const bool kDefaultParams = [] {
  const char* p = std::getenv("RC_PARAMS");
  std::string params = p ? p : "";
  if (params.find("max_success") == std::string::npos) {
    params += params.empty() ? "max_success=1000" : " max_success=1000";
    ::setenv("RC_PARAMS", params.c_str(), 1);
  }
  return true;
}();

// rapidcheck scales inRange by the size; resize(100) makes a pick uniform in [lo, hi).
template <typename T>
T Pick(T lo, T hi) {
  return *rc::gen::resize(100, rc::gen::inRange<T>(lo, hi));
}

// ---- block versions ------------------------------------------------------------------------

// The bytes of `block` at `version` (0: the initial file). A 16-byte header names both; the
// rest is a stream seeded by both, so a torn block (prefix of one version, rest of another)
// decodes to nothing.
std::string Image(uint64_t block, uint64_t version) {
  std::string s(g_bs, '\0');
  std::memcpy(s.data(), "UMPV", 4);
  const uint32_t b32 = static_cast<uint32_t>(block);
  std::memcpy(s.data() + 4, &b32, 4);
  std::memcpy(s.data() + 8, &version, 8);
  uint64_t x = (version + 1) * 0x9E3779B97F4A7C15ull ^ (block + 7) * 0xC2B2AE3D27D4EB4Full;
  for (size_t i = 16; i < g_bs; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(s.data() + i, &x, 8);
  }
  return s;
}

// The version held by `data` (a block's bytes), or nullopt when torn or foreign.
std::optional<uint64_t> VersionOf(uint64_t block, absl::string_view data) {
  if (data.size() != g_bs || data.substr(0, 4) != "UMPV") return std::nullopt;
  uint32_t b32;
  uint64_t version;
  std::memcpy(&b32, data.data() + 4, 4);
  std::memcpy(&version, data.data() + 8, 8);
  if (b32 != block) return std::nullopt;
  if (Image(block, version) != data) return std::nullopt;
  return version;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

using Versions = std::vector<std::optional<uint64_t>>;  // per block; nullopt = torn

Versions Decode(const std::string& bytes) {
  Versions v(kBlocks);
  for (uint64_t b = 0; b < kBlocks && (b + 1) * g_bs <= bytes.size(); ++b) {
    v[b] = VersionOf(b, absl::string_view(bytes).substr(b * g_bs, g_bs));
  }
  return v;
}

std::string Show(const Versions& v) {
  std::string s = "[";
  for (uint64_t b = 0; b < v.size(); ++b) {
    s += v[b] ? std::to_string(*v[b]) : std::string("TORN");
    s += b + 1 < v.size() ? " " : "]";
  }
  return s;
}

// Every byte of every file in `dir` (to prove a frozen destructor wrote nothing).
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) out[e.path().filename().string()] = ReadFile(e.path().string());
  }
  return out;
}

// Names added, removed or changed between two snapshots, with sizes ("" when equal).
std::string SnapshotDiff(const std::map<std::string, std::string>& a,
                         const std::map<std::string, std::string>& b) {
  std::string out;
  for (const auto& [name, bytes] : a) {
    auto it = b.find(name);
    if (it == b.end()) {
      out += " -" + name;
    } else if (it->second != bytes) {
      out += " ~" + name + "(" + std::to_string(bytes.size()) + "->" +
             std::to_string(it->second.size()) + ")";
    }
  }
  for (const auto& [name, bytes] : b) {
    if (!a.contains(name)) out += " +" + name + "(" + std::to_string(bytes.size()) + ")";
  }
  return out;
}

// ---- crash report ------------------------------------------------------------------------------

// Accesses to the mapping go through umaptest::GuardedCopy (signal_probe.h), which turns a
// SIGBUS or SIGSEGV of the access into a failed command.
using ::umaptest::GuardedCopy;

// A crash of the test process (a fault no handler resolved, an abort) prints the signal,
// the address and the stack of the thread that took it, so that a rare timing-dependent
// crash can be placed from the CI log alone. backtrace() unwinds by the call-frame tables
// (the release build keeps no frame pointers); absl::Symbolize names the frames. Umap's
// signal handlers, installed later, chain to this one for what they do not resolve.
void WriteStr(const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); }
void OnCrash(int sig, siginfo_t* info, void*) {
  char line[512];
  std::snprintf(line, sizeof line,
                "\n*** durability property: signal %d (%s) at address %p, thread %ld\n", sig,
                ::strsignal(sig), info->si_addr, static_cast<long>(::gettid()));
  WriteStr(line);
  void* pcs[64];
  const int n = ::backtrace(pcs, 64);
  for (int i = 0; i < n; ++i) {
    char name[256];
    if (!absl::Symbolize(pcs[i], name, sizeof name)) std::strcpy(name, "?");
    std::snprintf(line, sizeof line, "  @ %p %s\n", pcs[i], name);
    WriteStr(line);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
const bool kCrashReport = [] {
  absl::InitializeSymbolizer("/proc/self/exe");
  void* warm[1];
  ::backtrace(warm, 1);  // loads the unwinder now: not inside a signal handler
  struct sigaction sa = {};
  sa.sa_sigaction = OnCrash;
  sa.sa_flags = SA_SIGINFO;
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE}) ::sigaction(sig, &sa, nullptr);
  return true;
}();

// ---- the oracle ------------------------------------------------------------------------------

struct Attempt {
  uint64_t first = 0, end = 0;
  std::vector<uint64_t> snapshot;  // app-visible versions of [first, end) at the call
  bool acked = false;
};

struct Oracle {
  umap_policy policy = UMAP_POLICY_ATOMIC;
  std::vector<uint64_t> mem = std::vector<uint64_t>(kBlocks, 0);    // what the app sees
  std::vector<uint64_t> base = std::vector<uint64_t>(kBlocks, 0);   // after the last recovery
  std::vector<uint64_t> floor = std::vector<uint64_t>(kBlocks, 0);  // relaxed lower bound
  std::vector<std::vector<uint64_t>> written =
      std::vector<std::vector<uint64_t>>(kBlocks);  // versions written since base (ascending)
  std::vector<Attempt> attempts;                    // umsyncs since base, in issue order
  std::vector<std::set<uint64_t>> captured =
      std::vector<std::set<uint64_t>>(kBlocks);  // versions any attempt since base captured
  uint64_t next_version = 1;

  size_t indeterminate() const {
    return std::count_if(attempts.begin(), attempts.end(), [](const Attempt& a) { return !a.acked; });
  }

  bool WrittenSinceBase(uint64_t b, uint64_t v) const {
    return std::binary_search(written[b].begin(), written[b].end(), v);
  }

  // Relaxed: the floor, or a later version written since base.
  bool RelaxedAllows(uint64_t b, uint64_t v) const {
    return v == floor[b] || (v > floor[b] && WrittenSinceBase(b, v));
  }

  // Relaxed with deferred file syncs, between commands: the file lags its floor until the
  // sink's applier wrote it (the journal holds the rest), but shows nothing never written.
  bool RelaxedDeferredMayShow(uint64_t b, uint64_t v) const {
    return v == base[b] || WrittenSinceBase(b, v);
  }

  // Atomic, between commands: a version some attempt captured (or the base).
  bool AtomicMayShow(uint64_t b, uint64_t v) const {
    return v == base[b] || captured[b].contains(v);
  }

  // Records an attempt. Attempts that cannot change any outcome are dropped, which keeps
  // the subsets AtomicMismatch enumerates few: an indeterminate attempt right before an
  // identical indeterminate one (applying a snapshot twice = once), and an indeterminate
  // attempt right before an acknowledged one whose range covers it (its blocks are
  // overwritten whether or not it is present).
  void Push(const Attempt& a) {
    for (uint64_t b = a.first; b < a.end; ++b) captured[b].insert(a.snapshot[b - a.first]);
    if (!a.acked && !attempts.empty() && !attempts.back().acked) {
      const Attempt& prev = attempts.back();
      if (prev.first == a.first && prev.end == a.end && prev.snapshot == a.snapshot) return;
    }
    while (a.acked && !attempts.empty() && !attempts.back().acked &&
           a.first <= attempts.back().first && attempts.back().end <= a.end) {
      attempts.pop_back();
    }
    attempts.push_back(a);
  }

  // Atomic, after recovery: base + acknowledged + a subset of the indeterminate attempts,
  // in issue order. Returns an explanation when `got` matches none.
  std::optional<std::string> AtomicMismatch(const Versions& got) const {
    std::vector<size_t> ind;
    for (size_t i = 0; i < attempts.size(); ++i) {
      if (!attempts[i].acked) ind.push_back(i);
    }
    RC_PRE(ind.size() <= kMaxIndeterminate);  // not expected with ~30 commands
    for (uint64_t mask = 0; mask < (uint64_t{1} << ind.size()); ++mask) {
      std::vector<uint64_t> state = base;
      size_t k = 0;
      for (size_t i = 0; i < attempts.size(); ++i) {
        bool take = attempts[i].acked;
        if (!attempts[i].acked) take = (mask >> k++) & 1;
        if (!take) continue;
        const Attempt& a = attempts[i];
        for (uint64_t b = a.first; b < a.end; ++b) state[b] = a.snapshot[b - a.first];
      }
      bool same = true;
      for (uint64_t b = 0; b < kBlocks && same; ++b) same = got[b] && *got[b] == state[b];
      if (same) return std::nullopt;
    }
    std::vector<uint64_t> acked_only = base;
    for (const Attempt& a : attempts) {
      if (!a.acked) continue;
      for (uint64_t b = a.first; b < a.end; ++b) acked_only[b] = a.snapshot[b - a.first];
    }
    std::ostringstream os;
    os << "recovered file " << Show(got) << " is no committed state; base + acknowledged = [";
    for (uint64_t b = 0; b < kBlocks; ++b) os << acked_only[b] << (b + 1 < kBlocks ? " " : "]");
    os << "; " << ind.size() << " indeterminate umsync(s)";
    return os.str();
  }

  // After a recovery produced `got` (checked): it is the new base.
  void Rebase(const Versions& got) {
    for (uint64_t b = 0; b < kBlocks; ++b) {
      mem[b] = base[b] = floor[b] = *got[b];
      written[b].clear();
      captured[b].clear();
    }
    attempts.clear();
  }
};

// ---- the system under test -------------------------------------------------------------------

enum class CrashKind { kKill, kPowerDropAll, kPowerTear, kPowerTearGarble };
const char* CrashKindName(CrashKind k) {
  switch (k) {
    case CrashKind::kKill: return "kill";
    case CrashKind::kPowerDropAll: return "power-cut(drop all)";
    case CrashKind::kPowerTear: return "power-cut(tear)";
    case CrashKind::kPowerTearGarble: return "power-cut(tear+garble)";
  }
  return "?";
}

// Crash points a umsync passes (the in-flight crash).
constexpr const char* kSyncPoints[] = {"journal.before_commit", "journal.mid_stream",
                                       "journal.after_commit",  "apply.mid_write",
                                       "apply.after_sync",      "journal.before_mark"};

std::string TempRoot() {
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec)) return "/dev/shm";
  const char* t = std::getenv("TMPDIR");
  return t ? t : "/tmp";
}

class Sut {
 public:
  explicit Sut(umap_policy policy) {
    oracle_.policy = policy;
    std::string tmpl = TempRoot() + "/umap-prop-XXXXXX";
    RC_ASSERT(::mkdtemp(tmpl.data()) != nullptr);
    dir_ = tmpl;
    data_ = dir_ + "/data.bin";
    jdir_ = dir_ + "/journal";
    std::string init;
    for (uint64_t b = 0; b < kBlocks; ++b) init += Image(b, 0);
    {
      std::ofstream f(data_, std::ios::binary | std::ios::trunc);
      f.write(init.data(), static_cast<std::streamsize>(init.size()));
    }
    env_ = std::make_unique<FaultEnv>(Env::Default());
    fs_ = std::make_shared<FaultFs>(rocksdb::FileSystem::Default());
    Start();
  }

  ~Sut() {
    crash_point::Disarm();
    if (rt_ != nullptr) {
      env_->ClearAll();
      fs_->ClearAll();
      if (env_->frozen()) env_->Restart();
      if (fs_->frozen()) fs_->Restart();
      rt_.reset();
    }
    if (fd_ >= 0) ::close(fd_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const Oracle& oracle() const { return oracle_; }
  int sync_crashes_fired() const { return sync_crashes_fired_; }
  int stream_crashes_fired() const { return stream_crashes_fired_; }
  int recovery_crashes_fired() const { return recovery_crashes_fired_; }
  int recovery_io_errors_fired() const { return recovery_io_errors_fired_; }
  int crashes() const { return crashes_; }
  int remaps() const { return remaps_; }
  int indeterminate_total() const { return indeterminate_total_; }
  // WAL bytes a LosesData sync failed to write, and those a power cut then zeroed.
  uint64_t wal_bytes_lost() const { return fs_->counters().bytes_lost_by_syncs; }
  uint64_t wal_bytes_zeroed() const { return fs_->counters().bytes_zeroed; }
  // Injected faults that fired so far (FaultEnv and FaultFs count from their creation).
  uint64_t faults_fired() const {
    uint64_t n = 0;
    for (int k = 0; k < faultinject::kNumFaultKinds; ++k) {
      const auto kind = static_cast<faultinject::FaultKind>(k);
      if (kind != faultinject::FaultKind::kPowerCut) n += env_->fired(kind);
    }
    for (uint64_t f : fs_->counters().fired) n += f;
    return n;
  }

  void Write(uint64_t b) {
    const uint64_t v = oracle_.next_version++;
    const std::string img = Image(b, v);
    const int sig = GuardedCopy(p_ + b * g_bs, img.data(), g_bs);
    if (sig != 0) RC_FAIL("signal " + std::to_string(sig) + " writing block " + std::to_string(b));
    oracle_.mem[b] = v;
    oracle_.written[b].push_back(v);
  }

  // The application reads back what it wrote last, wherever the block is (cache, shadow,
  // staged in the journal, committed but not applied, file).
  void Read(uint64_t b) {
    std::string got(g_bs, '\0');
    const int sig = GuardedCopy(got.data(), p_ + b * g_bs, g_bs);
    if (sig != 0) RC_FAIL("signal " + std::to_string(sig) + " reading block " + std::to_string(b));
    const std::optional<uint64_t> v = VersionOf(b, got);
    if (!(v && *v == oracle_.mem[b])) {
      RC_FAIL("block " + std::to_string(b) + " reads as " + Show({v}) + ", last written " +
              std::to_string(oracle_.mem[b]));
    }
  }

  // Returns whether it was acknowledged.
  bool Umsync(uint64_t first, uint64_t end) {
    Attempt a;
    a.first = first;
    a.end = end;
    a.snapshot.assign(oracle_.mem.begin() + first, oracle_.mem.begin() + end);
    absl::Status s = rt_->Sync(p_ + first * g_bs, (end - first) * g_bs);
    a.acked = s.ok();
    if (!s.ok() && !in_crash_) {
      // Only an injected fault may make a umsync fail.
      RC_ASSERT(injected_since_heal_ > 0);
    }
    oracle_.Push(a);
    indeterminate_total_ += !a.acked;
    if (a.acked) {
      if (oracle_.policy == UMAP_POLICY_RELAXED) {
        for (uint64_t b = first; b < end; ++b) oracle_.floor[b] = oracle_.mem[b];
      }
      if (!in_crash_ && !g_defer) {
        // Durable means in the file now, too. (Deferred: the applier writes it later, and
        // may be failing on an injected fault; Heal checks that it gets there.)
        const Versions f = Decode(ReadFile(data_));
        for (uint64_t b = first; b < end; ++b) {
          if (!(f[b] && *f[b] == oracle_.mem[b])) {
            RC_FAIL("acknowledged umsync [" + std::to_string(first) + "," + std::to_string(end) +
                    ") but file block " + std::to_string(b) + " is " + Show({f[b]}) +
                    ", want " + std::to_string(oracle_.mem[b]));
          }
        }
      }
    }
    return a.acked;
  }

  void EvictPressure() {
    char c;
    for (uint64_t b = kHot; b < kBlocks; ++b) {
      const int sig = GuardedCopy(&c, p_ + b * g_bs, 1);
      if (sig != 0) RC_FAIL("signal " + std::to_string(sig) + " reading block " + std::to_string(b));
    }
    // Let the write-back thread drain the shadows (deterministic enough to shrink); a failing
    // write-back keeps some, and the next command proceeds anyway.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (rt_->shadows().in_use() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  enum class Inject {
    kDataWriteEio, kDataWriteEnospc, kDataTornWrite, kDataSyncEio, kDataSyncLosesData,
    kWalAppendIo, kWalAppendNoSpace, kWalSyncIo, kWalSyncNoSpace, kJournalNewFileIo,
    kWalSyncLosesData, kWalZerosNoSpace,
  };
  static constexpr int kNumInject = 12;
  static const char* InjectName(Inject i) {
    static const char* kNames[] = {"data write EIO", "data write ENOSPC", "data torn write",
                                   "data fdatasync EIO", "data fdatasync loses data",
                                   "WAL append IOError", "WAL append NoSpace", "WAL sync IOError",
                                   "WAL sync NoSpace", "journal new file IOError",
                                   "WAL sync loses data", "WAL zeros NoSpace"};
    return kNames[static_cast<int>(i)];
  }

  void Arm(Inject what, int count) {
    ++injected_since_heal_;
    absl::Status s;
    switch (what) {
      case Inject::kDataWriteEio:
        s = env_->FailNext(Op::kWrite, count, Fault::Error(EIO).OnlyFor("data.bin"));
        break;
      case Inject::kDataWriteEnospc:
        s = env_->FailNext(Op::kWrite, count, Fault::Error(ENOSPC).OnlyFor("data.bin"));
        break;
      case Inject::kDataTornWrite:
        s = env_->FailNext(Op::kWrite, count, Fault::TornWrite(EIO).OnlyFor("data.bin"));
        break;
      case Inject::kDataSyncEio:
        s = env_->FailNext(Op::kSync, count, Fault::Error(EIO).OnlyFor("data.bin"));
        break;
      case Inject::kDataSyncLosesData:
        s = env_->FailNext(Op::kSync, count, Fault::SyncLosesData(EIO).OnlyFor("data.bin"));
        break;
      case Inject::kWalAppendIo:
        s = fs_->FailNext(FsOp::kAppend, count, FsFault::IOError().OnlyFor(FileClass::kWal));
        break;
      case Inject::kWalAppendNoSpace:
        s = fs_->FailNext(FsOp::kAppend, count, FsFault::NoSpace().OnlyFor(FileClass::kWal));
        break;
      case Inject::kWalSyncIo:
        s = fs_->FailNext(FsOp::kSync, count, FsFault::IOError().OnlyFor(FileClass::kWal));
        break;
      case Inject::kWalSyncNoSpace:
        s = fs_->FailNext(FsOp::kSync, count, FsFault::NoSpace().OnlyFor(FileClass::kWal));
        break;
      case Inject::kJournalNewFileIo:  // new WAL at a reopen, tables of flushes/compactions
        s = fs_->FailNext(FsOp::kNewWritableFile, count, FsFault::IOError());
        break;
      case Inject::kWalSyncLosesData:  // a power cut zeroes the failed sync's WAL bytes
        s = fs_->FailNext(FsOp::kSync, count,
                          FsFault::IOError().LosesData().OnlyFor(FileClass::kWal));
        break;
      case Inject::kWalZerosNoSpace:  // the zeros a WAL is written into, ahead of its records
        s = fs_->FailNext(FsOp::kWrite, count, FsFault::NoSpace().OnlyFor(FileClass::kWal));
        break;
    }
    RC_ASSERT(s.ok());
  }

  // A seeded fault rate until the next Heal or crash (TigerBeetle style): 1 call in n of the
  // operation fails, drawn from `seed`.
  enum class Rate { kDataWrite, kDataSync, kWalAppend, kWalSync, kWalSyncLosesData };
  static constexpr int kNumRate = 5;
  static const char* RateName(Rate r) {
    static const char* kNames[] = {"data write EIO", "data fdatasync EIO", "WAL append IOError",
                                   "WAL sync IOError", "WAL sync loses data"};
    return kNames[static_cast<int>(r)];
  }
  void ArmRate(Rate what, uint32_t n, uint64_t seed) {
    ++injected_since_heal_;
    absl::Status s;
    switch (what) {
      case Rate::kDataWrite:
        s = env_->FailOneIn(Op::kWrite, n, seed, Fault::Error(EIO).OnlyFor("data.bin"));
        break;
      case Rate::kDataSync:
        s = env_->FailOneIn(Op::kSync, n, seed, Fault::Error(EIO).OnlyFor("data.bin"));
        break;
      case Rate::kWalAppend:
        s = fs_->FailOneIn(FsOp::kAppend, n, seed, FsFault::IOError().OnlyFor(FileClass::kWal));
        break;
      case Rate::kWalSync:
        s = fs_->FailOneIn(FsOp::kSync, n, seed, FsFault::IOError().OnlyFor(FileClass::kWal));
        break;
      case Rate::kWalSyncLosesData:
        s = fs_->FailOneIn(FsOp::kSync, n, seed,
                           FsFault::IOError().LosesData().OnlyFor(FileClass::kWal));
        break;
    }
    RC_ASSERT(s.ok());
  }

  // Liveness: with every fault cleared, a whole umsync succeeds within a bound of 3 s. The
  // write-back thread retries failed evictions every 100 ms, and a retry that reopens the
  // journal can wait 1 s for the old instance to close: RocksDB 7.8 sleeps 1 s after a
  // background compaction error (seen: the retry landed 1.009 s after the heal, RC_PARAMS
  // reproduce of a CI failure with the former 1 s bound).
  void Heal() {
    env_->ClearAll();
    fs_->ClearAll();
    injected_since_heal_ = 0;
    absl::Status s;
    for (int i = 0; i < 120; ++i) {
      s = rt_->Sync(p_, kBlocks * g_bs);
      Attempt a;
      a.first = 0;
      a.end = kBlocks;
      a.snapshot = oracle_.mem;
      a.acked = s.ok();
      oracle_.Push(a);
      if (s.ok()) {
        if (oracle_.policy == UMAP_POLICY_RELAXED) oracle_.floor = oracle_.mem;
        RC_ASSERT(FileReaches(oracle_.mem));
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    RC_FAIL("umsync still failing 3 s after every fault was cleared: " + s.ToString());
  }

  // After an acknowledged whole umsync with no fault armed: the file holds `mem` at once, or
  // with deferred file syncs once the sink's applier has written it (within 3 s).
  bool FileReaches(const std::vector<uint64_t>& mem) const {
    for (int i = 0;; ++i) {
      const Versions f = Decode(ReadFile(data_));
      bool all = true;
      for (uint64_t b = 0; b < kBlocks; ++b) all = all && f[b] && *f[b] == mem[b];
      if (all) return true;
      if (!g_defer || i == 300) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // uunmap (a whole umsync, then the journal forgets the mapping) and umap again in the same
  // runtime: the new mapping replays whatever the journal still holds for the file first.
  void Remap() {
    Attempt a;
    a.first = 0;
    a.end = kBlocks;
    a.snapshot = oracle_.mem;
    absl::Status s = rt_->Unmap(p_, kBlocks * g_bs);
    a.acked = s.ok();
    oracle_.Push(a);
    if (!s.ok()) {
      RC_ASSERT(injected_since_heal_ > 0);
      return;  // still mapped, nothing lost
    }
    ++remaps_;
    if (oracle_.policy == UMAP_POLICY_RELAXED) oracle_.floor = oracle_.mem;
    ::close(fd_);
    fd_ = ::open(data_.c_str(), O_RDWR);
    RC_ASSERT(fd_ >= 0);
    absl::StatusOr<void*> p =
        rt_->Map(nullptr, kBlocks * g_bs, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (!p.ok()) {
      // Registering the mapping writes the journal: an injected fault may fail it. Heal.
      RC_ASSERT(injected_since_heal_ > 0);
      env_->ClearAll();
      fs_->ClearAll();
      injected_since_heal_ = 0;
      p = rt_->Map(nullptr, kBlocks * g_bs, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
      if (!p.ok()) RC_FAIL("umap again after healing: " + p.status().ToString());
    }
    p_ = static_cast<char*>(*p);
    // uunmap returned 0: the file holds everything the application wrote.
    const Versions f = Decode(ReadFile(data_));
    for (uint64_t b = 0; b < kBlocks; ++b) RC_ASSERT(f[b] && *f[b] == oracle_.mem[b]);
  }

  struct CrashSpec {
    CrashKind kind = CrashKind::kKill;
    uint64_t seed = 1;
    int in_sync = -1;  // index into kSyncPoints: crash inside a umsync of [first, end)
    uint64_t hit = 1, first = 0, end = kBlocks;
    // What goes wrong in the first recovery: nothing, a crash inside it (same kind), or an
    // I/O error on its first file write (it must report kIoError; the rerun then succeeds).
    enum class Trouble { kNone, kCrash, kIoError } recovery_trouble = Trouble::kNone;
    bool twice = false;        // run recovery a second time and compare
    bool settle = true;        // let RocksDB finish a pending compaction first (see below)
    // Before the umsync that crashes: write every writable block of its range, so that it
    // has more to commit than a chunk (g_chunk_blocks) and its journal commit is streamed.
    bool dirty_range = false;
  };

  void Crash(const CrashSpec& c) {
    ++crashes_;
    in_crash_ = true;
    if (c.settle) SettleJournal();
    if (c.in_sync >= 0) {
      // Written before the point is armed: a background thread (the applier, with deferred
      // file syncs) may hit it first, and the writes would then wait on a frozen journal.
      if (c.dirty_range) {
        for (uint64_t b = c.first; b < std::min(c.end, kHot); ++b) Write(b);
      }
      RC_ASSERT(crash_point::Arm(kSyncPoints[c.in_sync], c.hit,
                                 crash_point::Action::Call([this](absl::string_view name) {
                                   Freeze();
                                   ++sync_crashes_fired_;
                                   stream_crashes_fired_ += name == "journal.mid_stream";
                                 }))
                    .ok());
      Umsync(c.first, c.end);  // acknowledged only if it finished before the freeze
      crash_point::Disarm();
    }
    Freeze();
    // FaultFs::SimulatePowerCut waits for journal writes in flight; FaultEnv lets a file write
    // that passed its frozen check finish under the file's lock, which UnsyncedRanges takes:
    // after this, nothing written before the freeze is still landing.
    (void)env_->UnsyncedRanges(data_);
    // The "kill": destroy the runtime with both frozen and prove its destructor wrote nothing.
    const std::string data_before = ReadFile(data_);
    const auto journal_before = Snapshot(jdir_);
    rt_.reset();
    ::close(fd_);
    fd_ = -1;
    if (ReadFile(data_) != data_before) RC_FAIL("the frozen runtime's destructor wrote the file");
    if (auto diff = SnapshotDiff(journal_before, Snapshot(jdir_)); !diff.empty()) {
      RC_FAIL("the frozen runtime's destructor changed journal files: " + diff);
    }
    env_->ClearAll();
    fs_->ClearAll();
    injected_since_heal_ = 0;
    LoseUnsynced(c.kind, c.seed);

    if (c.recovery_trouble == CrashSpec::Trouble::kCrash) {
      RC_ASSERT(crash_point::Arm("recovery.mid_replay", 1,
                                 crash_point::Action::Call([this](absl::string_view) {
                                   Freeze();
                                   ++recovery_crashes_fired_;
                                 }))
                    .ok());
      absl::StatusOr<recovery::Report> r = recovery::Recover(RecoverOptions());
      crash_point::Disarm();
      (void)r;  // any outcome: it was killed (or had nothing to replay)
      Freeze();
      LoseUnsynced(c.kind, c.seed + 1);
    } else if (c.recovery_trouble == CrashSpec::Trouble::kIoError) {
      const uint64_t before = env_->fired(faultinject::FaultKind::kError);
      RC_ASSERT(env_->FailNext(Op::kWrite, 1, Fault::Error(EIO).OnlyFor("data.bin")).ok());
      absl::StatusOr<recovery::Report> r = recovery::Recover(RecoverOptions());
      RC_ASSERT(r.ok());
      if (env_->fired(faultinject::FaultKind::kError) > before) {
        // The failed replay keeps everything for the rerun.
        ++recovery_io_errors_fired_;
        RC_ASSERT(recovery::ExitCodeOf(*r) == recovery::ExitCode::kIoError);
      }
      env_->ClearAll();
    }
    absl::StatusOr<recovery::Report> r = recovery::Recover(RecoverOptions());
    if (!r.ok()) RC_FAIL("recovery failed: " + r.status().ToString());
    CheckReport(*r);
    const std::string bytes = ReadFile(data_);
    const Versions got = Decode(bytes);
    CheckRecovered(got);
    if (c.twice) {
      const JournalState j1 = ReadJournalState();
      RC_ASSERT(j1.size() >= 2u);  // at least the format and watermark records
      absl::StatusOr<recovery::Report> again = recovery::Recover(RecoverOptions());
      RC_ASSERT(again.ok());
      RC_ASSERT(recovery::ExitCodeOf(*again) == recovery::ExitCode::kOk);
      RC_ASSERT(again->mappings.empty());
      RC_ASSERT(again->pending_txns == 0u);
      RC_ASSERT(ReadFile(data_) == bytes);
      RC_ASSERT(ReadJournalState() == j1);
    }
    oracle_.Rebase(got);
    in_crash_ = false;
    Start();
  }

  // Between commands: the file never shows what the policy forbids.
  void CheckFileNow() const {
    const Versions f = Decode(ReadFile(data_));
    for (uint64_t b = 0; b < kBlocks; ++b) {
      if (!f[b]) continue;  // a torn apply (injected) heals at the retry or the recovery
      const bool ok = oracle_.policy == UMAP_POLICY_ATOMIC ? oracle_.AtomicMayShow(b, *f[b])
                      : g_defer ? oracle_.RelaxedDeferredMayShow(b, *f[b])
                                : oracle_.RelaxedAllows(b, *f[b]);
      if (!ok) {
        RC_FAIL("file block " + std::to_string(b) + " holds version " + std::to_string(*f[b]) +
                (oracle_.policy == UMAP_POLICY_ATOMIC ? ", which no umsync captured"
                                                      : ", older than its floor"));
      }
    }
  }

  // End of a sequence: heal, unmap (must succeed), destroy; the file equals what the app saw.
  void Finish() {
    Heal();
    RC_ASSERT(rt_->Unmap(p_, kBlocks * g_bs).ok());
    rt_.reset();
    const Versions f = Decode(ReadFile(data_));
    for (uint64_t b = 0; b < kBlocks; ++b) RC_ASSERT(f[b] && *f[b] == oracle_.mem[b]);
  }

 private:
  // The journal's whole logical content: every RocksDB key and value (format, watermark,
  // mappings, transaction headers and payloads, staged images), read with a read-only open
  // that writes nothing. The directory's bytes cannot be compared: every RocksDB open
  // writes a new MANIFEST, WAL and OPTIONS file.
  using JournalState = std::map<std::string, std::string>;
  JournalState ReadJournalState() {
    std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs_);
    rocksdb::Options o;
    o.env = env.get();
    rocksdb::DB* raw = nullptr;
    rocksdb::Status st = rocksdb::DB::OpenForReadOnly(o, jdir_, &raw);
    if (!st.ok()) RC_FAIL("read-only open of the journal: " + st.ToString());
    std::unique_ptr<rocksdb::DB> db(raw);
    JournalState kv;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) kv[it->key().ToString()] = it->value().ToString();
    RC_ASSERT(it->status().ok());
    return kv;
  }

  recovery::RecoverOptions RecoverOptions() const {
    recovery::RecoverOptions o;
    o.journal_dir = jdir_;
    o.env = env_.get();
    o.journal_fs = fs_;
    o.journal_env = Env::Default();
    return o;
  }

  void Start() {
    RuntimeOptions o;
    o.cache_bytes = CacheBytes();
    o.block_size = g_bs;
    o.handler_threads = 1;
    o.writeback_threads = 1;
    o.journal_dir = jdir_;
    o.policy = oracle_.policy;
    o.journal_mode = UMAP_JOURNAL_DATA;
    o.defer_file_sync = g_defer;
    if (g_chunk_blocks != 0) o.umsync_chunk_bytes = g_chunk_blocks * g_bs;
    o.env = env_.get();
    o.journal_fs = fs_;
    absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Create(o);
    RC_ASSERT(rt.ok());
    rt_ = *std::move(rt);
    fd_ = ::open(data_.c_str(), O_RDWR);
    RC_ASSERT(fd_ >= 0);
    absl::StatusOr<void*> p =
        rt_->Map(nullptr, kBlocks * g_bs, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (!p.ok()) RC_FAIL("map after restart: " + p.status().ToString());
    p_ = static_cast<char*>(*p);
  }

  // A RocksDB compaction that fails because the FileSystem froze under it sleeps 1 s before
  // its DB may close (db_impl_compaction_flush.cc: "Waiting after background compaction
  // error"), and every Journal::Open flushes the recovered WAL into a new L0 table, so one
  // starts soon after most opens. Most crashes therefore wait until the journal directory
  // holds at most one table (L0 compacted), for at most 300 ms; CrashSpec::settle = false
  // keeps crashing into running compactions in some cases.
  void SettleJournal() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    for (;;) {
      int tables = 0;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(jdir_, ec)) {
        tables += e.path().extension() == ".sst";
      }
      if (tables <= 1 || std::chrono::steady_clock::now() > deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void Freeze() {
    env_->SimulatePowerCut();
    fs_->SimulatePowerCut();
  }

  void LoseUnsynced(CrashKind kind, uint64_t seed) {
    switch (kind) {
      case CrashKind::kKill:
        break;  // the OS keeps what it was handed
      case CrashKind::kPowerDropAll:
        RC_ASSERT(env_->DropUnsyncedData(DropMode::kDropAll).ok());
        RC_ASSERT(fs_->DropUnsyncedData(FsDropOptions::DropAll()).ok());
        break;
      case CrashKind::kPowerTear:
      case CrashKind::kPowerTearGarble: {
        const bool garble = kind == CrashKind::kPowerTearGarble;
        RC_ASSERT(env_->DropUnsyncedData(DropOptions::Tear(seed, garble)).ok());
        RC_ASSERT(fs_->DropUnsyncedData(FsDropOptions::Tear(seed, garble)).ok());
        break;
      }
    }
    env_->Restart();
    fs_->Restart();
  }

  // Everything replayed; the only thing recovery may discard is the atomic policy's staged
  // (never committed) blocks, which is its exit code 1 by design (docs/recovery.md).
  void CheckReport(const recovery::Report& r) const {
    if (!r.journal_status.ok()) RC_FAIL("recovery journal error: " + r.journal_status.ToString());
    for (const recovery::MappingReport& m : r.mappings) {
      if (m.state != recovery::MappingState::kClean &&
          m.state != recovery::MappingState::kReplayed) {
        RC_FAIL("recovery left mapping " + std::to_string(m.mapping.id) + " " +
                std::string(recovery::MappingStateName(m.state)) + ": " + m.status.ToString());
      }
      RC_ASSERT(m.blocks_not_applied + m.blocks_torn + m.blocks_not_applied_or_torn == 0u);
      if (oracle_.policy == UMAP_POLICY_RELAXED) RC_ASSERT(m.staged_discarded == 0u);
      RC_ASSERT(m.unregistered);
    }
    const recovery::ExitCode code = recovery::ExitCodeOf(r);
    RC_ASSERT(code == recovery::ExitCode::kOk || code == recovery::ExitCode::kDataLoss);
  }

  void CheckRecovered(const Versions& got) const {
    for (uint64_t b = 0; b < kBlocks; ++b) {
      if (!got[b]) RC_FAIL("block " + std::to_string(b) + " torn after recovery: " + Show(got));
    }
    if (oracle_.policy == UMAP_POLICY_ATOMIC) {
      if (auto why = oracle_.AtomicMismatch(got)) RC_FAIL(*why);
    } else {
      for (uint64_t b = 0; b < kBlocks; ++b) {
        if (!oracle_.RelaxedAllows(b, *got[b])) {
          RC_FAIL("block " + std::to_string(b) + " recovered at version " +
                  std::to_string(*got[b]) + ", below its floor " +
                  std::to_string(oracle_.floor[b]) + " or never written: " + Show(got));
        }
      }
    }
  }


  std::string dir_, data_, jdir_;
  std::unique_ptr<FaultEnv> env_;
  std::shared_ptr<FaultFs> fs_;
  std::unique_ptr<Runtime> rt_;
  int fd_ = -1;
  char* p_ = nullptr;
  Oracle oracle_;
  int injected_since_heal_ = 0;
  bool in_crash_ = false;
  int crashes_ = 0, remaps_ = 0, indeterminate_total_ = 0;
  int sync_crashes_fired_ = 0, stream_crashes_fired_ = 0, recovery_crashes_fired_ = 0,
      recovery_io_errors_fired_ = 0;
};

// ---- commands --------------------------------------------------------------------------------

// The model only counts; everything nondeterministic (what a crash kept) lives in the oracle.
struct Model {};
using Cmd = rc::state::Command<Model, Sut>;

struct WriteCmd : Cmd {
  uint64_t block = Pick<uint64_t>(0, kHot);
  void run(const Model&, Sut& s) const override {
    s.Write(block);
    s.CheckFileNow();
  }
  void show(std::ostream& os) const override { os << "Write(" << block << ")"; }
};

struct ReadCmd : Cmd {
  uint64_t block = Pick<uint64_t>(0, kHot);
  void run(const Model&, Sut& s) const override { s.Read(block); }
  void show(std::ostream& os) const override { os << "Read(" << block << ")"; }
};

struct UmsyncCmd : Cmd {
  bool whole = Pick(0, 2) == 0;  // shrinks to the whole mapping
  uint64_t first = whole ? 0 : Pick<uint64_t>(0, kBlocks);
  uint64_t end = whole ? kBlocks : first + Pick<uint64_t>(1, kBlocks - first + 1);
  void run(const Model&, Sut& s) const override {
    s.Umsync(first, end);
    s.CheckFileNow();
  }
  void show(std::ostream& os) const override {
    if (whole) {
      os << "Umsync(all)";
    } else {
      os << "Umsync[" << first << ", " << end << ")";
    }
  }
};

struct EvictPressureCmd : Cmd {
  void run(const Model&, Sut& s) const override {
    s.EvictPressure();
    s.CheckFileNow();
  }
  void show(std::ostream& os) const override { os << "EvictPressure"; }
};

struct InjectCmd : Cmd {
  Sut::Inject what = static_cast<Sut::Inject>(Pick(0, Sut::kNumInject));
  int count = Pick(1, 3);
  void run(const Model&, Sut& s) const override {
    s.Arm(what, count);
    s.CheckFileNow();
  }
  void show(std::ostream& os) const override {
    os << "Inject(" << Sut::InjectName(what) << " x" << count << ")";
  }
};

struct InjectRateCmd : Cmd {
  Sut::Rate what = static_cast<Sut::Rate>(Pick(0, Sut::kNumRate));
  uint32_t n = Pick<uint32_t>(2, 8);
  uint64_t seed = Pick<uint64_t>(1, 1u << 30);
  void run(const Model&, Sut& s) const override {
    s.ArmRate(what, n, seed);
    s.CheckFileNow();
  }
  void show(std::ostream& os) const override {
    os << "InjectRate(" << Sut::RateName(what) << " 1 in " << n << ", seed " << seed << ")";
  }
};

struct HealCmd : Cmd {
  void run(const Model&, Sut& s) const override {
    s.Heal();
    s.CheckFileNow();
  }
  void show(std::ostream& os) const override { os << "Heal"; }
};

struct RemapCmd : Cmd {
  void run(const Model&, Sut& s) const override {
    s.Remap();
    s.CheckFileNow();
  }
  void show(std::ostream& os) const override { os << "Unmap+Map"; }
};

struct CrashCmd : Cmd {
  Sut::CrashSpec spec = [] {
    Sut::CrashSpec c;
    c.kind = static_cast<CrashKind>(Pick(0, 4));
    c.seed = Pick<uint64_t>(1, 1u << 30);
    // Every choice shrinks towards its simple case (0 / false).
    if (Pick(0, 2) == 1) {
      c.in_sync = Pick(0, static_cast<int>(std::size(kSyncPoints)));
      c.hit = Pick<uint64_t>(1, 3);
      c.dirty_range = Pick(0, 2) == 1;
      if (Pick(0, 2) == 1) {
        c.first = Pick<uint64_t>(0, kBlocks);
        c.end = c.first + Pick<uint64_t>(1, kBlocks - c.first + 1);
      }
    }
    switch (Pick(0, 8)) {
      case 6: c.recovery_trouble = Sut::CrashSpec::Trouble::kCrash; break;
      case 7: c.recovery_trouble = Sut::CrashSpec::Trouble::kIoError; break;
      default: break;
    }
    c.twice = Pick(0, 2) == 1;
    c.settle = Pick(0, 10) != 9;
    return c;
  }();
  void run(const Model&, Sut& s) const override { s.Crash(spec); }
  void show(std::ostream& os) const override {
    os << "Crash(" << CrashKindName(spec.kind) << ", seed " << spec.seed;
    if (spec.in_sync >= 0) {
      os << ", inside Umsync[" << spec.first << ", " << spec.end << ") at "
         << kSyncPoints[spec.in_sync] << " hit " << spec.hit;
      if (spec.dirty_range) os << ", every block of it written first";
    }
    if (spec.recovery_trouble == Sut::CrashSpec::Trouble::kCrash) os << ", again inside recovery";
    if (spec.recovery_trouble == Sut::CrashSpec::Trouble::kIoError) {
      os << ", I/O error in recovery";
    }
    if (spec.twice) os << ", recover twice";
    if (!spec.settle) os << ", into a running compaction";
    os << ")";
  }
};

// Totals over every case run (shrinking included), printed at exit: evidence that the
// interesting paths were taken, with numbers for docs/testing.md.
struct Totals {
  uint64_t cases = 0, commands = 0, crashes = 0, sync_crashes = 0, recovery_crashes = 0,
           recovery_io_errors = 0, faults_fired = 0, indeterminate = 0, remaps = 0,
           two_page_blocks = 0, deferred = 0, chunked = 0, stream_crashes = 0, wal_bytes_lost = 0, wal_bytes_zeroed = 0,
           cases_wal_zeroed = 0;
};
Totals g_totals[2];  // by policy

class PrintTotals : public ::testing::Environment {
 public:
  void TearDown() override {
    for (int p = 0; p < 2; ++p) {
      const Totals& t = g_totals[p];
      if (t.cases == 0) continue;
      std::cout << "durability property, " << (p == UMAP_POLICY_ATOMIC ? "atomic" : "relaxed")
                << ": " << t.cases << " cases (" << t.two_page_blocks << " with 8 KiB blocks, " << t.deferred
                << " with deferred file syncs, " << t.chunked << " with umsyncs in chunks), "
                << t.commands << " commands, " << t.crashes
                << " crashes (" << t.sync_crashes << " inside a umsync, of them "
                << t.stream_crashes << " between a commit's batches, " << t.recovery_crashes
                << " inside recovery), " << t.recovery_io_errors << " recovery I/O errors, "
                << t.faults_fired << " injected faults fired, " << t.indeterminate
                << " indeterminate umsyncs, " << t.remaps << " remaps, " << t.wal_bytes_lost
                << " WAL bytes lost by failed syncs (" << t.wal_bytes_zeroed
                << " zeroed by a power cut, in " << t.cases_wal_zeroed << " cases)\n";
    }
  }
};
const bool kPrintTotals = [] {
  ::testing::AddGlobalTestEnvironment(new PrintTotals);
  return true;
}();

void RunProperty(umap_policy policy) {
  g_bs = Pick(0, 2) == 0 ? 4096 : 8192;  // shrinks to one page per block
  g_defer = Pick(0, 2) == 1;               // shrinks to the file synced at every umsync
  g_chunk_blocks = Pick(0, 3) != 0 ? Pick<uint64_t>(1, 4) : 0;  // shrinks to no chunks
  Sut sut(policy);
  // 1 to 11..31 commands a case: rapidcheck draws the count uniformly in [1, size + 1], and
  // its size (0..100 over the run) is mapped to 10..30 here.
  const auto commands = *rc::gen::withSize([](int size) {
    return rc::gen::resize(
        10 + size / 5,
        rc::state::gen::commands(
            Model{}, rc::state::gen::execOneOfWithArgs<
                         WriteCmd, WriteCmd, WriteCmd, WriteCmd, ReadCmd, ReadCmd, UmsyncCmd,
                         UmsyncCmd, UmsyncCmd, EvictPressureCmd, EvictPressureCmd, InjectCmd,
                         InjectCmd, InjectCmd, InjectRateCmd, HealCmd, RemapCmd, CrashCmd,
                         CrashCmd>()));
  });
  Totals& t = g_totals[policy];
  ++t.cases;
  t.two_page_blocks += g_bs > 4096;
  t.deferred += g_defer;
  t.chunked += g_chunk_blocks != 0;
  t.commands += commands.size();
  // A failure is printed where it happens too: rapidcheck reports the description of its
  // last run of the counterexample, which a rare timing-dependent failure may not repeat.
  try {
    rc::state::runAll(commands, Model{}, sut);
    const size_t indeterminate = sut.oracle().indeterminate();
    sut.Finish();
    RC_CLASSIFY(indeterminate > 0, "indeterminate at end");
  } catch (const rc::detail::CaseResult& r) {
    if (r.type == rc::detail::CaseResult::Type::Failure) {
      std::cerr << "durability property: case failed: " << r.description << std::endl;
    }
    throw;
  }
  t.crashes += sut.crashes();
  t.sync_crashes += sut.sync_crashes_fired();
  t.stream_crashes += sut.stream_crashes_fired();
  t.recovery_crashes += sut.recovery_crashes_fired();
  t.recovery_io_errors += sut.recovery_io_errors_fired();
  t.faults_fired += sut.faults_fired();
  t.indeterminate += sut.indeterminate_total();
  t.remaps += sut.remaps();
  t.wal_bytes_lost += sut.wal_bytes_lost();
  t.wal_bytes_zeroed += sut.wal_bytes_zeroed();
  t.cases_wal_zeroed += sut.wal_bytes_zeroed() > 0;
  RC_CLASSIFY(sut.crashes() > 0, "crashed");
  RC_CLASSIFY(sut.faults_fired() > 0, "fault fired");

}

RC_GTEST_PROP(DurabilityProperty, AtomicPolicyKeepsCommittedStateOnly, ()) {
  RunProperty(UMAP_POLICY_ATOMIC);
}

RC_GTEST_PROP(DurabilityProperty, RelaxedPolicyNeverLosesOrTearsSyncedBlocks, ()) {
  RunProperty(UMAP_POLICY_RELAXED);
}

}  // namespace
}  // namespace umap::runtime
