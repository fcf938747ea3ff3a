#include "recovery/recovery.h"

#include <cerrno>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/posix_error.h"
#include "base/process_memory.h"
#include "base/status_macros.h"
#include "recovery/recoverer.h"

namespace umap::recovery {

absl::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kReplay: return "replay";
    case Mode::kDryRun: return "dry-run";
    case Mode::kVerify: return "verify";
  }
  return "?";
}

absl::string_view PhaseName(Progress::Phase phase) {
  switch (phase) {
    case Progress::Phase::kScan: return "scan";
    case Progress::Phase::kReplay: return "replay";
    case Progress::Phase::kSync: return "sync";
    case Progress::Phase::kCheck: return "check";
  }
  return "?";
}

absl::string_view BlockClassName(BlockClass c) {
  switch (c) {
    case BlockClass::kApplied: return "applied";
    case BlockClass::kNotApplied: return "not_applied";
    case BlockClass::kTorn: return "torn";
    case BlockClass::kNotAppliedOrTorn: return "not_applied_or_torn";
  }
  return "?";
}

absl::string_view MappingStateName(MappingState s) {
  switch (s) {
    case MappingState::kClean: return "clean";
    case MappingState::kReplayed: return "replayed";
    case MappingState::kWouldReplay: return "would_replay";
    case MappingState::kVerified: return "verified";
    case MappingState::kRefused: return "refused";
    case MappingState::kIoError: return "io_error";
  }
  return "?";
}

absl::string_view ProblemName(Problem p) {
  switch (p) {
    case Problem::kNone: return "none";
    case Problem::kNoPath: return "no_path";
    case Problem::kMissingFile: return "missing_file";
    case Problem::kIdentityMismatch: return "identity_mismatch";
    case Problem::kSizeMismatch: return "size_mismatch";
    case Problem::kNotWritable: return "not_writable";
    case Problem::kBadTransaction: return "bad_transaction";
    case Problem::kCorruptRecord: return "corrupt_record";
    case Problem::kIo: return "io";
    case Problem::kJournal: return "journal";
  }
  return "?";
}

absl::StatusOr<PathRelocation> ParseRelocation(absl::string_view spec) {
  const size_t eq = spec.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--force-path ", spec, ": expected OLD=NEW (absolute paths)"));
  }
  PathRelocation r{std::string(spec.substr(0, eq)), std::string(spec.substr(eq + 1))};
  auto trim = [](std::string* p) {
    while (p->size() > 1 && p->back() == '/') p->pop_back();
  };
  trim(&r.from);
  trim(&r.to);
  if (r.from.empty() || r.to.empty() || r.from[0] != '/' || r.to[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("--force-path ", spec, ": OLD and NEW must be absolute paths"));
  }
  return r;
}

namespace {

// Rank for "the worst exit code wins": a refusal needs a person, so it outranks an I/O
// error (which a rerun may fix); both outrank data loss.
int Rank(ExitCode c) {
  switch (c) {
    case ExitCode::kOk: return 0;
    case ExitCode::kDataLoss: return 1;
    case ExitCode::kIoError: return 2;
    case ExitCode::kRefused: return 3;
  }
  return 0;
}
ExitCode Worse(ExitCode a, ExitCode b) { return Rank(a) >= Rank(b) ? a : b; }

}  // namespace

ExitCode ExitCodeOf(const absl::Status& status) {
  if (status.ok()) return ExitCode::kOk;
  // Corruption is a refusal whatever errno it carries (RocksDB's come with EIO).
  if (absl::IsDataLoss(status)) return ExitCode::kRefused;
  // A system call's error: by its errno, not by the code ErrnoToStatus picked for it.
  if (HasErrno(status)) {
    switch (ClassifyErrno(ErrnoFromStatus(status))) {
      case ErrnoClass::kTransient:
      case ErrnoClass::kNoSpace:
        return ExitCode::kIoError;
      case ErrnoClass::kDenied:
      case ErrnoClass::kMissing:
      case ErrnoClass::kBusy:
      case ErrnoClass::kInvalid:
        return ExitCode::kRefused;
    }
  }
  // Our own statuses, which carry no errno: by code.
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return ExitCode::kRefused;
    default:
      return ExitCode::kIoError;
  }
}

