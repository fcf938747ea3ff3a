#include "journal/commit_mark.h"

#include <cerrno>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/crc32c.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "journal/rocksdb_status.h"

namespace umap::journal {
namespace {

constexpr char kMagic[] = "umap-commit-mark 1";
constexpr uint64_t kSlotBytes = 4096;  // one page each: a torn page write spoils one slot
constexpr size_t kSlots = 2;
// What a publish writes: the first sector of its slot (the line is shorter; the rest of the
// slot stays zeros). Less than a page: the journal's write amplification counts it.
constexpr size_t kLineBytes = 512;

std::string EncodeSlot(uint64_t generation, const CommitMark::Mark& m) {
  std::string line =
      absl::StrCat(kMagic, " gen=", generation, " sequence=", m.sequence, " lsn=", m.lsn);
  absl::StrAppend(&line, absl::StrFormat(" crc=%08x\n", crc32c::Value(line.data(), line.size())));
  line.resize(kLineBytes, '\0');
  return line;
}

enum class SlotState { kEmpty, kIntact, kDamaged };

// One slot's bytes: empty (zeros), an intact line (its generation and mark), or damaged.
SlotState DecodeSlot(absl::string_view bytes, uint64_t* generation, CommitMark::Mark* m) {
  if (bytes.find_first_not_of('\0') == absl::string_view::npos) return SlotState::kEmpty;
  const size_t nl = bytes.find('\n');
  if (nl == absl::string_view::npos) return SlotState::kDamaged;
  const absl::string_view line = bytes.substr(0, nl);
  const size_t crc_at = line.rfind(" crc=");
  if (crc_at == absl::string_view::npos || !absl::StartsWith(line, kMagic)) {
    return SlotState::kDamaged;
  }
  uint32_t crc = 0;
  if (!absl::SimpleHexAtoi(line.substr(crc_at + 5), &crc) ||
      crc != crc32c::Value(line.data(), crc_at)) {
    return SlotState::kDamaged;
  }
  bool have_gen = false, have_seq = false, have_lsn = false;
  for (absl::string_view field : absl::StrSplit(line.substr(0, crc_at), ' ')) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos) continue;
    const absl::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "gen") have_gen = absl::SimpleAtoi(value, generation);
    if (key == "sequence") have_seq = absl::SimpleAtoi(value, &m->sequence);
    if (key == "lsn") have_lsn = absl::SimpleAtoi(value, &m->lsn);
  }
  return have_gen && have_seq && have_lsn ? SlotState::kIntact : SlotState::kDamaged;
}

// The newest slot's generation and mark. The slots are written alternately (generation g
// into slot g % 2), each line in one sector (a power cut leaves it old or new, never torn),
// so the only states a crash leaves are: slot 0 at generation 0 and slot 1 empty (nothing
// published yet), or both intact, generations one apart, each in its own slot. Anything
// else (a slot zeroed, cut or changed) is damage: falling back to the other slot would
// trust an older mark than the commits acknowledged since.
absl::StatusOr<std::optional<std::pair<uint64_t, CommitMark::Mark>>> Decode(
    const std::string& path, absl::string_view bytes) {
  SlotState state[kSlots];
  uint64_t generation[kSlots] = {};
  CommitMark::Mark mark[kSlots];
  for (size_t i = 0; i < kSlots; ++i) {
    state[i] = i * kSlotBytes < bytes.size()
                   ? DecodeSlot(bytes.substr(i * kSlotBytes, kSlotBytes), &generation[i], &mark[i])
                   : SlotState::kEmpty;
  }
  const bool fresh =
      state[0] == SlotState::kIntact && generation[0] == 0 && state[1] == SlotState::kEmpty;
  const bool paired = state[0] == SlotState::kIntact && state[1] == SlotState::kIntact &&
                      generation[0] % 2 == 0 && generation[1] % 2 == 1 &&
                      (generation[0] + 1 == generation[1] || generation[1] + 1 == generation[0]);
  if (!fresh && !paired) {
    return WithErrno(
        absl::DataLossError(absl::StrCat(
            path,
            " is damaged (no intact record of the last acknowledged commit): the "
            "journal cannot tell whether its write-ahead log lost acknowledged commits")),
        EIO);
  }
  const size_t newest = fresh || generation[0] > generation[1] ? 0 : 1;
  return std::optional<std::pair<uint64_t, CommitMark::Mark>>(
      std::make_pair(generation[newest], mark[newest]));
}

absl::StatusOr<std::string> ReadAll(rocksdb::FileSystem& fs, const std::string& path) {
  std::string bytes;
  rocksdb::IOStatus s = rocksdb::ReadFileToString(&fs, path, &bytes);
  if (!s.ok()) return FromRocksDb(s, absl::StrCat("read ", path));
  return bytes;
}

