// umap-recover: replays, verifies or summarises a Umap write-ahead journal at job restart.
// A thin main() over recovery/recovery.h; every option and exit code is described in
// docs/umap-recover.1.md and docs/operations.md.
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "journal/format.h"
#include "recovery/recovery.h"
#include "tools/progress.h"
#include "tools/render.h"
#include "umap/env.h"

namespace umap::tools {
namespace {

constexpr char kFooter[] = R"(Exit codes:
  0  nothing to do, or every committed transaction replayed (verify: all blocks equal)
  1  replayed, but data was discarded or cannot be repaired (listed); verify: blocks differ
  2  refused, nothing written to the refused files: journal held by a live process, file
     identity or size mismatch, missing or read-only file, journal from a newer format,
     corrupt or damaged journal (--salvage keeps what can be read); also usage errors
  3  I/O error during replay: the journal keeps every unapplied transaction; safe to rerun
See umap-recover(1) (docs/umap-recover.1.md) and docs/operations.md.)";

// What the command line says, before it becomes RecoverOptions.
struct Args {
  std::string journal_dir;
  bool dry_run = false, json = false, accept_size = false, verify_after = false;
  bool missing_ok = false, quiet = false, salvage = false;
  int64_t owner = -1;
  std::vector<std::string> force_paths;
  std::string only, progress = "auto";
  uint64_t checkpoint_mib = 256;
  uint64_t buffer_mib = recovery::RecoverOptions{}.buffer_bytes >> 20;
  uint64_t io_max_kib = recovery::RecoverOptions{}.io_max_bytes >> 10;
  uint64_t io_timeout_ms = recovery::RecoverOptions{}.io_timeout_ms;
  unsigned io_depth = recovery::RecoverOptions{}.io_depth;
  size_t parallel_files = recovery::RecoverOptions{}.parallel_files;
  size_t read_threads = recovery::RecoverOptions{}.read_threads;
};

// The options that choose what is replayed and how it is checked.
void AddWhatOptions(CLI::App& app, Args& a) {
  app.add_option("-j,--journal", a.journal_dir, "The journal directory (umap_config.journal_dir)")
      ->required()
      ->type_name("DIR");
  app.add_flag("-n,--dry-run", a.dry_run,
               "Check everything and report what replay would do; write nothing");
  app.add_flag("--json", a.json, "Print the report as one JSON document on stdout");
  app.add_option("--force-path", a.force_paths,
                 "OLD=NEW: the file journaled at OLD (or below directory OLD) is now at NEW; "
                 "skips the device/inode check (size still checked). Repeatable")
      ->type_name("OLD=NEW");
  app.add_flag("--accept-size", a.accept_size,
               "Replay even if the file's size differs from the journaled size");
  app.add_option("--only", a.only, "Only the mappings of this file (journaled path)")
      ->type_name("PATH");
  app.add_flag("--verify-after", a.verify_after,
               "After replay and fdatasync, read every written block back and check its CRC");
  app.add_flag("--missing-ok", a.missing_ok,
               "A missing journal directory is 'nothing to do' (exit 0), not a refusal");
  app.add_flag("-q,--quiet", a.quiet, "Print nothing when the exit code is 0");
  app.add_option("--owner", a.owner,
                 "Root only: the journal belongs to user UID, and root may replay it (its "
                 "records decide which files are written). Without it a journal of another "
                 "user is refused")
      ->type_name("UID")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--salvage", a.salvage,
               "The journal is damaged (a refusal said so): keep every record that can still "
               "be read, before and after the damage; commits in the unreadable bytes are "
               "lost. With status, verify or --dry-run: show what it would replay, write "
               "nothing");
}

// The options that say how fast and with how much memory.
void AddHowOptions(CLI::App& app, Args& a) {
  app.add_option("--checkpoint-mib", a.checkpoint_mib,
                 "Sync and mark applied every N MiB replayed (0: only at the end)")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--parallel-files", a.parallel_files, "Files replayed at the same time")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--read-threads", a.read_threads,
                 "Threads reading (copying, checking) the images of each file")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--buffer-mib", a.buffer_mib,
                 "Memory for images on their way to the files, all files together")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--io-depth", a.io_depth, "Writes in flight per file (io_uring)")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--io-max-kib", a.io_max_kib, "Largest write: adjacent blocks merge up to this")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--io-timeout-ms", a.io_timeout_ms,
                 "Deadline of each write; a write past it fails the file's replay (exit 3)")
      ->type_name("MS")
      ->capture_default_str();
  app.add_option("--progress", a.progress,
                 "auto (bar on a terminal, lines otherwise), bar, lines, json (one object a "
                 "line with rate and ETA), never")
      ->check(CLI::IsMember({"auto", "bar", "lines", "json", "never"}))
      ->capture_default_str();
}

