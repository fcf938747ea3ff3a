// umap-recover-bench: recovery throughput against the disk's own sequential write rate.
// It builds a backlog of committed, never applied data-mode transactions (as a process
// killed right after its commits leaves) once; each repeat restores it (the journal from a
// copy, the file rewritten in place), replays it with recovery::Recover (in process, or the
// real umap-recover in a child process, whose peak RSS it then reports), checks every
// block, and then writes the same bytes over the same file the way fio's sequential
// O_DIRECT write job does (the reference). Rates are compared within a repeat; the summary
// gives medians. Usage and measured numbers: docs/recovery.md §8.
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "journal/journal.h"
#include "recovery/recovery.h"
#include "tools/bench_backlog.h"
#include "tools/direct_write_reference.h"
#include "tools/render.h"
#include "umap/env.h"

extern char** environ;

namespace umap::tools {
namespace {

struct Config {
  std::string dir, journal_parent;
  uint64_t size_mib = 1024, txn_kib = 256, block_size = 4096, checkpoint_mib = 256;
  int repeat = 1;
  bool one_transaction = false, child = false, cold = false, keep = false;
  bool verify_after = false, reference = true, build_only = false;
};

struct Replay {
  uint64_t us = 0;          // wall time of the whole recovery
  uint64_t written = 0;     // image bytes written
  recovery::Report::Timings timings;
  long max_rss_kib = 0;     // child mode: umap-recover's peak resident set
  bool ok = false;
};

struct Result {
  double replay_mibps = 0, reference_mibps = 0, replay_s = 0;
  long max_rss_kib = 0;
};

double Secs(uint64_t us) { return us / 1e6; }
double MiBps(uint64_t bytes, uint64_t us) { return us == 0 ? 0 : (bytes / 1048576.0) / Secs(us); }

// The timing fields of umap-recover's --json report.
bool ParseField(const std::string& json, absl::string_view key, uint64_t* v) {
  const std::string k = absl::StrCat("\"", key, "\":");
  size_t at = json.find(k);
  if (at == std::string::npos) return false;
  at += k.size();
  size_t end = at;
  while (end < json.size() && json[end] >= '0' && json[end] <= '9') ++end;
  return absl::SimpleAtoi(json.substr(at, end - at), v);
}

// The real umap-recover, next to this binary, as a child: its report and peak RSS.
Replay ReplayInChild(const Config& c, const std::string& journal_dir) {
  Replay r;
  std::string self(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size());
  if (n <= 0) return r;
  self.resize(n);
  const std::string bin = std::filesystem::path(self).parent_path() / "umap-recover";
  const std::string checkpoint = std::to_string(c.checkpoint_mib);
  std::vector<std::string> args = {bin,      "--journal",   journal_dir, "--json",
                                   "--progress", "never", "--checkpoint-mib", checkpoint};
  if (c.verify_after) args.push_back("--verify-after");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  if (::pipe(out) != 0) return r;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  Env* env = Env::Default();
  const uint64_t t0 = env->NowMicros();
  pid_t pid;
  const int rc = posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    std::fprintf(stderr, "spawn %s: %s\n", bin.c_str(), std::strerror(rc));
    return r;
  }
  std::string json;
  char buf[65536];
  for (ssize_t got; (got = ::read(out[0], buf, sizeof(buf))) > 0;) json.append(buf, got);
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.us = env->NowMicros() - t0;
  // Not ru.ru_maxrss: a spawned child inherits into it the peak of this process's memory
  // at the exec (the backlog this benchmark just wrote). umap-recover reports its own.
  uint64_t peak_rss = 0;
  ParseField(json, "peak_rss_bytes", &peak_rss);
  r.max_rss_kib = static_cast<long>(peak_rss >> 10);
  uint64_t exit_code = 1;
  recovery::Report::Timings& t = r.timings;
  r.ok = WIFEXITED(status) && ParseField(json, "exit_code", &exit_code) && exit_code == 0 &&
         ParseField(json, "open", &t.open) && ParseField(json, "scan", &t.scan) &&
         ParseField(json, "read", &t.read) && ParseField(json, "write", &t.write) &&
         ParseField(json, "sync", &t.sync) && ParseField(json, "mark", &t.mark) &&
         ParseField(json, "close", &t.close);
  if (!r.ok) std::fprintf(stderr, "umap-recover failed:\n%s\n", json.c_str());
  return r;
}

Replay ReplayInProcess(const Config& c, const std::string& journal_dir) {
  Replay r;
  recovery::RecoverOptions o;
  o.journal_dir = journal_dir;
  o.checkpoint_bytes = c.checkpoint_mib << 20;
  o.verify_after_replay = c.verify_after;
  Env* env = Env::Default();
  const uint64_t t0 = env->NowMicros();
  absl::StatusOr<recovery::Report> report = recovery::Recover(o);
  r.us = env->NowMicros() - t0;
  if (!report.ok()) {
    std::fprintf(stderr, "recover: %s\n", report.status().ToString().c_str());
    return r;
  }
  r.timings = report->timings;
  r.ok = recovery::ExitCodeOf(*report) == recovery::ExitCode::kOk;
  for (const auto& m : report->mappings) r.written += m.bytes_written;
  return r;
}

// Restores the backlog for a repeat after the first: the journal from the copy taken after
// it was built, and the file rewritten in place at its initial content (same inode, so the
// journal's identity check passes).
bool Restore(const BacklogSpec& spec, const std::string& pristine) {
  std::error_code ec;
  std::filesystem::remove_all(spec.journal_dir, ec);
  std::filesystem::copy(pristine, spec.journal_dir, std::filesystem::copy_options::recursive, ec);
  if (ec) {
    std::fprintf(stderr, "restore %s: %s\n", spec.journal_dir.c_str(), ec.message().c_str());
    return false;
  }
  return MakeFile(spec);
}

bool RunOnce(const Config& c, const BacklogSpec& spec, int repeat, Result* result) {
  bool ok = !c.cold || EvictFromPageCache({spec.file, spec.journal_dir});
  Replay r;
  if (ok) r = c.child ? ReplayInChild(c, spec.journal_dir) : ReplayInProcess(c, spec.journal_dir);
  ok = ok && r.ok && CheckFile(spec);
  if (!ok) return false;
  result->replay_s = Secs(r.us);
  result->replay_mibps = MiBps(spec.size, r.us);
  result->max_rss_kib = r.max_rss_kib;
  const recovery::Report::Timings& t = r.timings;
  std::printf("run %d:  replay of %s in %.2f s: %.0f MiB/s (open %.2f, scan %.2f, read %.2f, "
              "write %.2f, fdatasync %.2f, mark %.2f, close %.2f s)%s\n",
              repeat, HumanBytes(spec.size).c_str(), Secs(r.us), result->replay_mibps,
              Secs(t.open), Secs(t.scan), Secs(t.read), Secs(t.write), Secs(t.sync),
              Secs(t.mark), Secs(t.close),
              c.child ? absl::StrCat("; umap-recover peak RSS ", r.max_rss_kib / 1024, " MiB")
                            .c_str()
                      : "");
  if (!c.reference) return true;
  absl::StatusOr<uint64_t> us = DirectWriteReference(spec.file, spec.size);
  if (!us.ok()) {
    std::fprintf(stderr, "reference: %s\n", us.status().ToString().c_str());
    return false;
  }
  result->reference_mibps = MiBps(spec.size, *us);
  std::printf("run %d:  reference O_DIRECT sequential write of the same bytes: %.2f s, "
              "%.0f MiB/s; replay/reference %.0f%%\n",
              repeat, Secs(*us), result->reference_mibps,
              100 * result->replay_mibps / result->reference_mibps);
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void PrintSummary(const Config& c, const std::vector<Result>& results) {
  std::vector<double> replay, reference, ratio, secs, rss;
  for (const Result& r : results) {
    replay.push_back(r.replay_mibps);
    secs.push_back(r.replay_s);
    rss.push_back(r.max_rss_kib / 1024.0);
    if (r.reference_mibps > 0) {
      reference.push_back(r.reference_mibps);
      ratio.push_back(100 * r.replay_mibps / r.reference_mibps);
    }
  }
  std::printf("median of %zu: replay %.2f s, %.0f MiB/s", results.size(), Median(secs),
              Median(replay));
  if (!reference.empty()) {
    std::printf("; reference %.0f MiB/s; replay/reference %.0f%%", Median(reference),
                Median(ratio));
  }
  if (c.child) std::printf("; umap-recover peak RSS %.0f MiB", Median(rss));
  std::printf("\n");
}

int Main(int argc, char** argv) {
  CLI::App app{"umap-recover-bench: time to replay a committed journal backlog, against a "
               "sequential O_DIRECT write of the same bytes",
               "umap-recover-bench"};
  Config c;
  bool no_reference = false;
  app.add_option("--dir", c.dir, "Where to create the file (default $TMPDIR or /var/tmp): put "
                                 "it on the disk or DFS to measure");
  app.add_option("--journal-dir", c.journal_parent,
                 "Where to create the journal (default: --dir; a journal must be on a local "
                 "disk, so give one when --dir is a DFS mount)");
  app.add_option("--size-mib", c.size_mib, "Backlog size (= file size) in MiB")
      ->capture_default_str();
  app.add_option("--txn-kib", c.txn_kib, "Bytes per transaction in KiB")->capture_default_str();
  app.add_flag("--one-transaction", c.one_transaction,
               "The whole backlog is one atomic transaction (its records written in chunks)");
  app.add_option("--block-size", c.block_size, "Block size in bytes")->capture_default_str();
  app.add_option("--checkpoint-mib", c.checkpoint_mib, "Recovery checkpoint interval")
      ->capture_default_str();
  app.add_option("--repeat", c.repeat, "Repeats; the summary gives medians")
      ->capture_default_str();
  app.add_flag("--child", c.child,
               "Replay with the umap-recover next to this binary, in a child process, and "
               "report its peak RSS");
  app.add_flag("--cold", c.cold,
               "Evict the journal's and the file's pages from the page cache before the "
               "replay (posix_fadvise DONTNEED of these files only)");
  app.add_flag("--no-reference", no_reference, "Skip the reference write");
  app.add_flag("--verify-after", c.verify_after, "Recovery reads every written block back");
  app.add_flag("--keep", c.keep, "Keep the directories");
  app.add_flag("--build-only", c.build_only,
               "Build the file and the backlog, print where, and stop (to replay by hand)");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  c.reference = !no_reference;
  if (c.dir.empty()) {
    const char* t = std::getenv("TMPDIR");
    c.dir = t != nullptr ? t : "/var/tmp";
  }
  if (c.journal_parent.empty()) c.journal_parent = c.dir;
  std::string tmpl = c.dir + "/umap-recover-bench-XXXXXX";
  std::string jtmpl = c.journal_parent + "/umap-recover-bench-journal-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr || ::mkdtemp(jtmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  BacklogSpec spec;
  spec.file = tmpl + "/data";
  spec.journal_dir = jtmpl + "/journal";
  spec.size = c.size_mib << 20;
  spec.block_size = c.block_size;
  spec.txn_bytes = c.one_transaction ? spec.size : c.txn_kib << 10;
  const std::string pristine = jtmpl + "/pristine";
  // The backlog is built once (commits with sync=true are slow) and restored for each
  // repeat from a copy of the journal.
  bool ok = MakeFile(spec) && (c.one_transaction ? BuildOneTransaction(spec) : BuildBacklog(spec));
  if (ok && c.build_only) {
    std::printf("built: file %s, journal %s (replay: umap-recover --journal %s)\n",
                spec.file.c_str(), spec.journal_dir.c_str(), spec.journal_dir.c_str());
    return 0;
  }
  if (ok && c.repeat > 1) {
    std::error_code ec;
    std::filesystem::copy(spec.journal_dir, pristine, std::filesystem::copy_options::recursive,
                          ec);
    ok = !ec;
  }
  std::vector<Result> results;
  for (int i = 1; ok && i <= c.repeat; ++i) {
    Result r;
    ok = (i == 1 || Restore(spec, pristine)) && RunOnce(c, spec, i, &r);
    results.push_back(r);
  }
  if (ok) PrintSummary(c, results);
  if (!c.keep) {
    std::filesystem::remove_all(tmpl);
    std::filesystem::remove_all(jtmpl);
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace umap::tools

int main(int argc, char** argv) { return umap::tools::Main(argc, argv); }
