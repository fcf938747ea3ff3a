#include "journal/integrity.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/coding.h"
#include "base/posix_error.h"
#include "journal/commit_mark.h"
#include "journal/format.h"
#include "journal/rocksdb_status.h"
#include "journal/wal_damage.h"
#include "rocksdb/db.h"
#include "rocksdb/file_system.h"
#include "rocksdb/iterator.h"
#include "rocksdb/metadata.h"
#include "rocksdb/options.h"
#include "rocksdb/snapshot.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/wal_filter.h"
#include "rocksdb/write_batch.h"

namespace umap::journal {
namespace {

// What RocksDB would recover, seen by a read-only open whose WalFilter records every WAL
// record it is handed and replays none of them (so the open builds no memtable and the
// database's last sequence number stays the one its MANIFEST records).
struct Census {
  uint64_t first_live_wal = 0;   // WAL files numbered below are obsolete
  uint64_t manifest_sequence = 0;
  struct Batch {
    uint64_t wal = 0;
    uint64_t sequence = 0;
    uint64_t count = 0;
  };
  std::vector<Batch> batches;   // in replay order
  std::set<std::string> live_tables;  // names of the table files the MANIFEST names
  uint64_t last_lsn = 0;              // the highest LSN committed in what RocksDB would recover
  uint32_t format_version = 0;        // of the format record (in a table or the WAL); 0: none
};

// The version in a format record's value (journal/format.h), or 0.
uint32_t FormatVersionOf(absl::string_view value) {
  absl::StatusOr<FormatRecord> f = DecodeFormat(FormatKey(), value);
  return f.ok() ? f->version : 0;
}

class CensusFilter : public rocksdb::WalFilter {
 public:
  explicit CensusFilter(Census* census) : census_(census) {}
  // RocksDB skips the WAL files numbered below the smallest log number of its column
  // families (db_impl_open.cc, RecoverLogFiles, without two-phase commit).
  void ColumnFamilyLogNumberMap(const std::map<uint32_t, uint64_t>& cf_lognumber_map,
                                const std::map<std::string, uint32_t>&) override {
    bool first = true;
    for (const auto& [cf, number] : cf_lognumber_map) {
      census_->first_live_wal = first ? number : std::min(census_->first_live_wal, number);
      first = false;
    }
  }
  WalProcessingOption LogRecordFound(unsigned long long log_number, const std::string&,
                                     const rocksdb::WriteBatch& batch, rocksdb::WriteBatch*,
                                     bool*) override {
    // A WriteBatch starts with its sequence number, a fixed64 (RocksDB's write_batch.cc).
    std::string_view rep(batch.Data());
    uint64_t sequence = 0;
    if (GetFixed64(&rep, &sequence)) {
      census_->batches.push_back({log_number, sequence, batch.Count()});
    }
    for (uint64_t lsn : CommitsIn(batch.Data())) {
      census_->last_lsn = std::max(census_->last_lsn, lsn);
    }
    // The format record of a journal whose creation is still in its log.
    class FormatPut : public rocksdb::WriteBatch::Handler {
     public:
      explicit FormatPut(uint32_t* version) : version_(version) {}
      rocksdb::Status PutCF(uint32_t, const rocksdb::Slice& key,
                            const rocksdb::Slice& value) override {
        if (key == rocksdb::Slice(FormatKey())) {
          *version_ = FormatVersionOf(absl::string_view(value.data(), value.size()));
        }
        return rocksdb::Status::OK();
      }
      rocksdb::Status DeleteCF(uint32_t, const rocksdb::Slice&) override {
        return rocksdb::Status::OK();
      }

     private:
      uint32_t* version_;
    };
    if (census_->format_version == 0) {
      FormatPut handler(&census_->format_version);
      rocksdb::WriteBatch copy(batch.Data());
      copy.Iterate(&handler).PermitUncheckedError();
    }
    return WalProcessingOption::kIgnoreCurrentRecord;
  }
  const char* Name() const override { return "umap-journal-census"; }