// A new mark file: the first slot says "nothing acknowledged" (generation 0), the second is
// empty; synced, and its directory entry synced.
absl::Status Create(rocksdb::FileSystem& fs, const std::string& dir, const std::string& path) {
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s = fs.NewWritableFile(path, rocksdb::FileOptions(), &file, nullptr);
  std::string bytes = EncodeSlot(0, CommitMark::Mark{});
  bytes.resize(kSlots * kSlotBytes, '\0');
  if (s.ok()) s = file->Append(bytes, rocksdb::IOOptions(), nullptr);
  if (s.ok()) s = file->Sync(rocksdb::IOOptions(), nullptr);
  if (s.ok()) s = file->Close(rocksdb::IOOptions(), nullptr);
  if (!s.ok()) return FromRocksDb(s, absl::StrCat("create ", path));
  std::unique_ptr<rocksdb::FSDirectory> d;
  s = fs.NewDirectory(dir, rocksdb::IOOptions(), &d, nullptr);
  if (s.ok()) s = d->Fsync(rocksdb::IOOptions(), nullptr);
  return FromRocksDb(s, absl::StrCat("sync directory ", dir, " after creating ", path));
}

}  // namespace

absl::StatusOr<std::optional<CommitMark::Mark>> CommitMark::Read(rocksdb::FileSystem& fs,
                                                                 const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kFileName);
  rocksdb::IOStatus exists = fs.FileExists(path, rocksdb::IOOptions(), nullptr);
  if (exists.IsNotFound()) return std::optional<Mark>();
  if (!exists.ok()) return FromRocksDb(exists, absl::StrCat("look for ", path));
  ASSIGN_OR_RETURN(const std::string bytes, ReadAll(fs, path));
  ASSIGN_OR_RETURN(auto best, Decode(path, bytes));
  return std::optional<Mark>(best->second);
}

absl::Status CommitMark::CreateIfMissing(rocksdb::FileSystem& fs, const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kFileName);
  rocksdb::IOStatus exists = fs.FileExists(path, rocksdb::IOOptions(), nullptr);
  if (exists.ok()) return absl::OkStatus();
  if (!exists.IsNotFound()) return FromRocksDb(exists, absl::StrCat("look for ", path));
  return Create(fs, dir, path);
}

absl::StatusOr<std::unique_ptr<CommitMark>> CommitMark::Open(rocksdb::FileSystem& fs,
                                                             const std::string& dir,
                                                             std::optional<Mark> reset) {
  const std::string path = absl::StrCat(dir, "/", kFileName);
  rocksdb::IOStatus exists = fs.FileExists(path, rocksdb::IOOptions(), nullptr);
  if (exists.IsNotFound()) {
    RETURN_IF_ERROR(Create(fs, dir, path));
  } else if (!exists.ok()) {
    return FromRocksDb(exists, absl::StrCat("look for ", path));
  }
  uint64_t generation = 0;
  Mark durable;
  absl::StatusOr<std::string> bytes = ReadAll(fs, path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<std::optional<std::pair<uint64_t, Mark>>> best = Decode(path, *bytes);
  if (best.ok()) std::tie(generation, durable) = **best;
  // A damaged file is only opened to be reset (a salvage); the integrity check refused it
  // otherwise.
  if (!best.ok() && !reset.has_value()) return best.status();
  std::unique_ptr<rocksdb::FSRandomRWFile> file;
  rocksdb::IOStatus s = fs.NewRandomRWFile(path, rocksdb::FileOptions(), &file, nullptr);
  if (!s.ok()) return FromRocksDb(s, absl::StrCat("open ", path));
  std::unique_ptr<CommitMark> mark(new CommitMark(path, std::move(file), generation, durable));
  if (reset.has_value()) {
    // Started over: generation 0 in slot 0, slot 1 empty (the state of a new file).
    rocksdb::IOStatus z = mark->file_->Write(kSlotBytes, std::string(kLineBytes, '\0'),
                                             rocksdb::IOOptions(), nullptr);
    if (!z.ok()) return FromRocksDb(z, absl::StrCat("reset ", path));
    RETURN_IF_ERROR(mark->WriteSlot(0, *reset));
    absl::MutexLock l(&mark->mu_);
    mark->generation_ = 0;
    mark->durable_ = *reset;
  }
  return mark;
}

absl::Status CommitMark::WriteSlot(uint64_t generation, const Mark& m) {
  const std::string slot = EncodeSlot(generation, m);
  rocksdb::IOStatus s =
      file_->Write((generation % kSlots) * kSlotBytes, slot, rocksdb::IOOptions(), nullptr);
  // fdatasync: the slot overwrites allocated bytes, so no metadata needs to follow.
  if (s.ok()) s = file_->Sync(rocksdb::IOOptions(), nullptr);
  return FromRocksDb(s, absl::StrCat("record the last acknowledged commit in ", path_));
}

absl::Status CommitMark::Publish(const Mark& m) {
  absl::MutexLock l(&mu_);
  wanted_.sequence = std::max(wanted_.sequence, m.sequence);
  wanted_.lsn = std::max(wanted_.lsn, m.lsn);
  for (;;) {
    if (!error_.ok()) return error_;
    if (durable_.sequence >= m.sequence && durable_.lsn >= m.lsn) return absl::OkStatus();
    if (!writing_) break;
    written_.Wait(&mu_);
  }
  // This caller writes for every caller waiting now (their marks are in wanted_).
  writing_ = true;
  const Mark target = wanted_;
  const uint64_t generation = generation_ + 1;
  mu_.Unlock();
  absl::Status s = WriteSlot(generation, target);
  mu_.Lock();
  writing_ = false;
  if (s.ok()) {
    generation_ = generation;
    durable_ = target;
  } else {
    error_ = s;
  }
  written_.SignalAll();
  return s;
}

}  // namespace umap::journal
