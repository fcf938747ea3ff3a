// umap-chaos-worker: the process umap-chaos kills. It maps one file through the public API
// (umap_ex / umsync / uunmap), writes versioned blocks round after round (chaos/workload.h)
// and tells the driver over a pipe, before and after each umsync, what it is doing. The
// driver keeps the oracle; nothing here is trusted after a crash.
//
// Pipe lines (each one write() of less than PIPE_BUF bytes, so lines never interleave):
//   R <pid>                 mapped, about to start
//   V <v0>,<v1>,...         (--report-base) the version of every block as read through the
//                           new mapping, -1 for a torn or foreign block, -2 for all zeros
//   B <round>               round's writes done, umsync starting (in flight from now on)
//   A <round>               umsync returned 0 (acknowledged)
//   E <round> <errno>       umsync returned -1 (indeterminate)
//   T <round> <ms>          a stall of <ms> was armed for the next data-file sync
//   U <rc> <errno>          uunmap result after the last round
//   M <round> <rss> <cache> after each umsync: VmRSS of this process (KiB) and the runtime's
//                           resident cache bytes (umap_stats.cache_bytes_used)
//   F <data> <journal>      injected failures fired so far (FaultEnv, FaultFs); after each
//                           failed umsync, before dying and after the last round
//   H <round>               (--heal-ms, --heal-round) the journal's fault rules ended
//                           during this round
//   Z <bytes>               (--die-journal-power-cut) the journal's power was cut; bytes of
//                           failed syncs that lost them (FsFault::LosesData) it zeroed
// Exit codes: 0 all rounds done and unmapped; 2 set-up failed (message on stderr); 4 uunmap
// failed; 5 umap_ex failed with EIO (the replay of pending records at map time failed; an
// ENOSPC refusal is retried for 20 s first). SIGKILL (driver or crash point) and SIGABRT
// (RocksDB 7.8.3 assertion) are crashes.
//
// Fault injection (eio, torn, timeout on the data file; eio, enospc on the journal's
// storage; power cuts of either): the runtime is built through the internal C++ API
// (runtime::Runtime::Create with RuntimeOptions::env = a FaultEnv over Env::Default()),
// because umap_config has no Env field; c_api::TEST_AdoptRuntime then hands it to the C API,
// so umsync() and uunmap() below are the public calls all the same.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "chaos/worker_env.h"
#include "chaos/workload.h"
#include "umap/umap.h"

namespace {

int g_report_fd = 3;
std::atomic<uint64_t> g_current_round{0};  // read by the --heal-ms thread

void Report(const std::string& line) {
  std::string l = line + "\n";
  // A dead driver (EPIPE) must not hide the crash we are here for: ignore write errors.
  ssize_t n = ::write(g_report_fd, l.data(), l.size());
  (void)n;
}

// VmRSS of this process in KiB (0 if /proc is unreadable).
uint64_t RssKib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      uint64_t kib = 0;
      (void)absl::SimpleAtoi(
          absl::StripAsciiWhitespace(absl::StripSuffix(absl::string_view(line).substr(6), "kB")),
          &kib);
      return kib;
    }
  }
  return 0;
}

void ReportFired() {
  Report(
      absl::StrCat("F ", chaos_worker::DataFaultsFired(), " ", chaos_worker::JournalFaultsFired()));
}

// The command line (umap-chaos builds it: chaos/harness.cc and chaos/faults/).
struct Flags {
  std::string file, journal, policy = "atomic", fault = "none";
  uint64_t seed = 1, tag = 1, first_round = 1, rounds = 40, blocks = 64, cache_blocks = 16;
  uint64_t fault_seed = 1, fault_one_in = 20, stall_round = 0, stall_ms = 0, die_round = 0;
  bool die_power_cut = false, report_base = false;
  std::string journal_fault = "none";
  uint64_t journal_one_in = 20, heal_ms = 0, heal_round = 0;
  bool journal_sticky = false, die_journal_power_cut = false, journal_garble = false;
  bool journal_at_open = false, die_on_error = false, journal_wal_only = false;
  bool die_in_stall = false;
  bool defer_file_sync = false;
  uint64_t umsync_chunk_blocks = 0;
};

