#include "recovery/recovery.h"

#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/crash_point.h"
#include "base/crc32c.h"
#include "base/log.h"
#include "base/mutation.h"
#include "base/posix_error.h"
#include "base/status_macros.h"

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
  }
  return "?";
}

absl::string_view BlockClassName(BlockClass c) {
  switch (c) {
    case BlockClass::kApplied: return "applied";
    case BlockClass::kNotApplied: return "not_applied";
    case BlockClass::kTorn: return "torn";
    case BlockClass::kUnknown: return "not_applied_or_torn";
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
    if (m.blocks_not_applied + m.blocks_torn + m.blocks_unknown > 0 || m.staged_discarded > 0) {
      code = Worse(code, ExitCode::kDataLoss);
    }
  }
  if (!report.journal_status.ok()) code = Worse(code, ExitCodeOf(report.journal_status));
  if (!report.salvaged.ok()) code = Worse(code, ExitCode::kDataLoss);
  return code;
}

namespace {

using journal::Contents;
using journal::Journal;
using journal::MappingInfo;

struct PendingBlock {
  uint64_t block = 0;
  uint32_t length = 0;
  uint32_t crc = 0;
};

// A pending transaction as the scan saw it (images dropped: they are read again to write).
struct Txn {
  uint64_t lsn = 0;
  uint64_t mapping_id = 0;
  Contents contents = Contents::kData;
  std::vector<PendingBlock> blocks;
  uint64_t bytes = 0;
  // The images as the scan read them (kReplay, within RecoverOptions::scan_cache_bytes).
  std::unique_ptr<journal::Transaction> images;
};

// One version of one block range of a file.
struct Version {
  uint64_t lsn = 0;
  uint64_t mapping_id = 0;
  uint64_t block = 0;
  uint32_t length = 0;
  uint32_t crc = 0;
  Contents contents = Contents::kData;
};

struct BlockVersions {
  Version newest;
  std::vector<Version> older;  // LSN order
};

struct MappingWork {
  MappingReport* report = nullptr;
  std::vector<const Txn*> txns;  // LSN order
  bool bad_txn = false;
  FileIdentity found;            // what IdentifyPath found at the target
  bool stat_ok = false;
};

// All mappings whose target is one file (same device and inode): replayed together, in LSN
// order, so that two mappings of one file can never roll each other's blocks back.
struct FileGroup {
  std::string path;
  std::vector<MappingWork*> members;
  std::vector<const Txn*> txns;              // LSN order, all members
  std::map<uint64_t, BlockVersions> blocks;  // by file offset
  std::unique_ptr<File> file;
  uint64_t bytes_to_write = 0;
};

class ProgressReporter {
 public:
  ProgressReporter(const RecoverOptions& o, Env* env, uint64_t start)
      : fn_(o.progress), interval_(o.progress_interval_micros), env_(env), start_(start) {}

  void Update(Progress::Phase phase, uint64_t done, uint64_t total, absl::string_view path,
              bool force = false) {
    if (!fn_) return;
    const uint64_t now = env_->NowMicros();
    if (!force && now - last_ < interval_) return;
    last_ = now;
    Progress p;
    p.phase = phase;
    p.done = done;
    p.total = total;
    p.elapsed_micros = now - start_;
    p.path = std::string(path);
    fn_(p);
  }

 private:
  const std::function<void(const Progress&)> fn_;
  const uint64_t interval_;
  Env* const env_;
  const uint64_t start_;
  uint64_t last_ = 0;
};

bool IsNotWritable(const absl::Status& s) {
  const int err = ErrnoFromStatus(s);
  return err == EACCES || err == EPERM || err == EROFS || err == ETXTBSY;
}

class Recoverer {
 public:
  Recoverer(Journal& journal, const RecoverOptions& options, bool owned)
      : journal_(journal),
        o_(options),
        owned_(owned),
        env_(options.env != nullptr ? options.env : Env::Default()),
        start_(env_->NowMicros()),
        progress_(options, env_, start_) {}

  absl::StatusOr<Report> Run(Report report);

