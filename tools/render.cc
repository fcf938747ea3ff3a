#include "tools/render.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/json_writer.h"

namespace umap::tools {

using recovery::BlockClass;
using recovery::BlockFinding;
using recovery::ExitCode;
using recovery::MappingReport;
using recovery::MappingState;
using recovery::Report;

absl::string_view CommandName(Command c) {
  switch (c) {
    case Command::kReplay: return "replay";
    case Command::kDryRun: return "dry-run";
    case Command::kVerify: return "verify";
    case Command::kStatus: return "status";
  }
  return "?";
}

int ExitCodeFor(Command c, const Report& report) {
  if (c == Command::kStatus) {
    if (!report.journal_status.ok()) {
      return static_cast<int>(recovery::ExitCodeOf(report.journal_status));
    }
    return report.salvaged.ok() ? 0 : static_cast<int>(recovery::ExitCode::kDataLoss);
  }
  return static_cast<int>(recovery::ExitCodeOf(report));
}

int ExitCodeFor(Command, const absl::Status& error) {
  return static_cast<int>(recovery::ExitCodeOf(error));
}

std::string HumanBytes(uint64_t n) {
  if (n < 1024) return absl::StrCat(n, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n) / 1024;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", v, units[u]);
}

namespace {

bool NothingPending(const Report& r) {
  for (const MappingReport& m : r.mappings) {
    if (m.txns_pending > 0) return false;
  }
  return true;
}

std::string Seconds(uint64_t us) { return absl::StrFormat("%.2f s", us / 1e6); }

std::string LsnRange(const MappingReport& m) {
  if (m.first_lsn == m.last_lsn) return absl::StrCat("LSN ", m.first_lsn);
  return absl::StrCat("LSN ", m.first_lsn, "..", m.last_lsn);
}

std::string Txns(uint64_t n) { return absl::StrCat(n, n == 1 ? " transaction" : " transactions"); }
std::string Blocks(uint64_t n) { return absl::StrCat(n, n == 1 ? " block" : " blocks"); }

std::string ClassCounts(const MappingReport& m) {
  return absl::StrCat(m.blocks_verified, " applied, ", m.blocks_not_applied, " not applied, ",
                      m.blocks_torn, " torn, ", m.blocks_not_applied_or_torn, " not applied or torn");
}

void FindingLines(const MappingReport& m, std::string* out) {
  for (const BlockFinding& f : m.findings) {
    // A data-mode block that differs is simply rewritten by replay; its class (which older
    // version it matches) only matters where nothing can be rewritten (intent mode).
    absl::StrAppend(out, "  ", f.repairable ? "differs" : recovery::BlockClassName(f.cls),
                    ": block ", f.block, " (offset ",
                    f.offset, ", ", f.length, " bytes) of LSN ", f.lsn);
    absl::StrAppendFormat(out, ": file crc %08x, journal crc %08x", f.found_crc, f.expected_crc);
    if (f.cls == BlockClass::kNotApplied && !f.repairable) {
      absl::StrAppend(out, ", the file holds the version of LSN ", f.matched_lsn);
    }
    absl::StrAppend(out, f.repairable ? "; replay rewrites it" : "; cannot be repaired (intent mode)",
                    "\n");
  }
  if (m.findings_omitted > 0) {
    absl::StrAppend(out, "  ... and ", m.findings_omitted, " more blocks (see --json)\n");
  }
}

void MappingLine(Command c, const MappingReport& m, std::string* out) {
  const std::string file = m.relocated ? absl::StrCat(m.target_path, " (journaled as ",
                                                      m.mapping.file.path, ")")
                                       : m.mapping.file.path;
  absl::StrAppend(out, "mapping ", m.mapping.id, " ", file, ": ");
  const bool intent = m.mapping.contents == journal::Contents::kIntent;
  switch (m.state) {
    case MappingState::kClean:
      absl::StrAppend(out, "clean, no pending transaction",
                      m.unregistered ? "; forgotten" : "", "\n");
      break;
    case MappingState::kReplayed:
      absl::StrAppend(out, "replayed ", Txns(m.txns_replayed), " (", LsnRange(m), "): wrote ",
                      Blocks(m.blocks_written), ", ", HumanBytes(m.bytes_written));
      if (m.txns_discarded > 0) {
        absl::StrAppend(out, "; ", Txns(m.txns_discarded),
                        " intent-only (nothing to replay) checked: ", ClassCounts(m));
      }
      if (m.blocks_verified > 0 && !intent) absl::StrAppend(out, "; ", m.blocks_verified, " read back equal");
      absl::StrAppend(out, "; ", Seconds(m.duration_micros), m.unregistered ? "; forgotten" : "",
                      "\n");
      break;
    case MappingState::kWouldReplay:
      absl::StrAppend(out, "would replay ", Txns(m.txns_pending), " (", LsnRange(m), "): write ",
                      Blocks(m.blocks_to_write), ", ", HumanBytes(m.bytes_to_write));
      if (intent || m.blocks_not_applied + m.blocks_torn + m.blocks_not_applied_or_torn > 0) {
        absl::StrAppend(out, "; intent blocks: ", ClassCounts(m));
      }
      absl::StrAppend(out, "\n");
      break;
    case MappingState::kVerified: {
      const uint64_t bad = m.blocks_not_applied + m.blocks_torn + m.blocks_not_applied_or_torn;
      absl::StrAppend(out, "verified ", Blocks(m.blocks_verified + bad), " of ", Txns(m.txns_pending),
                      " (", LsnRange(m), "): ", m.blocks_verified, " equal, ", bad, " differ");
      if (bad > 0) {
        absl::StrAppend(out, intent ? absl::StrCat(" (", ClassCounts(m), ")")
                                    : std::string(" (replay rewrites them)"));
      }
      absl::StrAppend(out, "\n");
      break;
    }
    case MappingState::kRefused:
      absl::StrAppend(out, "REFUSED (", recovery::ProblemName(m.problem), "): ",
                      m.status.message(), "\n");
      break;
    case MappingState::kIoError:
      absl::StrAppend(out, "I/O ERROR (", recovery::ProblemName(m.problem), "): ",
                      m.status.message(), "\n");
      break;
  }
  if (c == Command::kStatus) return;
  if (m.staged_discarded > 0) {
    absl::StrAppend(out, "  discarded ", m.staged_discarded,
                    " uncommitted staged blocks (written by the application, never umsync'ed)\n");
  }
  FindingLines(m, out);
}

void StatusMappingLine(const MappingReport& m, std::string* out) {
  const journal::MappingInfo& i = m.mapping;
  absl::StrAppend(out, "mapping ", i.id, " ", i.file.path, " (device ", i.file.device, ", inode ",
                  i.file.inode, ", ", i.file.size, " bytes, ", i.block_size, "-byte blocks, ",
                  journal::PolicyName(i.policy), ", ", journal::ContentsName(i.contents), "): ");
  if (m.txns_pending == 0) {
    absl::StrAppend(out, "no pending transaction\n");
    return;
  }
  absl::StrAppend(out, Txns(m.txns_pending), " pending (", LsnRange(m), "), ",
                  Blocks(m.blocks_pending), ", ", HumanBytes(m.bytes_pending), "; target ");
  switch (m.state) {
    case MappingState::kRefused:
    case MappingState::kIoError:
      absl::StrAppend(out, "NOT OK (", recovery::ProblemName(m.problem), "): ", m.status.message(),
                      "\n");
      break;
    default:
      absl::StrAppend(out, m.target_path, " OK\n");
  }
}

}  // namespace

std::string ExitMeaning(Command c, int code, const Report* report) {
  switch (code) {
    case 0:
      if (c == Command::kStatus) {
        return report != nullptr && !NothingPending(*report)
                   ? "journal readable; recovery needed (pending transactions above)"
                   : "journal readable; nothing to recover";
      }
      if (report != nullptr && !report->journal_found) return "no journal: nothing to do";
      if (report != nullptr && NothingPending(*report)) return "nothing to do";
      if (c == Command::kReplay) return "every committed transaction is in its file";
      if (c == Command::kDryRun) return "replay would apply every committed transaction";
      return "every pending block in the files equals its newest committed version";
    case 1:
      if (c == Command::kStatus) return "journal damaged: a salvage keeps what is listed above";
      if (c == Command::kVerify) return "some blocks differ from the journal (listed above)";
      if (c == Command::kDryRun) {
        return "replay would discard data or find unrepairable blocks (listed above)";
      }
      return "replayed, but data was discarded or cannot be repaired (listed above)";
    case 2:
      return "refused: nothing was written to the refused files; fix the cause and rerun";
    case 3:
      return "I/O error: the journal keeps every transaction not yet applied; safe to rerun";
  }
  return "unexpected exit code";
}

std::string RenderText(Command c, const Report& r, int code) {
  std::string out;
  if (!r.journal_found) {
    absl::StrAppend(&out, "umap-recover: no journal at ", r.journal_dir, "\n");
  } else {
    uint64_t pending_mappings = 0;
    for (const MappingReport& m : r.mappings) pending_mappings += m.txns_pending > 0;
    absl::StrAppend(&out, "umap-recover: journal ", r.journal_dir, " (", CommandName(c), "): ",
                    Txns(r.pending_txns), " pending in ", pending_mappings, " of ",
                    r.mappings.size(), r.mappings.size() == 1 ? " mapping" : " mappings", "; ",
                    r.staged_blocks, " uncommitted staged blocks (", HumanBytes(r.staged_bytes),
                    ")\n");
    for (const MappingReport& m : r.mappings) {
      if (c == Command::kStatus) {
        StatusMappingLine(m, &out);
      } else {
        MappingLine(c, m, &out);
      }
    }
    if (!r.journal_status.ok()) {
      absl::StrAppend(&out, "journal error: ", r.journal_status.message(), "\n");
    }
    if (!r.salvaged.ok()) {
      absl::StrAppend(&out, "salvaged: ", r.salvaged.message(), "\n");
    }
  }
  absl::StrAppend(&out, "result: exit ", code, ": ", ExitMeaning(c, code, &r), " (",
                  Seconds(r.duration_micros), ")\n");
  return out;
}

std::string RenderErrorText(Command c, const std::string& journal, const absl::Status& error,
                            int code) {
  return absl::StrCat("umap-recover: journal ", journal, " (", CommandName(c),
                      "): ", absl::StatusCodeToString(error.code()), ": ", error.message(),
                      "\nresult: exit ", code, ": ", ExitMeaning(c, code, nullptr), "\n");
}

namespace {

void Header(JsonWriter& w, Command c, const std::string& journal, int code,
            const Report* report) {
  w.Field("tool", "umap-recover");
  w.Field("schema", uint64_t{1});
  w.Field("command", CommandName(c));
  w.Field("journal", journal);
  w.Field("exit_code", static_cast<uint64_t>(code));
  w.Field("result", ExitMeaning(c, code, report));
}

void StatusField(JsonWriter& w, absl::string_view key, const absl::Status& s) {
  w.Key(key);
  if (s.ok()) {
    w.Null();
    return;
  }
  w.BeginObject();
  w.Field("code", absl::StatusCodeToString(s.code()));
  w.Field("message", s.message());
  w.EndObject();
}

void TimingsField(JsonWriter& w, const Report::Timings& t) {
  w.Key("timings_us");
  w.BeginObject();
  w.Field("open", t.open);
  w.Field("scan", t.scan);
  w.Field("read", t.read);
  w.Field("write", t.write);
  w.Field("sync", t.sync);
  w.Field("mark", t.mark);
  w.Field("close", t.close);
  w.EndObject();
}

}  // namespace

std::string RenderJson(Command c, const Report& r, int code) {
  JsonWriter w;
  w.BeginObject();
  Header(w, c, r.journal_dir, code, &r);
  StatusField(w, "error", absl::OkStatus());
  w.Field("journal_found", r.journal_found);
  w.Field("pending_transactions", r.pending_txns);
  w.Field("staged_blocks", r.staged_blocks);
  w.Field("staged_bytes", r.staged_bytes);
  w.Field("duration_us", r.duration_micros);
  // Where a run's time went; a status run does none of it (and its report stays the same
  // from run to run but for duration_us).
  if (c != Command::kStatus) {
    TimingsField(w, r.timings);
    w.Field("peak_rss_bytes", r.peak_rss_bytes);
  }
  StatusField(w, "journal_error", r.journal_status);
  StatusField(w, "salvaged", r.salvaged);
  w.Key("mappings");
  w.BeginArray();
  for (const MappingReport& m : r.mappings) {
    w.BeginObject();
    w.Field("id", m.mapping.id);
    w.Field("path", m.mapping.file.path);
    w.Field("target", m.target_path);
    w.Field("relocated", m.relocated);
    w.Field("device", m.mapping.file.device);
    w.Field("inode", m.mapping.file.inode);
    w.Field("size", m.mapping.file.size);
    w.Field("block_size", static_cast<uint64_t>(m.mapping.block_size));
    w.Field("policy", journal::PolicyName(m.mapping.policy));
    w.Field("contents", journal::ContentsName(m.mapping.contents));
    w.Field("state", recovery::MappingStateName(m.state));
    w.Field("problem", recovery::ProblemName(m.problem));
    w.Field("message", m.status.message());
    w.Field("first_lsn", m.first_lsn);
    w.Field("last_lsn", m.last_lsn);
    w.Key("transactions");
    w.BeginObject();
    w.Field("pending", m.txns_pending);
    w.Field("replayed", m.txns_replayed);
    w.Field("discarded", m.txns_discarded);
    w.EndObject();
    w.Key("blocks");
    w.BeginObject();
    w.Field("pending", m.blocks_pending);
    w.Field("to_write", m.blocks_to_write);
    w.Field("written", m.blocks_written);
    w.Field("verified", m.blocks_verified);
    w.Field("not_applied", m.blocks_not_applied);
    w.Field("torn", m.blocks_torn);
    w.Field("not_applied_or_torn", m.blocks_not_applied_or_torn);
    w.Field("staged_discarded", m.staged_discarded);
    w.EndObject();
    w.Key("bytes");
    w.BeginObject();
    w.Field("pending", m.bytes_pending);
    w.Field("to_write", m.bytes_to_write);
    w.Field("written", m.bytes_written);
    w.EndObject();
    w.Field("unregistered", m.unregistered);
    w.Field("duration_us", m.duration_micros);
    w.Key("findings");
    w.BeginArray();
    for (const BlockFinding& f : m.findings) {
      w.BeginObject();
      w.Field("class", recovery::BlockClassName(f.cls));
      w.Field("lsn", f.lsn);
      w.Field("block", f.block);
      w.Field("offset", f.offset);
      w.Field("length", static_cast<uint64_t>(f.length));
      w.Field("journal_crc", static_cast<uint64_t>(f.expected_crc));
      w.Field("file_crc", static_cast<uint64_t>(f.found_crc));
      w.Field("matched_lsn", f.matched_lsn);
      w.Field("repairable", f.repairable);
      w.EndObject();
    }
    w.EndArray();
    w.Field("findings_omitted", m.findings_omitted);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.str() + "\n";
}

std::string RenderErrorJson(Command c, const std::string& journal, const absl::Status& error,
                            int code) {
  JsonWriter w;
  w.BeginObject();
  Header(w, c, journal, code, nullptr);
  StatusField(w, "error", error);
  w.Key("mappings");
  w.BeginArray();
  w.EndArray();
  w.EndObject();
  return w.str() + "\n";
}

}  // namespace umap::tools