void AddFlags(CLI::App& app, Flags* f) {
  app.add_option("--file", f->file)->required();
  app.add_option("--journal", f->journal)->required();
  app.add_option("--policy", f->policy)->check(CLI::IsMember({"atomic", "relaxed"}));
  app.add_flag("--defer-file-sync", f->defer_file_sync,
               "umsync leaves the file's fdatasync to a later one (RuntimeOptions::defer_file_sync)");
  app.add_option("--umsync-chunk-blocks", f->umsync_chunk_blocks,
                 "umsyncs capture this many blocks at a time, and the journal writes larger "
                 "transactions in batches (RuntimeOptions::umsync_chunk_bytes; 0: default)");
  app.add_option("--seed", f->seed, "workload seed (RoundBlocks)");
  app.add_option("--tag", f->tag, "file tag written into every block");
  app.add_option("--first-round", f->first_round);
  app.add_option("--rounds", f->rounds);
  app.add_option("--blocks", f->blocks);
  app.add_option("--cache-blocks", f->cache_blocks);
  app.add_option("--report-fd", g_report_fd);
  app.add_option("--fault", f->fault)->check(CLI::IsMember({"none", "eio", "torn", "timeout"}));
  app.add_option("--fault-seed", f->fault_seed);
  app.add_option("--fault-one-in", f->fault_one_in);
  app.add_option("--stall-round", f->stall_round, "timeout: arm the stall after this round");
  app.add_option("--stall-ms", f->stall_ms);
  app.add_flag("--die-in-stall", f->die_in_stall,
               "timeout: die while the armed stall holds a data-file sync (with "
               "--die-power-cut: after a power cut of the data file)");
  app.add_option("--die-round", f->die_round, "after this round's umsync, die (0: never)");
  app.add_flag("--die-on-error", f->die_on_error,
               "die after the first failed umsync from --die-round on (at the latest 30 "
               "rounds later): the power cut then meets the failed call's unsynced bytes");
  app.add_flag("--die-power-cut", f->die_power_cut,
               "dying: drop the data file's unsynced writes (torn at sectors) first");
  app.add_option("--journal-fault", f->journal_fault, "fault of the journal's storage (FaultFs)")
      ->check(CLI::IsMember({"none", "eio", "enospc"}));
  app.add_option("--journal-fault-one-in", f->journal_one_in);
  app.add_flag("--journal-fault-at-open", f->journal_at_open,
               "arm the journal fault before the journal opens (default: once mapped)");
  app.add_flag("--journal-sticky", f->journal_sticky,
               "enospc: once fired, every later journal write fails until healed");
  app.add_option("--heal-ms", f->heal_ms,
                 "end the journal's fault rules this long after mapping (0: never)");
  app.add_option("--heal-round", f->heal_round,
                 "end the journal's fault rules after this round's umsync, from the rounds "
                 "themselves (0: never; replayable runs)");
  app.add_flag("--journal-fault-wal-only", f->journal_wal_only,
               "journal faults hit the WAL only, not RocksDB's background tables");
  app.add_flag("--die-journal-power-cut", f->die_journal_power_cut,
               "dying: drop the journal's unsynced bytes (torn at sectors) first");
  app.add_flag("--journal-garble", f->journal_garble,
               "with --die-journal-power-cut: the sector after each cut holds random bytes");
  app.add_flag("--report-base", f->report_base,
               "before writing, read every block through the mapping and report its version");
}

