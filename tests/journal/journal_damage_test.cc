// Damage to a journal's files at any offset: one bit flipped, one 512-byte sector zeroed, or
// the file cut short, in the write-ahead log, a table file or the MANIFEST.
//
// Property: the journal is either recovered fully (it opens and holds every committed
// transaction, whole, in LSN order) or the damage is reported (Open or a read returns
// kDataLoss); never a journal that opens and silently lacks a committed transaction. Table
// files and the MANIFEST are damaged after a clean close (which leaves no record in a WAL).
// The WAL is damaged in a crash image (the directory copied while the journal is open, as a
// kill leaves it). Every commit in it was acknowledged, so even damage in the log's tail,
// which the WAL alone cannot tell from the torn tail of a crash (a cut always looks like
// one), must be reported: UMAP-COMMITTED says how far the acknowledged commits go
// (docs/journal_format.md §8).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "journal/journal.h"
#include "journal/wal_damage.h"
#include "rocksdb/file_system.h"
#include "tests/journal/journal_test_util.h"

namespace umap::journal {
namespace {

constexpr uint64_t kBlocks = 8;
constexpr uint32_t kBlockSize = 4096;

enum class Target { kWal, kTable, kManifest };
enum class Damage { kFlip, kZeroSector, kCut };

const char* Name(Target t) {
  switch (t) {
    case Target::kWal: return "WAL";
    case Target::kTable: return "table";
    case Target::kManifest: return "MANIFEST";
  }
  return "?";
}
const char* Name(Damage d) {
  switch (d) {
    case Damage::kFlip: return "bit flip";
    case Damage::kZeroSector: return "zeroed sector";
    case Damage::kCut: return "cut";
  }
  return "?";
}

// The non-empty files of `kind` in `dir`, by name (RocksDB may delete an obsolete file while
// this lists them: such a file is left out).
std::vector<std::string> FilesOf(const std::string& dir, Target kind) {
  std::string current;
  if (kind == Target::kManifest) {
    std::ifstream in(dir + "/CURRENT");
    std::getline(in, current);
  }
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    std::error_code ec;
    if (std::filesystem::file_size(e.path(), ec) == 0 || ec) continue;
    const bool match = kind == Target::kWal     ? e.path().extension() == ".log"
                       : kind == Target::kTable ? e.path().extension() == ".sst"
                                                : name == current;
    if (match) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The end of the records of the newest WAL file of `dir` (0 if none); the file goes on
// with the zeros it is written into.
uint64_t WalEnd(const std::string& dir) {
  std::vector<std::string> wals = FilesOf(dir, Target::kWal);
  if (wals.empty()) return 0;
  absl::StatusOr<uint64_t> end = WalRecordsEnd(*rocksdb::FileSystem::Default(), wals.back());
  RC_ASSERT(end.ok());
  return *end;
}

// Damages `path` at `offset`; returns the end of the damaged range.
uint64_t Corrupt(const std::string& path, Damage damage, uint64_t offset, int bit) {
  const uint64_t size = std::filesystem::file_size(path);
  if (damage == Damage::kCut) {
    std::filesystem::resize_file(path, offset);
    return size;
  }
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (damage == Damage::kFlip) {
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(static_cast<char>(c ^ (1 << bit)));
    return offset + 1;
  }
  const uint64_t end = std::min<uint64_t>(offset + 512, size);
  const std::string zeros(end - offset, '\0');
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  return end;
}

// Where a commit's record lies in the WAL (every commit is one WAL write).
struct WalRange {
  uint64_t begin = 0, end = 0;
};

// Commits `n` transactions of random blocks and images.
void CommitSome(JournalFixture& fx, uint64_t mapping, int n, std::vector<Transaction>* out,
                std::vector<WalRange>* ranges) {
  for (int i = 0; i < n; ++i) {
    std::map<uint64_t, std::string> images;
    for (uint64_t b = 0; b < kBlocks; ++b) {
      if (*rc::gen::inRange(0, 3) == 0) images[b] = Image(*rc::gen::inRange('a', 'z'));
    }
    if (images.empty()) images[*rc::gen::inRange<uint64_t>(0, kBlocks)] = Image('z');
    std::vector<BlockWrite> writes;
    for (const auto& [b, image] : images) writes.push_back({b, image});
    const uint64_t begin = WalEnd(fx.Options().dir);
    absl::StatusOr<Transaction> t = fx.journal_->Commit(mapping, writes, 0, 0);
    RC_ASSERT(t.ok());
    out->push_back(*std::move(t));
    ranges->push_back({begin, WalEnd(fx.Options().dir)});
  }
}

// The directory as a crash would leave it: every file copied while the journal is open.
std::string CrashImage(const std::string& dir, const std::string& image) {
  std::filesystem::create_directory(image);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::error_code ec;
    std::filesystem::copy_file(e.path(), image + "/" + e.path().filename().string(), ec);
  }
  return image;
}

RC_GTEST_PROP(JournalDamage, IsRecoveredFullyOrReportedNeverSilentlyShort, ()) {
  const Target target = *rc::gen::element(Target::kWal, Target::kTable, Target::kManifest);
  const Damage damage = *rc::gen::element(Damage::kFlip, Damage::kZeroSector, Damage::kCut);
  JournalFixture fx;
  fx.fs_->SkipSyncs(true);  // no power cut here: the files are damaged afterwards
  fx.OpenJournal();
  RC_ASSERT(fx.journal_ != nullptr);
  absl::StatusOr<uint64_t> m = fx.journal_->RegisterMapping(FileIdentity{"/f", 1, 2, 1 << 20},
                                                            kBlockSize, Policy::kAtomic,
                                                            Contents::kData);
  RC_ASSERT(m.ok());
  // Phase 1 ends with a clean close and a reopen: its records are in a table file and the
  // MANIFEST has recorded edits. Phase 2 is in the new WAL.
  std::vector<Transaction> committed;
  std::vector<WalRange> ranges;
  CommitSome(fx, *m, *rc::gen::resize(100, rc::gen::inRange(1, 9)), &committed, &ranges);
  fx.Reopen();
  RC_ASSERT(fx.journal_ != nullptr);
  const size_t in_tables = committed.size();
  ranges.clear();
  CommitSome(fx, *m, *rc::gen::resize(100, rc::gen::inRange(target == Target::kWal ? 1 : 0, 9)),
             &committed, &ranges);
  std::string dir = fx.Options().dir;
  if (target == Target::kWal) dir = CrashImage(dir, fx.dir_.File("crash"));
  fx.journal_.reset();

  const std::vector<std::string> files = FilesOf(dir, target);
  RC_ASSERT(!files.empty());
  const std::string file = *rc::gen::elementOf(files);
  uint64_t size = std::filesystem::file_size(file);
  if (target == Target::kWal) {
    // The records and a little of the zeros after them (damage there is no damage).
    absl::StatusOr<uint64_t> end = WalRecordsEnd(*rocksdb::FileSystem::Default(), file);
    RC_ASSERT(end.ok());
    size = std::min(size, *end + 4096);
  }
  // rapidcheck scales inRange by the test's size; resize(100) makes the offset uniform.
  const uint64_t offset = *rc::gen::resize(100, rc::gen::inRange<uint64_t>(0, size));
  const uint64_t damage_end = Corrupt(file, damage, offset, *rc::gen::inRange(0, 8));
  RC_TAG(Name(target), Name(damage));

  RC_LOG() << Name(damage) << " of " << file << " (" << size << " bytes) at " << offset << ".."
           << damage_end << "; " << committed.size() << " commits, " << in_tables << " in tables\n";

  JournalOptions o = fx.Options();
  o.dir = dir;
  absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(o);
  if (!j.ok()) {
    RC_LOG() << j.status().message() << "\n";
    RC_ASSERT(j.status().code() == absl::StatusCode::kDataLoss);
    RC_TAG("reported at open");
    return;
  }
  absl::StatusOr<std::vector<Transaction>> pending = (*j)->PendingTransactions();
  if (!pending.ok()) {
    RC_ASSERT(pending.status().code() == absl::StatusCode::kDataLoss);
    RC_TAG("reported at read");
    return;
  }
  RC_LOG() << pending->size() << " pending\n";
  // Every commit here was acknowledged (recorded in UMAP-COMMITTED), so even a tail that the
  // WAL alone cannot prove durable must come back whole or be reported.
  RC_ASSERT(pending->size() == committed.size());
  RC_TAG("recovered fully");
  for (size_t i = 0; i < pending->size(); ++i) RC_ASSERT((*pending)[i] == committed[i]);
}

// RocksDB writes a new database's first MANIFEST before its CURRENT: a MANIFEST alone is a
// creation that failed (an injected ENOSPC on the first open) and opens as a new journal.
// Data without a CURRENT (a table file) is a journal RocksDB would silently start over.
TEST(JournalDamageTest, AMissingCurrentIsDamageOnlyWhenThereIsData) {
  JournalFixture fx;
  const std::string dir = fx.Options().dir;
  std::filesystem::create_directory(dir);
  std::ofstream(dir + "/MANIFEST-000001") << "";
  fx.OpenJournal();
  ASSERT_NE(fx.journal_, nullptr);
  absl::StatusOr<uint64_t> m = fx.journal_->RegisterMapping(FileIdentity{"/f", 1, 2, 1 << 20},
                                                            kBlockSize, Policy::kAtomic,
                                                            Contents::kData);
  ASSERT_OK(m.status());
  ASSERT_OK(fx.CommitBlocks(*m, {{0, 'a'}}).status());
  fx.journal_.reset();  // the close flushes: the commit is in a table file
  ASSERT_FALSE(FilesOf(dir, Target::kTable).empty());
  std::filesystem::remove(dir + "/CURRENT");
  absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(fx.Options());
  EXPECT_THAT(j.status(), umap::testing::StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(std::string(j.status().message()), ::testing::HasSubstr("CURRENT file is missing"));
}

}  // namespace
}  // namespace umap::journal