ExitCode ExitCodeOf(const Report& report) {
  ExitCode code = ExitCode::kOk;
  if (report.mode == Mode::kDryRun && report.staged_blocks > 0) code = ExitCode::kDataLoss;
  for (const MappingReport& m : report.mappings) {
    switch (m.state) {
      case MappingState::kRefused:
        code = Worse(code, ExitCode::kRefused);
        break;
      case MappingState::kIoError:
        code = Worse(code, ExitCode::kIoError);
        break;
      default:
        break;
    }
    if (m.blocks_not_applied + m.blocks_torn + m.blocks_not_applied_or_torn > 0 ||
        m.staged_discarded > 0) {
      code = Worse(code, ExitCode::kDataLoss);
    }
  }
  if (!report.journal_status.ok()) code = Worse(code, ExitCodeOf(report.journal_status));
  if (!report.salvaged.ok()) code = Worse(code, ExitCode::kDataLoss);
  return code;
}

namespace {

absl::StatusOr<Report> RecoverImpl(journal::Journal& journal, const RecoverOptions& options,
                                   bool owned, Report report) {
  Recoverer r(journal, options, owned);
  return r.Run(std::move(report));
}

}  // namespace

absl::StatusOr<Report> Recover(journal::Journal& journal, const RecoverOptions& options) {
  return RecoverImpl(journal, options, /*owned=*/false, Report());
}

absl::StatusOr<Report> Recover(const RecoverOptions& options) {
  if (options.journal_dir.empty()) {
    return absl::InvalidArgumentError("no journal directory given (--journal DIR)");
  }
  Env* env = options.env != nullptr ? options.env : Env::Default();
  Env* jenv = options.journal_env != nullptr ? options.journal_env : env;
  const uint64_t start = env->NowMicros();
  Report report;
  report.journal_dir = options.journal_dir;
  report.mode = options.mode;
  auto missing = [&](absl::string_view why) -> absl::StatusOr<Report> {
    if (options.allow_missing_journal) {
      report.journal_found = false;
      report.duration_micros = env->NowMicros() - start;
      return report;
    }
    return absl::NotFoundError(absl::StrCat("no journal at ", options.journal_dir, ": ", why));
  };
  // Journal::Open creates a journal where there is none; recovery must not.
  absl::StatusOr<FileIdentity> dir = jenv->IdentifyPath(options.journal_dir);
  if (!dir.ok()) {
    if (absl::IsNotFound(dir.status())) return missing(dir.status().message());
    return dir.status();
  }
  journal::JournalOptions jo;
  jo.dir = options.journal_dir;
  jo.owner = options.journal_owner;
  // Whose journal it is, before anything in it is looked at.
  RETURN_IF_ERROR(journal::Journal::CheckPrivate(jo));
  jo.fs = options.journal_fs;
  jo.env = jenv;
  absl::StatusOr<FileIdentity> current = jenv->IdentifyPath(options.journal_dir + "/CURRENT");
  if (!current.ok()) {
    if (!absl::IsNotFound(current.status())) return current.status();
    // "No journal" means none was ever written here: a directory whose CURRENT is gone
    // while its logs, tables or commit mark remain is a damaged journal (allow_missing_
    // journal or not), which only a salvage may open.
    absl::Status intact = journal::Journal::CheckIntegrityForOpen(jo);
    if (intact.ok()) return missing("the directory holds no RocksDB database (no CURRENT file)");
    if (!options.salvage || !absl::IsDataLoss(intact)) return intact;
  }
  // Keep the staged records: dry-run and verify must not change the journal, and a replay
  // drops them with each mapping it forgets (so they are counted per mapping).
  jo.keep_staged = true;
  // This run reads and then deletes the backlog: compacting it meanwhile is wasted work.
  jo.defer_compaction = true;
  if (options.salvage) {
    report.salvaged = journal::Journal::CheckIntegrity(jo);
    if (!report.salvaged.ok() && !absl::IsDataLoss(report.salvaged)) return report.salvaged;
    jo.salvage = true;
    jo.read_only = options.mode != Mode::kReplay;  // a preview writes nothing
  }
  uint64_t t0 = env->NowMicros();
  ASSIGN_OR_RETURN(std::unique_ptr<journal::Journal> j, journal::Journal::Open(jo));
  const uint64_t open_us = env->NowMicros() - t0;
  const journal::Journal::Stats st = j->stats();
  report.staged_blocks = st.staged_blocks;
  report.staged_bytes = st.staged_bytes;
  absl::StatusOr<Report> out = RecoverImpl(*j, options, /*owned=*/true, std::move(report));
  t0 = env->NowMicros();
  j.reset();  // closes RocksDB: the next process may open the journal
  if (out.ok()) {
    out->timings.open = open_us;
    out->timings.close = env->NowMicros() - t0;
    out->duration_micros = env->NowMicros() - start;
    out->peak_rss_bytes = PeakRssBytes();
  }
  return out;
}

}  // namespace umap::recovery