// Always wrapped in a FaultEnv, so every fault class runs the same code path; with no rule
// armed it only forwards (and tracks unsynced ranges for --die-power-cut).
umap_runtime* CreateRuntime(const Flags& f, std::string* error) {
  chaos_worker::RuntimeSpec spec;
  spec.journal_dir = f.journal;
  spec.relaxed = f.policy == "relaxed";
  spec.defer_file_sync = f.defer_file_sync;
  spec.umsync_chunk_bytes = f.umsync_chunk_blocks * chaos::kBlockSize;
  spec.cache_bytes = f.cache_blocks * chaos::kBlockSize;
  spec.block_size = chaos::kBlockSize;
  spec.fault = f.fault;
  spec.fault_seed = f.fault_seed;
  spec.fault_one_in = f.fault_one_in;
  spec.file_name = f.file.substr(f.file.rfind('/') + 1);
  spec.journal_fault = f.journal_fault;
  spec.journal_one_in = f.journal_one_in;
  spec.journal_sticky = f.journal_sticky;
  spec.journal_fault_at_open = f.journal_at_open;
  spec.journal_wal_only = f.journal_wal_only;
  return chaos_worker::CreateRuntime(spec, error);
}

// Ends the journal's fault rules heal_ms from now, from a thread of its own: the main
// thread may be held inside a page fault (or a umap_ex) by the very fault that is to end
// (a cache block whose spill to the full journal keeps failing).
void HealJournalLater(uint64_t heal_ms) {
  std::thread([heal_ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(heal_ms));
    chaos_worker::HealJournal();
    ReportFired();
    Report(absl::StrCat("H ", g_current_round.load()));
  }).detach();
}

