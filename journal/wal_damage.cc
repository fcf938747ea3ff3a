#include "journal/wal_damage.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/coding.h"
#include "base/crc32c.h"
#include "base/posix_error.h"
#include "journal/format.h"
#include "journal/rocksdb_status.h"
#include "rocksdb/file_system.h"
#include "rocksdb/write_batch.h"

namespace umap::journal {
namespace {

// RocksDB's log format (db/log_format.h of RocksDB; stable since LevelDB): the file is a
// sequence of 32 KiB blocks; a physical record is a header (masked CRC32C u32, payload
// length u16, type u8; the recyclable types add the log number u32) and its payload, and
// never crosses a block; fewer than a header's bytes at the end of a block are padding. The
// CRC covers the type byte, the log number of a recyclable record, and the payload. A
// logical record is one full fragment, or first, middle..., last.
constexpr size_t kBlockSize = 32768;
constexpr size_t kHeaderSize = 7;
constexpr size_t kRecyclableHeaderSize = 11;
enum Kind : uint8_t { kFull = 1, kFirst = 2, kMiddle = 3, kLast = 4 };
constexpr uint8_t kRecyclableOffset = 4;  // types 5..8 are the recyclable 1..4
constexpr uint32_t kMaskDelta = 0xa282ead8u;

uint32_t Unmask(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

uint32_t Fixed32At(const char* p) {
  std::string_view in(p, 4);
  uint32_t v = 0;
  GetFixed32(&in, &v);
  return v;
}

struct Fragment {
  Kind kind = kFull;
  size_t size = 0;  // header and payload
  absl::string_view payload;
};

// The physical record at `pos` if it is intact: a known type, its length within its block
// and the file, a matching CRC (and, if recyclable, this file's log number).
std::optional<Fragment> FragmentAt(absl::string_view file, size_t pos, uint64_t log_number) {
  const size_t block_end = std::min(file.size(), (pos / kBlockSize + 1) * kBlockSize);
  if (block_end - pos < kHeaderSize) return std::nullopt;
  const char* h = file.data() + pos;
  const uint8_t type = static_cast<uint8_t>(h[6]);
  const size_t length = static_cast<uint8_t>(h[4]) | (static_cast<size_t>(static_cast<uint8_t>(h[5])) << 8);
  size_t header = kHeaderSize;
  uint8_t kind = type;
  if (type > kLast + kRecyclableOffset || type < kFull) return std::nullopt;
  if (type > kLast) {
    header = kRecyclableHeaderSize;
    kind = type - kRecyclableOffset;
  }
  if (block_end - pos < header + length) return std::nullopt;
  if (header == kRecyclableHeaderSize && Fixed32At(h + 7) != static_cast<uint32_t>(log_number)) {
    return std::nullopt;  // a record of an earlier use of a recycled file
  }
  uint32_t crc = crc32c::Value(h + 6, header - 6);
  crc = crc32c::Extend(crc, h + header, length);
  if (crc != Unmask(Fixed32At(h))) return std::nullopt;
  return Fragment{static_cast<Kind>(kind), header + length,
                  absl::string_view(h + header, length)};
}

// Where a sequential parse stopped.
struct Stop {
  bool damaged = false;
  size_t record_begin = 0;  // the first byte of the logical record that could not be read
  size_t resume = 0;        // where intact records may start again: past a fragment that is
                            // not intact, at an intact one that cannot follow, the file's size
                            // when it ends inside a record
};

// Parses `file` from `pos` (a record boundary) until it ends or a fragment is not intact,
// handing every whole logical record to `record`. A middle or last fragment without its
// first (the parse began after damage) is counted in *orphans and skipped.
Stop Parse(absl::string_view file, size_t pos, uint64_t log_number, uint64_t* fragments,
           uint64_t* orphans, absl::FunctionRef<void(absl::string_view)> record) {
  std::string assembled;
  bool in_record = false;
  size_t record_begin = pos;
  while (pos < file.size()) {
    const size_t left_in_block = kBlockSize - pos % kBlockSize;
    if (left_in_block < kHeaderSize) {  // block padding
      pos += left_in_block;
      continue;
    }
    std::optional<Fragment> f = FragmentAt(file, pos, log_number);
    if (!f.has_value()) return Stop{true, in_record ? record_begin : pos, pos + 1};
    ++*fragments;
    switch (f->kind) {
      case kFull:
        if (in_record) return Stop{true, record_begin, pos};
        record(f->payload);
        break;
      case kFirst:
        if (in_record) return Stop{true, record_begin, pos};
        in_record = true;
        record_begin = pos;
        assembled.assign(f->payload.data(), f->payload.size());
        break;
      case kMiddle:
      case kLast:
        if (!in_record) {
          ++*orphans;
          break;
        }
        assembled.append(f->payload.data(), f->payload.size());
        if (f->kind == kLast) {
          in_record = false;
          record(assembled);
        }
        break;
    }
    pos += f->size;
  }
  if (in_record) return Stop{true, record_begin, file.size()};  // ends inside a record: torn
  return Stop{false, pos, pos};
}

// The first position at or after `from` where an intact fragment starts.
std::optional<size_t> NextIntact(absl::string_view file, size_t from, uint64_t log_number) {
  for (size_t p = from; p + kHeaderSize <= file.size(); ++p) {
    if (FragmentAt(file, p, log_number).has_value()) return p;
  }
  return std::nullopt;
}

// What a WAL record (one WriteBatch) holds, as far as damage detection needs it.
struct RecordInfo {
  // Written with sync=true: a commit ('T'), a mapping registration ('M') or the format
  // record ('F'). RocksDB never puts a sync write into a write group led by a write without
  // sync, so a merged group with one of these was synced.
  bool synced = false;
  std::vector<uint64_t> lsns;  // the transactions it commits
};

RecordInfo Inspect(absl::string_view record) {
  class Handler : public rocksdb::WriteBatch::Handler {
   public:
    explicit Handler(RecordInfo* info) : info_(info) {}
    rocksdb::Status PutCF(uint32_t, const rocksdb::Slice& key, const rocksdb::Slice&) override {
      std::string_view k(key.data(), key.size());
      const char tag = k.empty() ? 0 : k[0];
      if (tag == static_cast<char>(RecordTag::kTxnHeader) && k.size() == 9) {
        k.remove_prefix(1);
        uint64_t lsn = 0;
        if (GetBigEndian64(&k, &lsn)) info_->lsns.push_back(lsn);
        info_->synced = true;
      } else if (tag == static_cast<char>(RecordTag::kMapping) ||
                 tag == static_cast<char>(RecordTag::kFormat)) {
        info_->synced = true;
      }
      return rocksdb::Status::OK();
    }
    rocksdb::Status DeleteCF(uint32_t, const rocksdb::Slice&) override { return Ok(); }
    rocksdb::Status SingleDeleteCF(uint32_t, const rocksdb::Slice&) override { return Ok(); }
    rocksdb::Status DeleteRangeCF(uint32_t, const rocksdb::Slice&,
                                  const rocksdb::Slice&) override {
      return Ok();
    }

   private:
    static rocksdb::Status Ok() { return rocksdb::Status::OK(); }
    RecordInfo* info_;
  };
  RecordInfo info;
  rocksdb::WriteBatch batch{std::string(record)};
  Handler handler(&info);
  // A record that passed its CRC but is not a well-formed batch still counts as intact.
  batch.Iterate(&handler).PermitUncheckedError();
  return info;
}

absl::StatusOr<std::string> ReadWhole(rocksdb::FileSystem& fs, const std::string& path) {
  std::unique_ptr<rocksdb::FSSequentialFile> file;
  rocksdb::IOStatus s = fs.NewSequentialFile(path, rocksdb::FileOptions(), &file, nullptr);
  if (!s.ok()) return FromRocksDb(s, absl::StrCat("open ", path, " to check it"));
  std::string data;
  std::vector<char> buf(1 << 20);
  for (;;) {
    rocksdb::Slice got;
    s = file->Read(buf.size(), rocksdb::IOOptions(), &got, buf.data(), nullptr);
    if (!s.ok()) return FromRocksDb(s, absl::StrCat("read ", path, " to check it"));
    if (got.empty()) break;
    data.append(got.data(), got.size());
  }
  return data;
}

// The WAL files of `dir` as (number, name), in log order.
absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> WalFiles(rocksdb::FileSystem& fs,
                                                                      const std::string& dir) {
  std::vector<std::string> children;
  rocksdb::IOStatus s = fs.GetChildren(dir, rocksdb::IOOptions(), &children, nullptr);
  if (s.IsNotFound() || s.IsPathNotFound()) children.clear();  // RocksDB's open will say so
  else if (!s.ok()) return FromRocksDb(s, absl::StrCat("list journal ", dir));
  std::vector<std::pair<uint64_t, std::string>> wals;
  for (const std::string& name : children) {
    absl::string_view n(name);
    uint64_t number = 0;
    if (n.size() > 4 && n.substr(n.size() - 4) == ".log" &&
        absl::SimpleAtoi(n.substr(0, n.size() - 4), &number)) {
      wals.emplace_back(number, name);
    }
  }
  std::sort(wals.begin(), wals.end());
  return wals;
}

// What the parse after a damage finds.
struct After {
  std::optional<size_t> first_intact;  // in the damaged file
  uint64_t records = 0, fragments = 0, orphans = 0;
  std::vector<uint64_t> lsns;
  // `fragments` when the first synced record after the damage was complete (0: none yet).
  uint64_t fragments_at_first_sync = 0;
  // An intact fragment follows a synced record: that record's sync had returned before the
  // next write began (RocksDB writes one write group at a time, and a synced write syncs
  // every earlier log file too), so every byte before it, the damaged ones included, was
  // durable. Without that proof the damage may be the unsynced tail of a power cut that the
  // disk persisted out of order: nothing after it was acknowledged.
  bool Proven() const {
    return fragments_at_first_sync > 0 && fragments > fragments_at_first_sync;
  }
};

// Parses `file` from `from` on, resynchronising after every damage.
void ScanAfter(absl::string_view file, size_t from, uint64_t log_number, After* after) {
  for (;;) {
    std::optional<size_t> p = NextIntact(file, from, log_number);
    if (!p.has_value()) return;
    if (!after->first_intact.has_value()) after->first_intact = p;
    Stop stop = Parse(file, *p, log_number, &after->fragments, &after->orphans,
                      [&](absl::string_view record) {
                        ++after->records;
                        RecordInfo info = Inspect(record);
                        after->lsns.insert(after->lsns.end(), info.lsns.begin(),
                                           info.lsns.end());
                        if (info.synced && after->fragments_at_first_sync == 0) {
                          after->fragments_at_first_sync = after->fragments;
                        }
                      });
    if (!stop.damaged) return;
    from = stop.resume;
  }
}

}  // namespace

absl::StatusOr<std::optional<WalDamage>> FindWalDamage(rocksdb::FileSystem& fs,
                                                       const std::string& dir,
                                                       uint64_t min_wal_number) {
  std::vector<std::pair<uint64_t, std::string>> wals;
  {
    absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> listed = WalFiles(fs, dir);
    if (!listed.ok()) return listed.status();
    wals = *std::move(listed);
  }
  std::optional<WalDamage> damage;
  After after;
  uint64_t last_lsn_before = 0;
  for (const auto& [number, name] : wals) {
    if (number < min_wal_number) continue;
    absl::StatusOr<std::string> bytes = ReadWhole(fs, absl::StrCat(dir, "/", name));
    if (!bytes.ok()) return bytes.status();
    if (damage.has_value()) {  // a later file: every intact record in it follows the damage
      ScanAfter(*bytes, 0, number, &after);
      continue;
    }
    uint64_t fragments = 0, orphans = 0;
    Stop stop = Parse(*bytes, 0, number, &fragments, &orphans, [&](absl::string_view record) {
      for (uint64_t lsn : Inspect(record).lsns) last_lsn_before = std::max(last_lsn_before, lsn);
    });
    if (!stop.damaged) continue;
    damage = WalDamage{};
    damage->file = name;
    damage->offset = stop.record_begin;
    damage->end = bytes->size();
    ScanAfter(*bytes, stop.resume, number, &after);
    if (after.first_intact.has_value()) damage->end = *after.first_intact;
  }
  if (!damage.has_value() || !after.Proven()) return std::optional<WalDamage>();
  damage->records_after = after.records;
  damage->fragments_after = after.fragments;
  damage->commits_after = after.lsns.size();
  if (!after.lsns.empty()) {
    damage->first_lsn_after = *std::min_element(after.lsns.begin(), after.lsns.end());
    damage->last_lsn_after = *std::max_element(after.lsns.begin(), after.lsns.end());
  }
  damage->last_lsn_before = last_lsn_before;
  return damage;
}

absl::StatusOr<uint64_t> WalRecordsEnd(rocksdb::FileSystem& fs, const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadWhole(fs, path);
  if (!bytes.ok()) return bytes.status();
  absl::string_view name(path);
  if (size_t slash = name.rfind('/'); slash != absl::string_view::npos) {
    name.remove_prefix(slash + 1);
  }
  uint64_t number = 0;
  if (!absl::ConsumeSuffix(&name, ".log") || !absl::SimpleAtoi(name, &number)) {
    return WithErrno(absl::InvalidArgumentError(absl::StrCat(path, " is not a WAL file")),
                     EINVAL);
  }
  uint64_t fragments = 0, orphans = 0;
  return Parse(*bytes, 0, number, &fragments, &orphans, [](absl::string_view) {}).record_begin;
}

std::vector<uint64_t> CommitsIn(absl::string_view record) { return Inspect(record).lsns; }

absl::StatusOr<bool> AllZeros(rocksdb::FileSystem& fs, const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadWhole(fs, path);
  if (!bytes.ok()) return bytes.status();
  return bytes->find_first_not_of('\0') == std::string::npos;
}

std::string DescribeWalDamage(const WalDamage& d) {
  std::string s = absl::StrCat(d.file, " bytes ", d.offset, "..", d.end, " are unreadable, and ",
                               d.records_after, " intact records follow them");
  if (d.commits_after > 0) {
    absl::StrAppend(&s, " (", d.commits_after, " commits, LSN ", d.first_lsn_after, "..",
                    d.last_lsn_after, ")");
  }
  if (d.fragments_after > d.records_after) {
    absl::StrAppend(&s, d.records_after > 0 ? ", plus" : ", and",
                    " pieces of records whose start is unreadable");
  }
  return s;
}

absl::Status DamagedWalError(const std::string& dir, const WalDamage& d) {
  std::string lost;
  if (d.commits_after > 0) {
    absl::StrAppend(&lost, "LSN ", d.first_lsn_after, "..", d.last_lsn_after,
                    " after the damage");
  }
  absl::StrAppend(&lost, lost.empty() ? "" : ", and ", "any commit in the unreadable bytes",
                  d.last_lsn_before > 0 ? absl::StrCat(" (after LSN ", d.last_lsn_before, ")")
                                        : std::string());
  return WithErrno(
      absl::DataLossError(absl::StrCat(
          "journal ", dir, " is damaged: ", DescribeWalDamage(d),
          ". This is not the torn tail a crash leaves: RocksDB's recovery would keep only the "
          "records before the damage, so acknowledged commits may be lost (", lost, ")")),
      EIO);
}

}  // namespace umap::journal