 private:
  Census* census_;
};

absl::StatusOr<Census> TakeCensus(const rocksdb::Options& options, const std::string& dir) {
  Census census;
  CensusFilter filter(&census);
  rocksdb::Options o = options;
  o.wal_filter = &filter;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(o, dir, &db);
  if (!s.ok()) return FromRocksDb(s, absl::StrCat("open (read-only) journal ", dir));
  std::unique_ptr<rocksdb::DB> owned(db);
  census.manifest_sequence = db->GetLatestSequenceNumber();
  std::vector<rocksdb::LiveFileMetaData> live;
  db->GetLiveFilesMetaData(&live);
  for (const rocksdb::LiveFileMetaData& f : live) census.live_tables.insert(f.relative_filename);
  if (std::string v; db->Get(rocksdb::ReadOptions(), FormatKey(), &v).ok()) {
    census.format_version = FormatVersionOf(v);
  }
  // The newest transaction header in the tables (the WAL's records were not replayed).
  const std::string headers_end = TagEnd(RecordTag::kTxnHeader);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  it->SeekForPrev(headers_end);
  if (it->Valid() && it->key().size() == 9 &&
      it->key()[0] == static_cast<char>(RecordTag::kTxnHeader)) {
    std::string_view k(it->key().data() + 1, 8);
    uint64_t lsn = 0;
    if (GetBigEndian64(&k, &lsn)) census.last_lsn = std::max(census.last_lsn, lsn);
  }
  if (!it->status().ok()) return FromRocksDb(it->status(), absl::StrCat("read journal ", dir));
  return census;
}

absl::Status Lost(const std::string& dir, absl::string_view what) {
  return WithErrno(absl::DataLossError(absl::StrCat("journal ", dir, " is damaged: ", what,
                                                    "; acknowledged commits may be lost")),
                   EIO);
}

// The sequence numbers of the records RocksDB replays must continue from its MANIFEST's and
// from each other (each record takes `count` numbers): a gap is writes in no file it reads.
absl::Status CheckSequence(const std::string& dir, const Census& census, uint64_t* last) {
  uint64_t next = census.manifest_sequence + 1;
  for (const Census::Batch& b : census.batches) {
    if (b.sequence > next) {
      return Lost(dir, absl::StrCat("the writes numbered ", next, "..", b.sequence - 1,
                                    " are in no file RocksDB reads (its MANIFEST ends at ",
                                    census.manifest_sequence, ", WAL ", b.wal,
                                    " continues at ", b.sequence,
                                    "): a WAL file is missing or the MANIFEST lost an edit"));
    }
    next = std::max(next, b.sequence + b.count);
  }
  *last = next - 1;
  return absl::OkStatus();
}

// A snapshot at a chosen sequence number, for reading a table file as of that number.
class SequenceSnapshot : public rocksdb::Snapshot {
 public:
  explicit SequenceSnapshot(rocksdb::SequenceNumber s) : s_(s) {}
  ~SequenceSnapshot() override = default;
  rocksdb::SequenceNumber GetSequenceNumber() const override { return s_; }
  int64_t GetUnixTime() const override { return 0; }
  uint64_t GetTimestamp() const override { return 0; }