// umap_ex of the whole file. A full journal or data disk refuses the mapping (the journal's
// open or the map-time replay cannot write): retry as an application would, until the space
// comes back (the heal, or the driver deleting its filler), for 20 s after the heal at most.
char* MapFile(umap_runtime* r, int fd, size_t size, uint64_t heal_ms) {
  char* p =
      static_cast<char*>(umap_ex(r, nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  for (int i = 0; p == MAP_FAILED && errno == ENOSPC && i < static_cast<int>(heal_ms / 20) + 1000;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    p = static_cast<char*>(umap_ex(r, nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  }
  return p;
}

// "V": what the file holds once umap_ex has replayed the journal's pending records of an
// earlier, crashed run; the driver checks it against that run's oracle.
void ReportBase(const char* p, const Flags& f) {
  std::string line = "V ";
  for (uint64_t b = 0; b < f.blocks; ++b) {
    chaos::Decoded d = chaos::DecodeBlock(
        f.tag, b, absl::MakeConstSpan(p + b * chaos::kBlockSize, chaos::kBlockSize));
    absl::StrAppend(&line, b ? "," : "",
                    d.kind == chaos::Decoded::Kind::kVersion ? static_cast<int64_t>(d.version)
                    : d.kind == chaos::Decoded::Kind::kZero  ? -2
                                                             : -1);
  }
  Report(line);
}

// Dies as --die-round asks: power cuts first, then SIGKILL.
[[noreturn]] void Die(const Flags& f) {
  ReportFired();
  if (f.die_power_cut) {
    // The DFS node loses what was never fdatasync'ed.
    chaos_worker::PowerCutDataFile(f.fault_seed);
  }
  if (f.die_journal_power_cut) {
    // The node of the journal loses its unsynced bytes too (alone: the DFS survives).
    chaos_worker::PowerCutJournal(f.fault_seed, f.journal_garble);
    Report(absl::StrCat("Z ", chaos_worker::JournalBytesZeroed()));
  }
  std::raise(SIGKILL);
  std::abort();  // not reached: SIGKILL cannot be caught
}

// The rounds: write each round's blocks, umsync, report. Returns 0, or 2 when arming the
// stall failed; dies (Die) where the flags ask.
int RunRounds(umap_runtime* r, char* p, size_t size, const Flags& f) {
  const uint64_t last = f.first_round + f.rounds - 1;
  umap_stats stats{};
  std::string error;
  for (uint64_t round = f.first_round; round <= last; ++round) {
    g_current_round.store(round);
    for (uint64_t b : chaos::RoundBlocks(f.seed, round, f.blocks)) {
      chaos::FillBlock(f.tag, b, round,
                       absl::MakeSpan(p + b * chaos::kBlockSize, chaos::kBlockSize));
    }
    Report(absl::StrCat("B ", round));
    bool failed = false;
    if (umsync(p, size, MS_SYNC) == 0) {
      Report(absl::StrCat("A ", round));
    } else {
      failed = true;
      const int err = errno;
      Report(absl::StrCat("E ", round, " ", err));
      ReportFired();
      // Back off a little: the journal reopens, space may come back, the DFS may return.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (f.heal_round > 0 && round == f.heal_round) {
      chaos_worker::HealJournal();
      ReportFired();
      Report(absl::StrCat("H ", round));
    }
    const uint64_t cache = umap_get_stats(r, &stats) == 0 ? stats.cache_bytes_used : 0;
    Report(absl::StrCat("M ", round, " ", RssKib(), " ", cache));
    if (f.fault == "timeout" && round == f.stall_round) {
      // A DFS that stops answering: the next data-file sync blocks, then fails or proceeds.
      if (!chaos_worker::ArmSyncStall(f.stall_ms, (f.fault_seed & 1) != 0, &error)) {
        std::fprintf(stderr, "umap-chaos-worker: arming stall: %s\n", error.c_str());
        return 2;
      }
      Report(absl::StrCat("T ", round, " ", f.stall_ms));
      if (f.die_in_stall) {
        ReportFired();
        chaos_worker::DieInStall(f.fault_seed, f.die_power_cut);
      }
    }
    const bool die = f.die_on_error ? f.die_round > 0 && round >= f.die_round &&
                                          (failed || round == f.die_round + 30)
                                    : round == f.die_round;
    if (die) Die(f);
  }
  return 0;
}

// uunmap writes back like umsync; with injected faults it may fail and leave the mapping in
// place (nothing lost). Retry as an application would. Returns 0 or 4.
int Unmap(umap_runtime* r, char* p, size_t size) {
  int rc = -1, err = 0;
  for (int attempt = 0; attempt < 50 && rc != 0; ++attempt) {
    rc = uunmap(p, size);
    err = rc == 0 ? 0 : errno;
    if (rc != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Report(absl::StrCat("U ", rc, " ", err));
  ReportFired();
  if (rc != 0) return 4;
  if (umap_runtime_destroy(r) != 0) return 4;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"umap-chaos-worker: writes versioned blocks through umap for umap-chaos"};
  Flags f;
  AddFlags(app, &f);
  CLI11_PARSE(app, argc, argv);
  std::signal(SIGPIPE, SIG_IGN);

  int fd = ::open(f.file.c_str(), O_RDWR);
  if (fd < 0) {
    std::fprintf(stderr, "umap-chaos-worker: open %s: %s\n", f.file.c_str(), std::strerror(errno));
    return 2;
  }
  std::string error;
  umap_runtime* r = CreateRuntime(f, &error);
  if (r == nullptr) {
    std::fprintf(stderr, "umap-chaos-worker: %s\n", error.c_str());
    return 2;
  }
  const size_t size = f.blocks * chaos::kBlockSize;
  g_current_round.store(f.first_round);
  if (f.heal_ms > 0) HealJournalLater(f.heal_ms);
  char* p = MapFile(r, fd, size, f.heal_ms);
  if (p == MAP_FAILED) {
    const int err = errno;
    std::fprintf(stderr, "umap-chaos-worker: umap %s: %s\n", f.file.c_str(), std::strerror(err));
    // EIO: replaying an earlier run's journal records at map time hit an (injected) I/O
    // error; umap refuses the mapping and the records stay for umap-recover.
    return err == EIO ? 5 : 2;
  }
  if (!f.journal_at_open && !chaos_worker::ArmJournalFaults(&error)) {
    std::fprintf(stderr, "umap-chaos-worker: %s\n", error.c_str());
    return 2;
  }
  Report(absl::StrCat("R ", ::getpid()));
  if (f.report_base) ReportBase(p, f);
  if (int rc = RunRounds(r, p, size, f); rc != 0) return rc;
  if (int rc = Unmap(r, p, size); rc != 0) return rc;
  ::close(fd);
  return 0;
}