 private:
  bool Included(const MappingInfo& m) const;
  std::pair<std::string, bool> Target(const std::string& path) const;
  absl::Status Scan(Report* report);
  void Check(MappingWork* w);
  void Refuse(MappingWork* w, Problem p, absl::Status s);
  void FailGroup(FileGroup* g, Problem p, const absl::Status& s);
  void ProcessGroup(FileGroup* g);
  absl::Status OpenGroupFile(FileGroup* g);
  // Reads and classifies the versions selected by `want`; adds findings to the members.
  absl::Status Classify(FileGroup* g, bool all_blocks);
  absl::Status Replay(FileGroup* g);
  // fdatasync, optional read-back, MarkApplied of `lsns`.
  absl::Status Checkpoint(FileGroup* g, std::vector<const Txn*>* done,
                          std::vector<Version>* written);
  MappingWork* WorkOf(uint64_t mapping_id) {
    auto it = work_.find(mapping_id);
    return it == work_.end() ? nullptr : &it->second;
  }

  Journal& journal_;
  const RecoverOptions& o_;
  const bool owned_;
  Env* const env_;
  const uint64_t start_;
  ProgressReporter progress_;
  std::string dir_;

  std::vector<Txn> txns_;  // LSN order
  std::map<uint64_t, MappingWork> work_;  // included mappings by id
  Report::Timings timings_;
  uint64_t replay_total_ = 0, replay_done_ = 0;
  uint64_t cached_bytes_ = 0;
};

}  // namespace

bool SameFile(const FileIdentity& journaled, const FileIdentity& found) {
  if (journaled.inode != found.inode) return false;
  if (journaled.device == found.device) return true;
  return major(static_cast<dev_t>(journaled.device)) == 0 &&
         major(static_cast<dev_t>(found.device)) == 0;
}