 private:
  rocksdb::SequenceNumber s_;
};

// The LSNs of the transaction headers in a table file, as of `snapshot` (null: newest).
absl::StatusOr<std::set<uint64_t>> TableCommits(rocksdb::SstFileReader& reader,
                                                const rocksdb::Snapshot* snapshot) {
  const std::string begin = TagBegin(RecordTag::kTxnHeader), end = TagEnd(RecordTag::kTxnHeader);
  rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(ro));
  std::set<uint64_t> lsns;
  for (it->Seek(begin); it->Valid(); it->Next()) {
    std::string_view k(it->key().data(), it->key().size());
    k.remove_prefix(1);
    uint64_t lsn = 0;
    if (GetBigEndian64(&k, &lsn)) lsns.insert(lsn);
  }
  if (!it->status().ok()) return FromRocksDb(it->status(), "read table file");
  return lsns;
}

// A complete table file that the MANIFEST does not name is normal after a crash during a
// flush or a compaction (its edit never reached the MANIFEST; its contents are still in the
// WAL or in the compaction's inputs, so nothing in it is newer than what RocksDB recovers).
// One that holds commits newer than every write RocksDB recovers is a flush whose MANIFEST
// edit was lost after its WAL was deleted.
absl::Status CheckUnnamedTables(const rocksdb::Options& options, const std::string& dir,
                                const std::vector<std::string>& children, const Census& census,
                                uint64_t last_sequence) {
  for (const std::string& name : children) {
    if (!absl::EndsWith(name, ".sst") || census.live_tables.contains(name)) continue;
    rocksdb::SstFileReader reader(options);
    if (!reader.Open(absl::StrCat(dir, "/", name)).ok()) continue;  // incomplete: never named
    SequenceSnapshot recovered(last_sequence);
    absl::StatusOr<std::set<uint64_t>> newest = TableCommits(reader, nullptr);
    absl::StatusOr<std::set<uint64_t>> old = TableCommits(reader, &recovered);
    if (!newest.ok() || !old.ok()) continue;  // unreadable: RocksDB never relied on it
    std::vector<uint64_t> lost;
    std::set_difference(newest->begin(), newest->end(), old->begin(), old->end(),
                        std::back_inserter(lost));
    if (!lost.empty()) {
      return Lost(dir, absl::StrCat("table file ", name, " holds ", lost.size(),
                                    lost.size() == 1 ? " commit" : " commits", " (LSN ", lost.front(), "..", lost.back(),
                                    ") newer than anything RocksDB would recover, and its "
                                    "MANIFEST does not name it (it lost an edit)"));
    }
  }
  return absl::OkStatus();
}

// CURRENT names the MANIFEST RocksDB opens ("MANIFEST-NNNNNN\n"): one that names nothing
// there (a changed byte, a cut) would fail the open as a missing file, an I/O error that a
// rerun cannot fix; it is damage.
absl::Status CheckCurrent(rocksdb::FileSystem& fs, const std::string& dir,
                          const std::vector<std::string>& children) {
  std::string current;
  rocksdb::IOStatus io = rocksdb::ReadFileToString(&fs, absl::StrCat(dir, "/CURRENT"), &current);
  if (!io.ok()) return FromRocksDb(io, absl::StrCat("read ", dir, "/CURRENT"));
  absl::string_view name(current);
  const bool well_formed = absl::ConsumeSuffix(&name, "\n") &&
                           absl::StartsWith(name, "MANIFEST-") && name.size() > 9 &&
                           std::all_of(name.begin() + 9, name.end(),
                                       [](char c) { return c >= '0' && c <= '9'; });
  if (!well_formed) {
    return Lost(dir, absl::StrCat("its CURRENT file does not name a MANIFEST (it holds ",
                                  current.size(), " bytes that are not \"MANIFEST-<number>\")"));
  }
  if (std::find(children.begin(), children.end(), std::string(name)) == children.end()) {
    return Lost(dir, absl::StrCat("its CURRENT file names ", name, ", which is not there"));
  }
  return absl::OkStatus();
}

// The newest live WAL file and where its readable records end, for a message.
std::string DescribeWalTail(rocksdb::FileSystem& fs, const std::string& dir,
                            const std::vector<std::string>& children, uint64_t first_live_wal) {
  std::string newest;
  uint64_t newest_number = 0;
  for (const std::string& name : children) {
    uint64_t number = 0;
    if (!absl::EndsWith(name, ".log") ||
        !absl::SimpleAtoi(absl::string_view(name).substr(0, name.size() - 4), &number) ||
        number < first_live_wal || (!newest.empty() && number < newest_number)) {
      continue;
    }
    newest = name, newest_number = number;
  }
  if (newest.empty()) return "no write-ahead log file is left";
  const std::string path = absl::StrCat(dir, "/", newest);
  uint64_t size = 0;
  fs.GetFileSize(path, rocksdb::IOOptions(), &size, nullptr).PermitUncheckedError();
  absl::StatusOr<uint64_t> end = WalRecordsEnd(fs, path);
  return absl::StrCat(
      "its newest write-ahead log, ", path, ", has ", size, " bytes",
      end.ok() ? absl::StrCat(" and its readable records end at byte ", *end) : std::string());
}

// The last acknowledged commit (journal/commit_mark.h) must be in what RocksDB recovers: a
// log cut short anywhere, or one that lost its newest file, looks like a torn tail to
// RocksDB and to the WAL scan alike, and only the mark kept beside the log tells.
absl::Status CheckCommitMark(rocksdb::FileSystem& fs, const std::string& dir,
                             const std::vector<std::string>& children, const Census& census,
                             uint64_t last_sequence) {
  absl::StatusOr<std::optional<CommitMark::Mark>> mark = CommitMark::Read(fs, dir);
  if (!mark.ok()) return mark.status();
  if (!mark->has_value()) {
    // Created before the database since format 2: deleted, and with it the proof of how far
    // the acknowledged commits go.
    if (census.format_version < kFormatWithBirth) return absl::OkStatus();
    return Lost(dir, absl::StrCat(dir, "/", CommitMark::kFileName,
                                  ", the record of its last acknowledged commit, is missing: "
                                  "whether its write-ahead log lost commits cannot be told"));
  }
  if ((*mark)->sequence <= last_sequence) return absl::OkStatus();
  const CommitMark::Mark& m = **mark;
  const std::string lost = census.last_lsn < m.lsn
                               ? absl::StrCat("LSN ", census.last_lsn + 1, "..", m.lsn)
                               : absl::StrCat("the commits written after write ", last_sequence,
                                              " (up to LSN ", m.lsn, ")");
  return WithErrno(
      absl::DataLossError(absl::StrCat(
          "journal ", dir, " is damaged: its write-ahead log was cut short or lost records: ",
          "the last acknowledged commit is LSN ", m.lsn, " (write ", m.sequence, ", recorded in ",
          dir, "/", CommitMark::kFileName, "), but its files end at write ", last_sequence,
          " (last commit found: LSN ", census.last_lsn, "); ",
          DescribeWalTail(fs, dir, children, census.first_live_wal),
          ". Acknowledged commits are lost: ", lost)),
      EIO);
}

}  // namespace

