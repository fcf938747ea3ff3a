#include "recovery/target_check.h"

#include <sys/sysmacros.h>

#include <cerrno>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/posix_error.h"

namespace umap::recovery {
namespace {

bool IsNotWritable(const absl::Status& s) {
  const int err = ErrnoFromStatus(s);
  return err == EACCES || err == EPERM || err == EROFS || err == ETXTBSY;
}

}  // namespace

bool SameFile(const FileIdentity& journaled, const FileIdentity& found) {
  if (journaled.inode != found.inode) return false;
  // A file deleted and re-created gets the freed inode number at once (ext4), but not the
  // birth: a journaled birth must be found again, of the same kind.
  if (journaled.birth != FileBirth::kUnknown &&
      (found.birth != journaled.birth || found.birth_a != journaled.birth_a ||
       found.birth_b != journaled.birth_b)) {
    return false;
  }
  if (journaled.device == found.device) return true;
  return major(static_cast<dev_t>(journaled.device)) == 0 &&
         major(static_cast<dev_t>(found.device)) == 0;
}

std::string DescribeIdentity(const FileIdentity& f) {
  std::string s = absl::StrCat("device ", f.device, " inode ", f.inode);
  switch (f.birth) {
    case FileBirth::kBirthTime:
      absl::StrAppend(&s, " born ",
                      absl::FormatTime("%Y-%m-%d %H:%M:%E9S UTC",
                                       absl::FromUnixSeconds(static_cast<int64_t>(f.birth_a)) +
                                           absl::Nanoseconds(f.birth_b),
                                       absl::UTCTimeZone()));
      break;
    case FileBirth::kIdXattr:
      absl::StrAppend(&s, " id ", absl::Hex(f.birth_a, absl::kZeroPad16),
                      absl::Hex(f.birth_b, absl::kZeroPad16));
      break;
    case FileBirth::kUnknown:
      break;
  }
  return s;
}

std::pair<std::string, bool> Relocate(const std::string& path,
                                      const std::vector<PathRelocation>& relocations) {
  const PathRelocation* best = nullptr;
  for (const PathRelocation& r : relocations) {
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

void CheckTarget(MappingWork* w, const RecoverOptions& options, Env* env) {
  MappingReport& r = *w->report;
  const journal::MappingInfo& m = r.mapping;
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
  std::tie(r.target_path, r.relocated) = Relocate(m.file.path, options.relocations);
  const std::string where =
      r.relocated ? absl::StrCat(r.target_path, " (relocated from ", m.file.path, ")")
                  : r.target_path;
  absl::StatusOr<FileIdentity> found = env->IdentifyPath(r.target_path);
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
    const bool reborn = m.file.inode == found->inode && m.file.device == found->device;
    Refuse(w, Problem::kIdentityMismatch,
           absl::FailedPreconditionError(absl::StrCat(
               "mapping ", m.id, ": ", where, " is not the journaled file: journaled ",
               DescribeIdentity(m.file), ", found ", DescribeIdentity(*found),
               reborn ? " (deleted and created again: the inode number was reused)"
                      : " (replaced, copied or restored?)",
               kept, ". If it holds the same data at a new place or mount, use --force-path ",
               m.file.path, "=", r.target_path,
               reborn ? "; if the journaled file is gone for good, its records cannot be "
                        "replayed anywhere: keep a copy of the journal and remove it"
                      : "")));
    return;
  }
  if (!options.accept_size_change && found->size != m.file.size) {
    Refuse(w, Problem::kSizeMismatch,
           absl::FailedPreconditionError(absl::StrCat(
               "mapping ", m.id, ": ", where, " has ", found->size,
               " bytes but the journaled file had ", m.file.size,
               " (Umap never changes a file's size: truncated, extended or another file?)", kept,
               ". --accept-size replays anyway")));
  }
}

absl::Status OpenTarget(FileGroup* g, Mode mode, Env* env) {
  const OpenMode open_mode = mode == Mode::kVerify ? OpenMode::kReadOnly : OpenMode::kReadWrite;
  absl::StatusOr<std::unique_ptr<File>> f = env->OpenFile(g->path, open_mode);
  if (!f.ok()) {
    if (IsNotWritable(f.status())) {
      FailGroup(g, Problem::kNotWritable,
                absl::PermissionDeniedError(absl::StrCat(
                    "cannot open ", g->path, open_mode == OpenMode::kReadWrite ? " for writing" : "",
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
  const FileIdentity& checked = g->members.front()->found;
  if (!SameFile(checked, *id)) {
    absl::Status s = absl::FailedPreconditionError(
        absl::StrCat(g->path, " was replaced while recovery checked it (", DescribeIdentity(*id),
                     ", was ", DescribeIdentity(checked), "); nothing written"));
    FailGroup(g, Problem::kIdentityMismatch, s);
    return s;
  }
  return absl::OkStatus();
}

}  // namespace umap::recovery