// RecoverOptions from the arguments; a refusal (exit 2) is printed here and returned false.
bool ToRecoverOptions(const Args& a, Command cmd, recovery::RecoverOptions* o) {
  o->journal_dir = a.journal_dir;
  o->allow_missing_journal = a.missing_ok;
  o->mode = cmd == Command::kReplay   ? recovery::Mode::kReplay
            : cmd == Command::kVerify ? recovery::Mode::kVerify
                                      : recovery::Mode::kDryRun;
  o->accept_size_change = a.accept_size;
  o->salvage = a.salvage;
  if (a.owner >= 0) {
    if (::geteuid() != 0 && static_cast<uid_t>(a.owner) != ::geteuid()) {
      std::fprintf(stderr, "umap-recover: --owner %lld: only root may work on the journal of "
                           "another user (you are uid %u)\n",
                   static_cast<long long>(a.owner), ::geteuid());
      return false;
    }
    o->journal_owner = static_cast<uid_t>(a.owner);
  }
  o->verify_after_replay = a.verify_after;
  o->checkpoint_bytes = a.checkpoint_mib << 20;
  o->parallel_files = a.parallel_files;
  o->read_threads = a.read_threads;
  o->buffer_bytes = a.buffer_mib << 20;
  o->io_depth = a.io_depth;
  o->io_max_bytes = a.io_max_kib << 10;
  o->io_timeout_ms = a.io_timeout_ms;
  for (const std::string& spec : a.force_paths) {
    absl::StatusOr<recovery::PathRelocation> r = recovery::ParseRelocation(spec);
    if (!r.ok()) {
      std::fprintf(stderr, "umap-recover: %s\n", std::string(r.status().message()).c_str());
      return false;
    }
    o->relocations.push_back(*std::move(r));
  }
  if (!a.only.empty()) {
    // Match the journaled path or, if the file exists, its device and inode.
    absl::StatusOr<FileIdentity> id = Env::Default()->IdentifyPath(a.only);
    o->only_file = id.ok() ? *id : FileIdentity{a.only, 0, 0, 0};
  }
  return true;
}

ProgressPrinter::Options ProgressOptions(const std::string& progress) {
  ProgressPrinter::Options po;
  po.style = progress == "bar"     ? ProgressPrinter::Style::kBar
             : progress == "lines" ? ProgressPrinter::Style::kLines
             : progress == "json"  ? ProgressPrinter::Style::kJson
             : progress == "never" ? ProgressPrinter::Style::kOff
                                   : ProgressPrinter::AutoStyle(STDERR_FILENO);
  if (progress == "bar" || progress == "lines" || progress == "json") po.delay_micros = 0;
  if (progress == "json") po.line_interval_micros = 1'000'000;
  return po;
}

// Runs the command and prints its report (nothing with --quiet and exit 0).
int RunAndReport(const Args& a, Command cmd, recovery::RecoverOptions o) {
  ProgressPrinter printer(stderr, ProgressOptions(a.progress));
  if (cmd != Command::kStatus) {
    o.progress = [&printer](const recovery::Progress& p) { printer.Update(p); };
  }
  absl::StatusOr<recovery::Report> report = recovery::Recover(o);
  printer.Finish();
  int code;
  std::string out;
  if (!report.ok()) {
    code = ExitCodeFor(cmd, report.status());
    out = a.json ? RenderErrorJson(cmd, a.journal_dir, report.status(), code)
                 : RenderErrorText(cmd, a.journal_dir, report.status(), code);
  } else {
    code = ExitCodeFor(cmd, *report);
    out = a.json ? RenderJson(cmd, *report, code) : RenderText(cmd, *report, code);
  }
  if (!(a.quiet && code == 0)) {
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }
  return code;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "umap-recover: replay the committed transactions of a Umap journal into their files "
      "(default), verify files against it, or summarise it.",
      "umap-recover"};
  app.footer(kFooter);
  app.set_version_flag("--version", absl::StrCat("umap-recover (umap 0.1.0, journal format ",
                                                 journal::kFormatVersion, ")"));
  // Options may come before or after the subcommand.
  app.fallthrough();
  Args a;
  AddWhatOptions(app, a);
  AddHowOptions(app, a);
  app.add_subcommand("replay", "Replay committed transactions (default)");
  CLI::App* verify_cmd = app.add_subcommand(
      "verify", "Compare the files' blocks with the journal's CRCs; write nothing");
  CLI::App* status_cmd = app.add_subcommand(
      "status", "Summarise the journal: mappings, pending transactions, targets; write nothing");
  app.require_subcommand(0, 1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help/version (rc 0) or the error
    return rc == 0 ? 0 : static_cast<int>(recovery::ExitCode::kRefused);
  }

  Command cmd = Command::kReplay;
  if (verify_cmd->parsed()) cmd = Command::kVerify;
  if (status_cmd->parsed()) cmd = Command::kStatus;
  if (a.dry_run && cmd == Command::kReplay) cmd = Command::kDryRun;
  recovery::RecoverOptions o;
  if (!ToRecoverOptions(a, cmd, &o)) return static_cast<int>(recovery::ExitCode::kRefused);
  return RunAndReport(a, cmd, std::move(o));
}

}  // namespace
}  // namespace umap::tools

int main(int argc, char** argv) {
  // Recovery allocates a few large, short-lived blocks (a huge transaction's header and
  // plan, the image buffers). A fixed mmap threshold returns each to the system when it is
  // freed; glibc's default raises the threshold after the first such free, and later ones
  // stay in the heap, counted in the resident set for the rest of the run.
  ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
  try {
    return umap::tools::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "umap-recover: internal error: %s\n", e.what());
    return static_cast<int>(umap::recovery::ExitCode::kIoError);
  }
}