namespace {

bool Recoverer::Included(const MappingInfo& m) const {
  if (std::find(o_.skip_mappings.begin(), o_.skip_mappings.end(), m.id) !=
      o_.skip_mappings.end()) {
    return false;
  }
  if (!o_.only_file.has_value()) return true;
  const FileIdentity& f = *o_.only_file;
  if (f.device == m.file.device && f.inode == m.file.inode && (f.device | f.inode) != 0) {
    return true;
  }
  return !f.path.empty() && f.path == m.file.path;
}

std::pair<std::string, bool> Recoverer::Target(const std::string& path) const {
  const PathRelocation* best = nullptr;
  for (const PathRelocation& r : o_.relocations) {
    const bool match =
        path == r.from || (absl::StartsWith(path, r.from) &&
                           (r.from == "/" || path[r.from.size()] == '/'));
    if (match && (best == nullptr || r.from.size() > best->from.size())) best = &r;
  }
  if (best == nullptr) return {path, false};
  if (path == best->from) return {best->to, true};
  std::string rest = path.substr(best->from.size());
  if (best->from == "/") rest = "/" + rest;
  return {best->to == "/" ? rest : best->to + rest, true};
}

absl::Status Recoverer::Scan(Report* report) {
  const std::vector<uint64_t> lsns = journal_.PendingLsns();
  report->pending_txns = lsns.size();
  uint64_t done = 0;
  // Transactions are read by up to scan_threads threads, a few at a time (a transaction is
  // read whole, and its size is unknown before it is read), and processed here in LSN order.
  const size_t threads = std::max<size_t>(1, o_.scan_threads);
  const size_t kWindow = 4 * threads;
  std::vector<absl::StatusOr<journal::Transaction>> window;
  for (size_t i = 0; i < lsns.size(); ++i) {
    const uint64_t lsn = lsns[i];
    if (i % kWindow == 0) {
      const size_t n = std::min(kWindow, lsns.size() - i);
      window.assign(n, absl::UnknownError("not read"));
      auto read = [&](size_t first) {
        for (size_t k = first; k < n; k += threads) window[k] = journal_.ReadTransaction(lsns[i + k]);
      };
      std::vector<std::thread> helpers;
      for (size_t h = 1; h < threads && h < n; ++h) helpers.emplace_back(read, h);
      read(0);
      for (std::thread& h : helpers) h.join();
    }
    progress_.Update(Progress::Phase::kScan, done++, lsns.size(), "");
    absl::StatusOr<journal::Transaction> t = std::move(window[i % kWindow]);
    window[i % kWindow] = absl::UnknownError("taken");  // frees the images now
    if (absl::IsNotFound(t.status()) && !owned_) continue;  // applied meanwhile (in-process)
    if (!t.ok()) {
      absl::Status s = t.status();
      if (absl::IsDataLoss(s)) {
        return absl::DataLossError(absl::StrCat(
            "journal ", dir_, ": committed transaction LSN ", lsn, " is corrupt (", s.message(),
            "); nothing was written. The journal is damaged beyond its tolerated tail: keep a "
            "copy of it and of the files for analysis"));
      }
      return s;
    }
    MappingWork* w = WorkOf(t->mapping_id);
    if (w == nullptr) continue;  // filtered out
    Txn txn;
    txn.lsn = lsn;
    txn.mapping_id = t->mapping_id;
    txn.contents = t->contents;
    txn.blocks.reserve(t->blocks.size());
    const MappingInfo& m = w->report->mapping;
    for (const journal::CommittedBlock& b : t->blocks) {
      txn.blocks.push_back({b.block, b.length, b.crc});
      txn.bytes += b.length;
      const uint64_t offset = b.block * m.block_size;
      const bool overflow = b.block != 0 && offset / b.block != m.block_size;
      if (!w->bad_txn &&
          (b.length == 0 || b.length > m.block_size || overflow || offset + b.length > m.file.size)) {
        w->bad_txn = true;
        Refuse(w, Problem::kBadTransaction,
               absl::DataLossError(absl::StrCat(
                   "mapping ", m.id, ": transaction LSN ", lsn, " writes block ", b.block,
                   " (offset ", offset, ", ", b.length, " bytes) outside the journaled file ",
                   m.file.path, " of ", m.file.size, " bytes (block size ", m.block_size,
                   "); nothing written for this file")));
      }
    }
    if (o_.mode == Mode::kReplay && txn.contents == Contents::kData &&
        cached_bytes_ + txn.bytes <= o_.scan_cache_bytes) {
      cached_bytes_ += txn.bytes;
      txn.images = std::make_unique<journal::Transaction>(*std::move(t));
    }
    MappingReport& r = *w->report;
    if (r.first_lsn == 0) r.first_lsn = lsn;
    r.last_lsn = lsn;
    ++r.txns_pending;
    r.blocks_pending += txn.blocks.size();
    r.bytes_pending += txn.bytes;
    txns_.push_back(std::move(txn));
  }
  progress_.Update(Progress::Phase::kScan, done, lsns.size(), "", /*force=*/true);
  for (const Txn& t : txns_) work_[t.mapping_id].txns.push_back(&t);
  return absl::OkStatus();
}

void Recoverer::Refuse(MappingWork* w, Problem p, absl::Status s) {
  MappingReport& r = *w->report;
  if (r.state == MappingState::kRefused || r.state == MappingState::kIoError) return;
  r.state = p == Problem::kIo || p == Problem::kJournal ? MappingState::kIoError
                                                       : MappingState::kRefused;
  r.problem = p;
  r.status = std::move(s);
}

void Recoverer::Check(MappingWork* w) {
  MappingReport& r = *w->report;
  const MappingInfo& m = r.mapping;
  const std::string kept = absl::StrCat("; nothing written, its ", r.txns_pending,
                                        " committed transactions (LSN ", r.first_lsn, "..",
                                        r.last_lsn, ") are kept");
  if (m.file.path.empty()) {
    Refuse(w, Problem::kNoPath,
           absl::FailedPreconditionError(absl::StrCat(
               "mapping ", m.id, ": the journal recorded no path for its file (device ",
               m.file.device, ", inode ", m.file.inode, ")", kept)));
    return;
  }
  std::tie(r.target_path, r.relocated) = Target(m.file.path);
  const std::string where =
      r.relocated ? absl::StrCat(r.target_path, " (relocated from ", m.file.path, ")")
                  : r.target_path;
  absl::StatusOr<FileIdentity> found = env_->IdentifyPath(r.target_path);
  if (!found.ok()) {
    const int err = ErrnoFromStatus(found.status());
    if (err == ENOENT || err == ENOTDIR) {
      Refuse(w, Problem::kMissingFile,
             absl::NotFoundError(absl::StrCat(
                 "mapping ", m.id, ": the journaled file ", where, " is missing (",
                 found.status().message(), ")", kept,
                 ". Restore the file, or point to it with --force-path OLD=NEW")));
    } else if (IsNotWritable(found.status())) {
      Refuse(w, Problem::kNotWritable,
             absl::PermissionDeniedError(absl::StrCat("mapping ", m.id, ": cannot stat ", where,
                                                      ": ", found.status().message(), kept)));
    } else {
      Refuse(w, Problem::kIo,
             Reword(found.status(),
                    absl::StrCat("mapping ", m.id, ": stat ", where, ": ",
                                       found.status().message(), kept, "; safe to rerun")));
    }
    return;
  }
  w->found = *found;
  w->stat_ok = true;
  if (w->bad_txn) return;  // refused by the scan
  if (!r.relocated && !SameFile(m.file, *found)) {
    Refuse(w, Problem::kIdentityMismatch,
           absl::FailedPreconditionError(absl::StrCat(
               "mapping ", m.id, ": ", where, " is not the journaled file: journaled device ",
               m.file.device, " inode ", m.file.inode, ", found device ", found->device,
               " inode ", found->inode, " (replaced, copied or restored?)", kept,
               ". If it holds the same data at a new place or mount, use --force-path ",
               m.file.path, "=", r.target_path)));
    return;
  }
  if (!o_.accept_size_change && found->size != m.file.size) {
    Refuse(w, Problem::kSizeMismatch,
           absl::FailedPreconditionError(absl::StrCat(
               "mapping ", m.id, ": ", where, " has ", found->size,
               " bytes but the journaled file had ", m.file.size,
               " (Umap never changes a file's size: truncated, extended or another file?)", kept,
               ". --accept-size replays anyway")));
    return;
  }
}

void Recoverer::FailGroup(FileGroup* g, Problem p, const absl::Status& s) {
  for (MappingWork* w : g->members) Refuse(w, p, s);
}

absl::Status Recoverer::OpenGroupFile(FileGroup* g) {
  const OpenMode mode = o_.mode == Mode::kVerify ? OpenMode::kReadOnly : OpenMode::kReadWrite;
  absl::StatusOr<std::unique_ptr<File>> f = env_->OpenFile(g->path, mode);
  const MappingWork& first = *g->members.front();
  if (!f.ok()) {
    if (IsNotWritable(f.status())) {
      FailGroup(g, Problem::kNotWritable,
                absl::PermissionDeniedError(absl::StrCat(
                    "cannot open ", g->path, mode == OpenMode::kReadWrite ? " for writing" : "",
                    ": ", f.status().message(), "; nothing written, the committed transactions "
                    "are kept. Make the file writable (or remount read-write) and rerun")));
    } else {
      FailGroup(g, Problem::kIo,
                Reword(f.status(), absl::StrCat("open ", g->path, ": ",
                                                             f.status().message(),
                                                             "; nothing written; safe to rerun")));
    }
    return f.status();
  }
  g->file = *std::move(f);
  // The path may have been replaced between the stat and the open.
  absl::StatusOr<FileIdentity> id = g->file->Identify();
  if (!id.ok()) {
    FailGroup(g, Problem::kIo, id.status());
    return id.status();
  }
  if (!SameFile(first.found, *id)) {
    absl::Status s = absl::FailedPreconditionError(
        absl::StrCat(g->path, " was replaced while recovery checked it (device ", id->device,
                     " inode ", id->inode, ", was ", first.found.device, " ",
                     first.found.inode, "); nothing written"));
    FailGroup(g, Problem::kIdentityMismatch, s);
    return s;
  }
  return absl::OkStatus();
}

absl::Status Recoverer::Classify(FileGroup* g, bool all_blocks) {
  // Contiguous ranges are read together (up to 1 MiB) to keep syscalls few.
  constexpr uint64_t kMaxRead = 1 << 20;
  std::vector<std::pair<uint64_t, BlockVersions*>> batch;
  std::string buf;
  auto flush = [&]() -> absl::Status {
    if (batch.empty()) return absl::OkStatus();
    const uint64_t begin = batch.front().first;
    const uint64_t end = batch.back().first + batch.back().second->newest.length;
    buf.resize(end - begin);
    ASSIGN_OR_RETURN(size_t got, g->file->ReadAt(begin, absl::MakeSpan(buf.data(), buf.size())));
    for (const auto& [offset, bv] : batch) {
      const Version& v = bv->newest;
      const uint64_t rel = offset - begin;
      const size_t n = rel >= got ? 0 : std::min<uint64_t>(v.length, got - rel);
      const uint32_t x = crc32c::Value(buf.data() + rel, n);
      MappingWork* w = WorkOf(v.mapping_id);
      MappingReport& r = *w->report;
      BlockFinding f;
      f.mapping_id = v.mapping_id;
      f.lsn = v.lsn;
      f.block = v.block;
      f.offset = offset;
      f.length = v.length;
      f.expected_crc = v.crc;
      f.found_crc = x;
      f.repairable = v.contents == Contents::kData;
      if (n == v.length && x == v.crc) {
        ++r.blocks_verified;
        continue;
      }
      f.cls = bv->older.empty() ? BlockClass::kUnknown : BlockClass::kTorn;
      for (auto it = bv->older.rbegin(); it != bv->older.rend(); ++it) {
        if (n == it->length && x == it->crc) {
          f.cls = BlockClass::kNotApplied;
          f.matched_lsn = it->lsn;
          break;
        }
      }
      // Data-mode blocks that replay is about to rewrite are not findings.
      if (f.repairable && o_.mode != Mode::kVerify) continue;
      switch (f.cls) {
        case BlockClass::kNotApplied: ++r.blocks_not_applied; break;
        case BlockClass::kTorn: ++r.blocks_torn; break;
        default: ++r.blocks_unknown; break;
      }
      if (r.findings.size() < o_.max_findings) {
        r.findings.push_back(f);
      } else {
        ++r.findings_omitted;
      }
    }
    batch.clear();
    return absl::OkStatus();
  };
  for (auto& [offset, bv] : g->blocks) {
    if (!all_blocks && bv.newest.contents != Contents::kIntent) continue;
    if (!batch.empty()) {
      const uint64_t prev_end = batch.back().first + batch.back().second->newest.length;
      if (prev_end != offset || offset + bv.newest.length - batch.front().first > kMaxRead) {
        RETURN_IF_ERROR(flush());
      }
    }
    batch.emplace_back(offset, &bv);
  }
  return flush();
}

absl::Status Recoverer::Checkpoint(FileGroup* g, std::vector<const Txn*>* done,
                                   std::vector<Version>* written) {
  if (!written->empty()) {
    progress_.Update(Progress::Phase::kSync, replay_done_, replay_total_, g->path, true);
    const uint64_t t0 = env_->NowMicros();
    absl::Status sync_status = g->file->Sync();
    timings_.sync += env_->NowMicros() - t0;
    if (absl::Status s = sync_status; !s.ok()) {
      // Never retry a failed fdatasync: the kernel may have dropped the pages. The
      // transactions stay pending; the next run writes them again.
      FailGroup(g, Problem::kIo,
                Reword(s, absl::StrCat(s.message(), "; the transactions since the "
                                                                 "last checkpoint stay pending; "
                                                                 "safe to rerun")));
      return s;
    }
    if (o_.verify_after_replay) {
      std::string buf;
      for (const Version& v : *written) {
        buf.resize(v.length);
        const uint64_t offset = v.block * WorkOf(v.mapping_id)->report->mapping.block_size;
        absl::StatusOr<size_t> got = g->file->ReadAt(offset, absl::MakeSpan(buf.data(), buf.size()));
        absl::Status s = got.status();
        bool same = s.ok() && *got == v.length && crc32c::Value(buf.data(), v.length) == v.crc;
        UMAP_IF_MUTATION(kSkipCrc) { same = true; }
        if (s.ok() && !same) {
          s = absl::DataLossError(absl::StrCat(
              g->path, ": block ", v.block, " at offset ", offset, " (LSN ", v.lsn,
              ") reads back different bytes after write and fdatasync"));
        }
        if (!s.ok()) {
          FailGroup(g, Problem::kIo, s);
          return s;
        }
        ++WorkOf(v.mapping_id)->report->blocks_verified;
      }
    }
  }
  if (!done->empty()) {
    std::vector<uint64_t> lsns;
    lsns.reserve(done->size());
    for (const Txn* t : *done) lsns.push_back(t->lsn);
    const uint64_t t0 = env_->NowMicros();
    absl::Status mark_status = journal_.MarkApplied(absl::MakeConstSpan(lsns));
    timings_.mark += env_->NowMicros() - t0;
    if (absl::Status s = mark_status; !s.ok()) {
      FailGroup(g, Problem::kJournal,
                Reword(s, absl::StrCat("the file is synced, but marking its "
                                                    "transactions applied failed: ",
                                                    s.message(), "; safe to rerun")));
      return s;
    }
    for (const Txn* t : *done) {
      MappingReport& r = *WorkOf(t->mapping_id)->report;
      if (t->contents == Contents::kData) {
        ++r.txns_replayed;
      } else {
        ++r.txns_discarded;
      }
    }
  }
  done->clear();
  written->clear();
  return absl::OkStatus();
}

absl::Status Recoverer::Replay(FileGroup* g) {
  std::vector<const Txn*> done;
  std::vector<Version> written;
  uint64_t since_checkpoint = 0;
  std::string run;
  // The blocks of each transaction that are the newest data version of their range: only
  // those are written (an older image would be overwritten by a newer one of this run).
  std::vector<std::vector<size_t>> mine_of(g->txns.size());
  for (size_t x = 0; x < g->txns.size(); ++x) {
    const Txn* t = g->txns[x];
    const uint32_t bs = WorkOf(t->mapping_id)->report->mapping.block_size;
    for (size_t i = 0; i < t->blocks.size(); ++i) {
      const BlockVersions& bv = g->blocks.at(t->blocks[i].block * bs);
      if (bv.newest.lsn == t->lsn && bv.newest.contents == Contents::kData) {
        mine_of[x].push_back(i);
      }
    }
  }
  // Images are fetched a window at a time (at most 32 transactions and, beyond the first,
  // 64 MiB) by up to scan_threads threads, then written here in LSN order.
  const size_t threads = std::max<size_t>(1, o_.scan_threads);
  constexpr size_t kWindowTxns = 32;
  constexpr uint64_t kWindowBytes = 64 << 20;
  std::vector<absl::StatusOr<journal::Transaction>> window;
  size_t window_begin = 0, window_end = 0;
  for (size_t x = 0; x < g->txns.size(); ++x) {
    const Txn* t = g->txns[x];
    if (x == window_end) {
      const uint64_t t0 = env_->NowMicros();
      window_begin = x;
      uint64_t bytes = 0;
      for (window_end = x; window_end < g->txns.size() && window_end - x < kWindowTxns &&
                           (window_end == x || bytes + g->txns[window_end]->bytes <= kWindowBytes);
           ++window_end) {
        bytes += g->txns[window_end]->bytes;
      }
      const size_t n = window_end - x;
      window.assign(n, absl::UnknownError("not read"));
      auto fetch = [&](size_t first) {
        for (size_t k = first; k < n; k += threads) {
          const Txn* u = g->txns[x + k];
          if (mine_of[x + k].empty()) continue;
          window[k] = u->images != nullptr ? std::move(*u->images) : journal_.ReadTransaction(u->lsn);
        }
      };
      std::vector<std::thread> helpers;
      for (size_t h = 1; h < threads && h < n; ++h) helpers.emplace_back(fetch, h);
      fetch(0);
      for (std::thread& h : helpers) h.join();
      timings_.read += env_->NowMicros() - t0;
    }
    MappingWork* w = WorkOf(t->mapping_id);
    MappingReport& r = *w->report;
    const uint32_t bs = r.mapping.block_size;
    const std::vector<size_t>& mine = mine_of[x];
    if (!mine.empty()) {
      uint64_t t0;
      absl::StatusOr<journal::Transaction> full = std::move(window[x - window_begin]);
      if (!full.ok()) {
        absl::Status s = full.status();
        FailGroup(g, absl::IsDataLoss(s) ? Problem::kBadTransaction : Problem::kIo,
                  Reword(s, absl::StrCat("read transaction LSN ", t->lsn, ": ",
                                                      s.message())));
        return s;
      }
      size_t i = 0;
      while (i < mine.size()) {
        // Merge adjacent full blocks of this transaction into one write (at most 8 MiB).
        size_t j = i + 1;
        while (j < mine.size() && full->blocks[mine[j]].block == full->blocks[mine[j - 1]].block + 1 &&
               full->blocks[mine[j - 1]].data.size() == bs && (j - i) * bs < (8u << 20)) {
          ++j;
        }
        const journal::CommittedBlock& first = full->blocks[mine[i]];
        absl::string_view data = first.data;
        if (j - i > 1) {
          run.clear();
          for (size_t k = i; k < j; ++k) run += full->blocks[mine[k]].data;
          data = run;
        }
        const uint64_t offset = first.block * bs;
        progress_.Update(Progress::Phase::kReplay, replay_done_, replay_total_, g->path);
        t0 = env_->NowMicros();
        absl::Status write_status =
            g->file->WriteAt(offset, absl::MakeConstSpan(data.data(), data.size()));
        timings_.write += env_->NowMicros() - t0;
        if (absl::Status s = write_status; !s.ok()) {
          FailGroup(g, Problem::kIo,
                    Reword(s, absl::StrCat("replay of LSN ", t->lsn, " (mapping ",
                                                        t->mapping_id, ", block ", first.block,
                                                        ", offset ", offset, "): ", s.message(),
                                                        "; the journal keeps the transaction; "
                                                        "safe to rerun")));
          return s;
        }
        // A kill here leaves some blocks of this (committed) transaction written: the next
        // run writes them all again.
        UMAP_CRASH_POINT("recovery.mid_replay");
        for (size_t k = i; k < j; ++k) {
          const journal::CommittedBlock& b = full->blocks[mine[k]];
          written.push_back({t->lsn, t->mapping_id, b.block, b.length, b.crc, t->contents});
          ++r.blocks_written;
          r.bytes_written += b.data.size();
          replay_done_ += b.data.size();
          since_checkpoint += b.data.size();
        }
        i = j;
      }
    }
    done.push_back(t);
    if (o_.checkpoint_bytes != 0 && since_checkpoint >= o_.checkpoint_bytes) {
      RETURN_IF_ERROR(Checkpoint(g, &done, &written));
      since_checkpoint = 0;
    }
  }
  RETURN_IF_ERROR(Checkpoint(g, &done, &written));
  progress_.Update(Progress::Phase::kReplay, replay_done_, replay_total_, g->path, true);
  return absl::OkStatus();
}

void Recoverer::ProcessGroup(FileGroup* g) {
  const uint64_t t0 = env_->NowMicros();
  // Every member passed its own checks (else the group was refused before this).
  if (!OpenGroupFile(g).ok()) return;
  // Intent blocks are judged in every mode; kVerify judges data blocks too.
  if (absl::Status s = Classify(g, o_.mode == Mode::kVerify); !s.ok()) {
    FailGroup(g, Problem::kIo,
              Reword(s, absl::StrCat("read ", g->path, ": ", s.message(),
                                                  "; nothing written; safe to rerun")));
    return;
  }
  if (o_.mode == Mode::kReplay) {
    if (!Replay(g).ok()) return;  // the group's reports carry the error
    for (MappingWork* w : g->members) w->report->state = MappingState::kReplayed;
  } else {
    for (MappingWork* w : g->members) {
      w->report->state =
          o_.mode == Mode::kDryRun ? MappingState::kWouldReplay : MappingState::kVerified;
    }
  }
  const uint64_t us = env_->NowMicros() - t0;
  for (MappingWork* w : g->members) w->report->duration_micros += us;
}

absl::StatusOr<Report> Recoverer::Run(Report report) {
  dir_ = journal_.dir();
  report.journal_dir = dir_;
  report.mode = o_.mode;

  for (const MappingInfo& m : journal_.Mappings()) {
    if (!Included(m)) continue;
    MappingReport r;
    r.mapping = m;
    r.target_path = m.file.path;
    report.mappings.push_back(std::move(r));
  }
  for (MappingReport& r : report.mappings) work_[r.mapping.id].report = &r;
  uint64_t t = env_->NowMicros();
  RETURN_IF_ERROR(Scan(&report));
  report.timings.scan = env_->NowMicros() - t;

  // Check each mapping with work, then group mappings by the file found at their target.
  std::map<std::pair<uint64_t, uint64_t>, FileGroup> groups;
  for (auto& [id, w] : work_) {
    if (w.txns.empty()) continue;
    Check(&w);
    if (!w.stat_ok) continue;
    FileGroup& g = groups[{w.found.device, w.found.inode}];
    if (g.path.empty()) g.path = w.report->target_path;
    g.members.push_back(&w);
  }
  for (auto& [key, g] : groups) {
    // One refused member refuses the file: replaying the others could apply their
    // transactions out of order with the refused ones.
    const MappingWork* refused = nullptr;
    for (const MappingWork* w : g.members) {
      if (w->report->state == MappingState::kRefused) refused = w;
    }
    if (refused != nullptr) {
      for (MappingWork* w : g.members) {
        if (w != refused) {
          Refuse(w, refused->report->problem,
                 Reword(refused->report->status,
                              absl::StrCat("another mapping of the same file was refused: ",
                                           refused->report->status.message())));
        }
      }
      continue;
    }
    for (const MappingWork* w : g.members) {
      g.txns.insert(g.txns.end(), w->txns.begin(), w->txns.end());
    }
    std::sort(g.txns.begin(), g.txns.end(),
              [](const Txn* a, const Txn* b) { return a->lsn < b->lsn; });
    for (const Txn* t : g.txns) {
      const uint32_t bs = WorkOf(t->mapping_id)->report->mapping.block_size;
      for (const PendingBlock& b : t->blocks) {
        BlockVersions& bv = g.blocks[b.block * bs];
        if (bv.newest.lsn != 0) bv.older.push_back(bv.newest);
        bv.newest = {t->lsn, t->mapping_id, b.block, b.length, b.crc, t->contents};
      }
    }
    for (const auto& [offset, bv] : g.blocks) {
      if (bv.newest.contents != Contents::kData) continue;
      MappingReport& r = *WorkOf(bv.newest.mapping_id)->report;
      ++r.blocks_to_write;
      r.bytes_to_write += bv.newest.length;
      g.bytes_to_write += bv.newest.length;
    }
    replay_total_ += g.bytes_to_write;
  }
  for (auto& [key, g] : groups) {
    if (g.members.front()->report->state == MappingState::kRefused) continue;
    ProcessGroup(&g);
  }

  // Forget the mappings that have nothing pending any more (kReplay only). This also drops
  // their uncommitted staged blocks.
  if (o_.mode == Mode::kReplay) {
    for (MappingReport& r : report.mappings) {
      if (r.state != MappingState::kClean && r.state != MappingState::kReplayed) continue;
      const uint64_t staged_before = journal_.stats().staged_blocks;
      absl::Status s = journal_.UnregisterMapping(r.mapping.id);
      if (s.ok()) {
        r.unregistered = true;
        if (owned_) r.staged_discarded = staged_before - journal_.stats().staged_blocks;
      } else if (!absl::IsFailedPrecondition(s) || !journal_.poisoned().ok()) {
        if (report.journal_status.ok()) report.journal_status = s;
      } else {
        // Still pending (kept by the deletion rule): harmless; the next run forgets it.
        UMAP_LOG(kInfo, "mapping ", r.mapping.id, " kept: ", s.message());
      }
    }
  }
  report.timings.read = timings_.read;
  report.timings.write = timings_.write;
  report.timings.sync = timings_.sync;
  report.timings.mark = timings_.mark;
  report.duration_micros = env_->NowMicros() - start_;
  return report;
}

absl::StatusOr<Report> RecoverImpl(Journal& journal, const RecoverOptions& options, bool owned,
                                   Report report) {
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
  absl::StatusOr<FileIdentity> current = jenv->IdentifyPath(options.journal_dir + "/CURRENT");
  if (!current.ok()) {
    if (absl::IsNotFound(current.status())) {
      return missing("the directory holds no RocksDB database (no CURRENT file)");
    }
    return current.status();
  }

  jo.fs = options.journal_fs;
  jo.env = jenv;
  // Keep the staged records: dry-run and verify must not change the journal, and a replay
  // drops them with each mapping it forgets (so they are counted per mapping).
  jo.keep_staged = true;
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
  }
  return out;
}

}  // namespace umap::recovery