absl::Status CheckJournalIntegrity(rocksdb::FileSystem& fs, const rocksdb::Options& options,
                                   const std::string& dir) {
  std::vector<std::string> children;
  rocksdb::IOStatus io = fs.GetChildren(dir, rocksdb::IOOptions(), &children, nullptr);
  if (io.IsNotFound() || io.IsPathNotFound()) return absl::OkStatus();  // a new journal
  if (!io.ok()) return FromRocksDb(io, absl::StrCat("list journal ", dir));
  const bool has_current = std::find(children.begin(), children.end(), "CURRENT") != children.end();
  if (!has_current) {
    // RocksDB creates a database's first MANIFEST, then CURRENT: a MANIFEST alone (and an
    // empty log) is a creation that failed, before anything was written. A table file or a
    // log with bytes is data that an open would lose (it starts an empty database).
    for (const std::string& name : children) {
      if (!absl::EndsWith(name, ".sst") && !absl::EndsWith(name, ".log")) continue;
      uint64_t size = 0;
      io = fs.GetFileSize(absl::StrCat(dir, "/", name), rocksdb::IOOptions(), &size, nullptr);
      if (!io.ok() && !io.IsNotFound()) return FromRocksDb(io, absl::StrCat("stat ", name));
      if (size > 0 && absl::EndsWith(name, ".log")) {
        // A WAL is written into zeros (wal_zero_fill.h): zeros alone are no data.
        absl::StatusOr<bool> zeros = AllZeros(fs, absl::StrCat(dir, "/", name));
        if (!zeros.ok()) return zeros.status();
        if (*zeros) size = 0;
      }
      if (size > 0) {
        return Lost(dir, absl::StrCat("its CURRENT file is missing while ", name,
                                      " holds data (RocksDB would start an empty database)"));
      }
    }
    // Every file of the database gone, but a commit was acknowledged: not a new journal.
    absl::StatusOr<std::optional<CommitMark::Mark>> mark = CommitMark::Read(fs, dir);
    if (!mark.ok()) return mark.status();
    if (mark->has_value() && (*mark)->sequence > 0) {
      return Lost(dir, absl::StrCat("its CURRENT file is missing, and ", CommitMark::kFileName,
                                    " records acknowledged commits up to LSN ", (*mark)->lsn,
                                    " that no file of it holds"));
    }
    return absl::OkStatus();  // a new journal, or one whose creation failed
  }
  if (absl::Status s = CheckCurrent(fs, dir, children); !s.ok()) return s;
  absl::StatusOr<Census> census = TakeCensus(options, dir);
  if (!census.ok()) return census.status();
  absl::StatusOr<std::optional<WalDamage>> damage =
      FindWalDamage(fs, dir, census->first_live_wal);
  if (!damage.ok()) return damage.status();
  if (damage->has_value()) return DamagedWalError(dir, **damage);
  uint64_t last_sequence = 0;
  if (absl::Status s = CheckSequence(dir, *census, &last_sequence); !s.ok()) return s;
  if (absl::Status s = CheckUnnamedTables(options, dir, children, *census, last_sequence);
      !s.ok()) {
    return s;
  }
  return CheckCommitMark(fs, dir, children, *census, last_sequence);
}

}  // namespace umap::journal
