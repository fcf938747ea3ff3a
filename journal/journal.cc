#include "journal/journal.h"

#include <malloc.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <tuple>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "base/coding.h"
#include "base/crash_point.h"
#include "base/crc32c.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/private_dir.h"
#include "base/status_macros.h"
#include "journal/fenced_fs.h"
#include "journal/integrity.h"
#include "journal/journal_records.h"
#include "journal/lock_holder.h"
#include "journal/pending_reader.h"
#include "journal/private_fs.h"
#include "journal/rocksdb_status.h"
#include "journal/table_options.h"
#include "journal/wal_damage.h"
#include "journal/wal_zero_fill.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/iterator.h"
#include "rocksdb/listener.h"
#include "rocksdb/options.h"
#include "rocksdb/snapshot.h"
#include "rocksdb/statistics.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace umap::journal {
namespace {


// Directories that a Journal of this process has open, by (device, inode). RocksDB refuses a
// second open in the same process too, but we must know it before probing the LOCK file:
// the probe's close() would drop this process's own lock (see lock_holder.h).
class OpenDirs {
 public:
  static bool Reserve(std::pair<uint64_t, uint64_t> id) {
    absl::MutexLock l(&mu_);
    return Set().insert(id).second;
  }
  static void Release(std::pair<uint64_t, uint64_t> id) {
    absl::MutexLock l(&mu_);
    Set().erase(id);
  }

 private:
  static absl::flat_hash_set<std::pair<uint64_t, uint64_t>>& Set()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    static auto* set = new absl::flat_hash_set<std::pair<uint64_t, uint64_t>>();
    return *set;
  }
  static absl::Mutex mu_;
};
ABSL_CONST_INIT absl::Mutex OpenDirs::mu_(absl::kConstInit);

// RocksDB's info log, sent to our log instead of a LOG file in the journal directory. The
// LOG file shares the journal's disk: once that disk is full, Debian's RocksDB 7.8.3 (built
// with assertions) aborts in WritableFileWriter::Append when it logs the very WAL error it
// is handling (seen: ENOSPC on a full tmpfs). Warnings and errors still reach stderr.
// A warning RocksDB repeats while a condition lasts ("Stopping writes because we have 2
// immutable memtables", at every stalled write; "DB::Open() failed", at every reopen of a
// journal on a full disk) is printed once per kRepeatMicros, with the count of those left
// out, instead of once per write; each warning by itself, so that several that alternate
// are each limited. Process-wide: every open has a logger of its own.
class JournalInfoLog final : public rocksdb::Logger {
 public:
  JournalInfoLog() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char buf[512];
    vsnprintf(buf, sizeof(buf), format, ap);
    // Each format (the same warning, whatever its numbers) limited by itself: a full disk
    // makes RocksDB cycle through several warnings at every reopen.
    log::EveryPeriod* limit;
    {
      absl::MutexLock l(&mu_);
      std::unique_ptr<log::EveryPeriod>& slot = LimitOf()[format];
      if (slot == nullptr) slot = std::make_unique<log::EveryPeriod>(kRepeatMicros);
      limit = slot.get();  // never freed: the map only grows
    }
    uint64_t left_out = 0;
    if (!limit->Allow(&left_out)) return;
    if (left_out > 0) {
      UMAP_LOG(kWarn, "rocksdb: ", buf, " (and ", left_out, " more like it in the last ",
               kRepeatMicros / 1'000'000, " s)");
    } else {
      UMAP_LOG(kWarn, "rocksdb: ", buf);
    }
  }

 private:
  // RocksDB's formats are string literals: a few dozen call sites at most.
  static absl::flat_hash_map<const char*, std::unique_ptr<log::EveryPeriod>>& LimitOf()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    static auto* limits = new absl::flat_hash_map<const char*, std::unique_ptr<log::EveryPeriod>>();
    return *limits;
  }
  // A minute: what RocksDB repeats is seldom news, and the journal's own errors say what
  // happens (a full disk: one line every 10 s from the runtime).
  static constexpr uint64_t kRepeatMicros = 60'000'000;
  static absl::Mutex mu_;
};
ABSL_CONST_INIT absl::Mutex JournalInfoLog::mu_(absl::kConstInit);

// A memtable's size (RocksDB's write_buffer_size); why this value: in DbOptions.
constexpr size_t kMemtableBytes = size_t{2} << 20;

// RocksDB options for the journal's workload: small records written with the WAL, most of
// them deleted again shortly after (commit, apply, mark applied).
rocksdb::Options DbOptions(rocksdb::Env* env, std::shared_ptr<rocksdb::EventListener> listener,
                           std::shared_ptr<rocksdb::Statistics> statistics,
                           uint64_t sync_written_bytes = 0) {
  rocksdb::Options o;
  o.env = env;  // carries JournalOptions::fs
  o.create_if_missing = true;
  // A transaction's header is in the WriteBatch that ends it, after every batch of its
  // payloads, and a WAL prefix never splits a batch: keeping the clean prefix of a torn or
  // damaged log is exactly "committed or absent, never partial".
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  o.paranoid_checks = true;
  // After a write or sync error the journal is poisoned and only a reopen recovers. RocksDB
  // must not resume by itself either: Debian's 7.8.3 (assertions on) can abort on a write
  // after a WAL error, and an auto-resumed DB could make a failed commit vanish under a
  // caller that still treats it as indeterminate. The listener also vetoes auto recovery.
  o.max_bgerror_resume_count = 0;
  if (listener != nullptr) o.listeners.push_back(std::move(listener));
  o.avoid_flush_during_shutdown = false;
  o.statistics = std::move(statistics);
  // Bounded disk use. Applied transactions are point-deleted; a memtable flush keeps only
  // their tombstones, and an L0->L1 compaction (L1 is the bottom level) drops those. A small
  // memtable keeps the live WAL small: WAL files are deleted once their memtable is flushed.
  // Measured in tests/journal/journal_test.cc (DiskUseStaysBounded) and docs/journal_format.md.
  // It is also what a umsync costs in memory: a large umsync's images pass through the
  // memtables, two of them full while one flushes, and more stay pinned while an iterator
  // (a commit reading staged images, the applier reading payloads) holds them. With 8 MiB,
  // one process umsyncing 39 MiB peaked at 75 MiB RSS with a 4 MiB cache, and 8 such
  // processes in one 256 MiB memory cgroup stalled at the limit (docs/durability.md "What
  // a umsync holds in memory"). Costs nothing measurable on umsync throughput. On a nearly
  // full disk a reopen finds room again more often with small memtables (a flush frees the
  // WAL); the runtime's JournalHandle counts such a reopen that fills at once as a failed
  // attempt, so the log does not grow with it.
  o.write_buffer_size = kMemtableBytes;
  // JournalOptions::sync_written_bytes: why, there.
  o.bytes_per_sync = sync_written_bytes;
  o.wal_bytes_per_sync = sync_written_bytes;
  o.max_write_buffer_number = 2;
  o.max_total_wal_size = 32 << 20;
  o.level0_file_num_compaction_trigger = 2;
  o.target_file_size_base = 8 << 20;
  o.max_bytes_for_level_base = 32 << 20;
  o.max_manifest_file_size = 4 << 20;
  // RocksDB opens the table files at DB::Open with this many threads, and starts them
  // whatever the number of files: 16 thread creations per version loaded, about 45 per open
  // of a journal. A journal holds a handful of tables (the limits above), which one thread
  // opens in well under a millisecond; opens are frequent (every umap-recover run, every
  // map of a mapping with a journal).
  o.max_file_opening_threads = 1;
  o.info_log = std::make_shared<JournalInfoLog>();
  // No fallocate: RocksDB would preallocate ~1.1 x write_buffer_size per WAL file. On a full
  // disk that hides ENOSPC until a reopen deletes the old preallocated WAL, and it makes the
  // journal's disk use look 8 MiB larger than it is.
  o.allow_fallocate = false;
  // Block images rarely compress well, and every byte costs CPU on the commit path.
  o.compression = rocksdb::kNoCompression;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(JournalTableOptions()));
  return o;
}

// Calls fn on every record with `tag`, in key order.
absl::Status ScanTag(rocksdb::DB* db, RecordTag tag, absl::string_view what,
                     absl::FunctionRef<absl::Status(absl::string_view, absl::string_view)> fn) {
  const std::string begin = TagBegin(tag), end = TagEnd(tag);
  rocksdb::Slice upper = ToSlice(end);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  // Read once at open: kept in the block cache it would only take memory (a transaction of
  // a million blocks has a 16 MiB header).
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (it->Seek(ToSlice(begin)); it->Valid(); it->Next()) {
    RETURN_IF_ERROR(fn(ToView(it->key()), ToView(it->value())));
  }
  return FromRocksDb(it->status(), absl::StrCat("scan ", what));
}

// Whose journal this may be: the effective user's, or, for root only, the named owner's.
absl::StatusOr<PrivateDirPolicy> OwnerPolicy(const JournalOptions& options) {
  const uid_t me = ::geteuid();
  if (!options.owner.has_value() || *options.owner == me) return PrivateDirPolicy{me};
  if (me != 0) {
    return WithErrno(absl::PermissionDeniedError(absl::StrCat(
                         "journal ", options.dir, ": only root may work on the journal of "
                         "another user (uid ", *options.owner, "); you are uid ", me)),
                     EPERM);
  }
  return PrivateDirPolicy{*options.owner, /*root_for_other=*/true};
}

absl::Status InUseError(const std::string& dir, pid_t holder) {
  return WithErrno(absl::UnavailableError(absl::StrCat(
                       "journal ", dir, " is in use by process ", holder, " (it holds ", dir,
                       "/LOCK); stop that process or wait for it to exit")),
                   EBUSY);
}

// Before RocksDB opens the journal (journal/integrity.h): a writable open would recover the
// clean prefix of a damaged WAL, write it to a table file and delete the WAL, the evidence
// with it. A journal held by a live process is reported as in use (its WAL may be growing).
absl::Status RefuseDamagedJournal(rocksdb::FileSystem& fs, const rocksdb::Options& db_options,
                                  const std::string& dir) {
  absl::Status intact = CheckJournalIntegrity(fs, db_options, dir);
  if (intact.ok() || intact.code() != absl::StatusCode::kDataLoss) return intact;
  if (std::optional<pid_t> holder = LockHolder(dir + "/LOCK")) return InUseError(dir, *holder);
  return WithErrno(absl::DataLossError(absl::StrCat(
                       intact.message(),
                       ". Nothing was written and the journal is left as found: keep a copy of "
                       "the directory, then `umap-recover --salvage` replays every record that "
                       "can still be read")),
                   EIO);
}

// A salvage of damage that skipping unreadable log records cannot open past: a MANIFEST
// that does not read, or a CURRENT file gone while the database's files are there (RocksDB
// would start an empty database beside them). RocksDB's RepairDB rebuilds the MANIFEST from
// the table files and the logs, keeping every record they still hold. Writes into `dir`.
absl::Status RepairForSalvage(rocksdb::FileSystem& fs, const rocksdb::Options& db_options,
                              const std::string& dir) {
  // Damage in the middle of a log: skipping its unreadable records (the salvage's recovery
  // mode) keeps every other record. Anything else the integrity check reports (a MANIFEST
  // that does not read, a CURRENT gone beside data, a table its MANIFEST lost, a log cut
  // short) needs the MANIFEST rebuilt from the files.
  if (!absl::IsDataLoss(CheckJournalIntegrity(fs, db_options, dir))) return absl::OkStatus();
  absl::StatusOr<std::optional<WalDamage>> damage = FindWalDamage(fs, dir);
  const bool repair = damage.ok() && !damage->has_value();
  if (!repair) return absl::OkStatus();
  UMAP_LOG(kWarn, "journal ", dir,
           ": salvage: rebuilding its MANIFEST from its table and "
           "log files (RocksDB RepairDB)");
  return FromRocksDb(rocksdb::RepairDB(dir, db_options), absl::StrCat("repair journal ", dir));
}

}  // namespace

// Poisons the journal on RocksDB background errors (flush, compaction, WAL write) and vetoes
// RocksDB's automatic recovery. Called by RocksDB with its DB mutex held: it takes only its
// own leaf mutex.
class Journal::Listener : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason reason,
                         rocksdb::Status* bg_error) override {
    if (bg_error == nullptr || bg_error->ok()) return;
    absl::MutexLock l(&mu_);
    if (first_.ok()) {
      first_ = FromRocksDb(*bg_error,
                           absl::StrCat("background error (reason ", static_cast<int>(reason), ")"));
    }
  }
  // A flushed memtable's arena blocks were allocated by whichever threads committed while
  // it was filling (umsyncs run in the application's threads), so they are freed into as
  // many malloc arenas, each of which keeps its free chunks for its own thread. With 16
  // threads syncing every 100 random writes, the arenas held about 65 MiB beside a 183 MiB
  // cache (45 MiB more than with MALLOC_ARENA_MAX=2), and every run ran out of its 256 MiB
  // memory cgroup; with this trim 5 of 6 runs finished (docs/performance.md, "O_DIRECT
  // write-back"). Hands such memory back to the kernel after every flush (the memtable
  // flushed before this one is freed by then). Measured: 37 trims in a 10 s run, 1.7 ms
  // each at the median, 14 ms at most, on RocksDB's flush thread.
  void OnFlushCompleted(rocksdb::DB* /*db*/, const rocksdb::FlushJobInfo& /*info*/) override {
    malloc_trim(0);
  }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/,
                            rocksdb::Status /*bg_error*/, bool* auto_recovery) override {
    if (auto_recovery != nullptr) *auto_recovery = false;
  }
  absl::Status first() const {
    absl::MutexLock l(&mu_);
    return first_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Status first_ ABSL_GUARDED_BY(mu_);
};

Journal::Journal(std::string dir, DirId dir_id, uint64_t staged_quota,
                 uint64_t commit_batch_bytes, std::unique_ptr<JournalFence> fence,
                 std::unique_ptr<rocksdb::Env> env,
                 std::shared_ptr<Listener> listener,
                 std::shared_ptr<rocksdb::Statistics> statistics, rocksdb::DB* db)
    : dir_(std::move(dir)),
      dir_id_(dir_id),
      staged_quota_(staged_quota),
      commit_batch_bytes_(commit_batch_bytes),
      fence_(std::move(fence)),
      env_(std::move(env)),
      listener_(std::move(listener)),
      statistics_(std::move(statistics)),
      db_(db) {}

Journal::~Journal() {
  if (fence_ != nullptr && fence_->fenced()) {
    // The directory is another owner's now: no flush at close (FencedFs would refuse it
    // anyway, but RocksDB need not try).
    db_->SetDBOptions({{"avoid_flush_during_shutdown", "true"}}).PermitUncheckedError();
  } else {
    FlushAtClose();
  }
  rocksdb::Status s = db_->Close();
  // Repeats while a disk stays full (each reopen closes a poisoned journal): rate-limited.
  if (!s.ok()) UMAP_LOG_EVERY(kWarn, 10, "closing journal ", dir_, ": ", s.ToString());
  delete db_;
  bool clean = s.ok();
  {
    absl::MutexLock l(&mu_);
    clean = clean && poison_.ok();
  }
  // Only a clean close marks the owner record closed. A journal that failed (a write error,
  // a lost disk) is left as a dead owner leaves it: the next owner logs the takeover, and
  // nothing is written into a directory whose file system just refused writes.
  if (fence_ != nullptr && clean) fence_->Release();
  // Only now, with RocksDB's LOCK released, may another Journal of this process open it.
  OpenDirs::Release(dir_id_);
}

void Journal::FlushAtClose() {
  {
    absl::MutexLock l(&mu_);
    // Poisoned (or read-only): nothing more may be written. Nothing written since the open:
    // the open already moved the recovered log into a table file.
    if (!WritableLocked().ok() || bytes_written_ == 0) return;
  }
  rocksdb::FlushOptions fo;
  fo.wait = true;
  if (rocksdb::Status s = db_->Flush(fo); !s.ok()) {
    UMAP_LOG(kWarn, "closing journal ", dir_, ": flush failed (", s.ToString(),
             "); the records stay in its write-ahead log");
    return;
  }
  {
    absl::MutexLock l(&mu_);
    if (!pending_.empty() || !staged_.empty()) return;
  }
  // Nothing pending: every image record is deleted, but its bytes stay in the table files
  // until a compaction drops them with their tombstones (a journal that carried large
  // umsyncs kept hundreds of MiB after a clean exit). Compacting everything now leaves the
  // few records that remain (format, watermark, mappings): the journal shrinks to its
  // minimum. It reads what the tables hold once.
  rocksdb::CompactRangeOptions co;
  co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  co.exclusive_manual_compaction = true;
  if (rocksdb::Status s = db_->CompactRange(co, nullptr, nullptr); !s.ok()) {
    UMAP_LOG(kWarn, "closing journal ", dir_, ": compacting its empty tables failed (",
             s.ToString(), "); they are dropped by a later compaction");
  }
}

absl::Status Journal::CheckPrivate(const JournalOptions& options) {
  ASSIGN_OR_RETURN(const PrivateDirPolicy owner, OwnerPolicy(options));
  return CheckPrivateDir(options.dir, owner);
}

absl::Status Journal::CheckIntegrity(const JournalOptions& options) {
  std::shared_ptr<rocksdb::FileSystem> fs = options.fs;
  if (fs == nullptr) fs = rocksdb::FileSystem::Default();
  std::unique_ptr<rocksdb::Env> rocks_env = rocksdb::NewCompositeEnv(fs);
  return CheckJournalIntegrity(*fs, DbOptions(rocks_env.get(), nullptr, nullptr), options.dir);
}

absl::Status Journal::CheckIntegrityForOpen(const JournalOptions& options) {
  std::shared_ptr<rocksdb::FileSystem> fs = options.fs;
  if (fs == nullptr) fs = rocksdb::FileSystem::Default();
  std::unique_ptr<rocksdb::Env> rocks_env = rocksdb::NewCompositeEnv(fs);
  return RefuseDamagedJournal(*fs, DbOptions(rocks_env.get(), nullptr, nullptr), options.dir);
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const JournalOptions& options) {
  const std::string& dir = options.dir;
  if (dir.empty()) return absl::InvalidArgumentError("journal directory not set");
  Env* env = options.env != nullptr ? options.env : Env::Default();
  if (!options.read_only) RETURN_IF_ERROR(env->CreateDir(dir, 0700));
  ASSIGN_OR_RETURN(const PrivateDirPolicy owner, OwnerPolicy(options));
  RETURN_IF_ERROR(CheckPrivateDir(dir, owner));
  // Root working on another user's journal leaves the files it creates to that user.
  const std::optional<uid_t> give_to =
      owner.root_for_other ? std::optional<uid_t>(owner.owner) : std::nullopt;
  ASSIGN_OR_RETURN(FileIdentity id, env->IdentifyPath(dir));
  const DirId dir_id(id.device, id.inode);
  if (!OpenDirs::Reserve(dir_id)) {
    return WithErrno(absl::UnavailableError(absl::StrCat("journal ", dir,
                                                         " is already open in this process (pid ",
                                                         ::getpid(), ")")),
                     EBUSY);
  }
  absl::Cleanup unreserve = [dir_id] { OpenDirs::Release(dir_id); };

  std::shared_ptr<rocksdb::FileSystem> fs = std::make_shared<PrivateFs>(
      options.fs != nullptr ? options.fs : rocksdb::FileSystem::Default(), give_to);
  // The owner lock and a new epoch before RocksDB writes anything into the directory; every
  // later write of RocksDB's passes the fence.
  std::unique_ptr<JournalFence> fence;
  if (!options.read_only) {
    ASSIGN_OR_RETURN(fence, JournalFence::Acquire(dir, options.expected_epoch));
    // WAL appends overwrite written zeros, so a commit's fdatasync flushes data only; under
    // the fence, so that a fenced owner writes no zeros either.
    if (ZeroFillPaysOn(dir)) fs = std::make_shared<WalZeroFillFs>(fs);
    fs = std::make_shared<FencedFs>(fs, fence.get());
  }
  std::unique_ptr<rocksdb::Env> rocks_env = rocksdb::NewCompositeEnv(fs);
  auto listener = std::make_shared<Listener>();
  std::shared_ptr<rocksdb::Statistics> statistics = rocksdb::CreateDBStatistics();
  statistics->set_stats_level(rocksdb::StatsLevel::kExceptHistogramOrTimers);

  rocksdb::DB* db = nullptr;
  rocksdb::Options db_options =
      DbOptions(rocks_env.get(), listener, statistics, options.sync_written_bytes);
  db_options.disable_auto_compactions = options.defer_compaction;
  if (options.salvage) {
    db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords;
    if (!options.read_only) RETURN_IF_ERROR(RepairForSalvage(*fs, db_options, dir));
  } else {
    RETURN_IF_ERROR(RefuseDamagedJournal(*fs, db_options, dir));
  }
  // The record of acknowledged commits exists before the database does (commit_mark.h).
  if (!options.read_only) RETURN_IF_ERROR(CommitMark::CreateIfMissing(*fs, dir));
  rocksdb::Status s = options.read_only ? rocksdb::DB::OpenForReadOnly(db_options, dir, &db)
                                        : rocksdb::DB::Open(db_options, dir, &db);
  if (!s.ok() && options.salvage && options.read_only && s.IsCorruption()) {
    return WithErrno(absl::DataLossError(absl::StrCat(
                         "journal ", dir, ": ", s.ToString(),
                         ". Its MANIFEST cannot be read: only a salvaging replay (`umap-recover "
                         "--salvage`, which writes) can rebuild it from the table and log "
                         "files; a status or dry run writes nothing")),
                     EIO);
  }
  if (!s.ok()) {
    // Safe to probe: no Journal of ours holds the directory (reserved above).
    if (std::optional<pid_t> holder = LockHolder(dir + "/LOCK")) return InUseError(dir, *holder);
    return FromRocksDb(
        s, absl::StrCat(options.read_only ? "open (read-only) journal " : "open journal ", dir));
  }
  std::unique_ptr<Journal> journal(new Journal(dir, dir_id, options.staged_quota_bytes,
                                               options.commit_batch_bytes, std::move(fence),
                                               std::move(rocks_env),
                                               std::move(listener), std::move(statistics), db));
  std::move(unreserve).Cancel();  // ~Journal releases it from now on
  RETURN_IF_ERROR(journal->Recover(options.keep_staged || options.read_only, options.read_only));
  if (!options.read_only) {
    // A salvaged journal kept less than its mark may say: the mark follows what was kept.
    std::optional<CommitMark::Mark> reset;
    if (options.salvage) {
      absl::MutexLock l(&journal->mu_);
      reset = CommitMark::Mark{db->GetLatestSequenceNumber(), journal->last_lsn_};
    }
    ASSIGN_OR_RETURN(journal->mark_, CommitMark::Open(*fs, dir, reset));
  }
  if (options.read_only) {
    absl::MutexLock l(&journal->mu_);
    journal->poison_ = WithErrno(
        absl::FailedPreconditionError(absl::StrCat(
            "journal ", dir, " is open read-only (a writable open failed); reopen to write")),
        EROFS);
  }
  return journal;
}

absl::Status Journal::RecoverFormatLocked(bool read_only) {
  rocksdb::ReadOptions ro;
  // Format record first: nothing else is interpreted, and nothing written, before the
  // version is known to be one we read.
  std::string value;
  rocksdb::Status s = db_->Get(ro, ToSlice(FormatKey()), &value);
  if (s.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    it->SeekToFirst();
    RETURN_IF_ERROR(FromRocksDb(it->status(), absl::StrCat("read journal ", dir_)));
    if (it->Valid()) {
      return absl::DataLossError(absl::StrCat(
          dir_, " holds a RocksDB database that is not a umap journal (no format record)"));
    }
    if (read_only) {
      return absl::FailedPreconditionError(
          absl::StrCat("journal ", dir_, " is empty: nothing to read (opened read-only)"));
    }
    rocksdb::WriteBatch batch;
    batch.Put(ToSlice(FormatKey()), ToSlice(EncodeFormat(FormatRecord{})));
    batch.Put(ToSlice(WatermarkKey()), ToSlice(EncodeWatermark(Watermark{})));
    RETURN_IF_ERROR(Write(&batch, /*sync=*/true, "create"));
  } else {
    RETURN_IF_ERROR(FromRocksDb(s, absl::StrCat("read journal ", dir_)));
    ASSIGN_OR_RETURN(FormatRecord format, DecodeFormat(FormatKey(), value));
    format_version_ = format.version;
    if (format.version > kFormatVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "journal ", dir_, " has format version ", format.version,
          ", newer than version ", kFormatVersion, ", the newest this build reads; recover it "
          "with the umap version that wrote it"));
    }
  }
  return absl::OkStatus();
}

absl::Status Journal::RecoverStagedLocked(bool keep_staged) {
  rocksdb::ReadOptions ro;
  // Staged records were never committed and the cache that remembered them is gone: discard
  // them with one range tombstone, not a read of every image (not synced: if it is lost, the
  // next Open discards them again). A runtime reopening its own journal keeps them and
  // rebuilds their index and quota use. One iterator serves both: it stops at the first
  // record when they are discarded.
  bool any_staged = false;
  {
    const std::string begin = TagBegin(RecordTag::kStaged), end = TagEnd(RecordTag::kStaged);
    rocksdb::Slice upper = ToSlice(end);
    rocksdb::ReadOptions sro = ro;
    sro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(sro));
    for (it->Seek(ToSlice(begin)); it->Valid(); it->Next()) {
      any_staged = true;
      if (!keep_staged) break;  // one record is enough to know
      ASSIGN_OR_RETURN(StagedBlock sb, DecodeStaged(ToView(it->key()), ToView(it->value())));
      staged_[{sb.mapping_id, sb.block}] = sb.data.size();
      staged_bytes_ += sb.data.size();
    }
    RETURN_IF_ERROR(FromRocksDb(it->status(), absl::StrCat("read journal ", dir_)));
  }
  if (any_staged && !keep_staged) {
    rocksdb::WriteBatch batch;
    batch.DeleteRange(ToSlice(TagBegin(RecordTag::kStaged)), ToSlice(TagEnd(RecordTag::kStaged)));
    RETURN_IF_ERROR(Write(&batch, /*sync=*/false, "discard staged blocks"));
  }
  return absl::OkStatus();
}

absl::Status Journal::Recover(bool keep_staged, bool read_only) {
  absl::MutexLock l(&mu_);
  rocksdb::ReadOptions ro;

  RETURN_IF_ERROR(RecoverFormatLocked(read_only));
  std::string value;
  rocksdb::Status s = db_->Get(ro, ToSlice(WatermarkKey()), &value);
  if (s.IsNotFound()) {
    return absl::DataLossError(absl::StrCat("journal ", dir_, ": watermark record missing"));
  }
  RETURN_IF_ERROR(FromRocksDb(s, absl::StrCat("read journal ", dir_)));
  ASSIGN_OR_RETURN(Watermark watermark, DecodeWatermark(WatermarkKey(), value));
  last_lsn_ = watermark.last_lsn;
  last_mapping_id_ = watermark.last_mapping_id;

  RETURN_IF_ERROR(ScanTag(db_, RecordTag::kMapping, "mappings",
                          [&](absl::string_view k, absl::string_view v)
                              ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
                                ASSIGN_OR_RETURN(MappingRecord m, DecodeMapping(k, v));
                                last_mapping_id_ = std::max(last_mapping_id_, m.id);
                                mappings_.emplace(m.id, std::move(m));
                                return absl::OkStatus();
                              }));

  // Headers only: payloads are verified when a transaction is read (ReadTransaction).
  RETURN_IF_ERROR(ScanTag(
      db_, RecordTag::kTxnHeader, "transactions",
      [&](absl::string_view k, absl::string_view v)
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
            ASSIGN_OR_RETURN(TxnHeader h, DecodeTxnHeader(k, v));
            auto m = mappings_.find(h.mapping_id);
            if (m == mappings_.end() || m->second.contents != h.contents) {
              return absl::DataLossError(absl::StrCat("journal ", dir_, ": transaction ", h.lsn,
                                                      " names mapping ", h.mapping_id,
                                                      " which is missing or differs"));
            }
            PendingTxn& t = pending_[h.lsn];
            t.mapping_id = h.mapping_id;
            t.contents = h.contents;
            for (const TxnBlock& b : h.blocks) t.blocks.push_back(b.block);
            ++unapplied_;
            last_lsn_ = std::max(last_lsn_, h.lsn);
            return absl::OkStatus();
          }));
  RETURN_IF_ERROR(DropOrphanPayloads(read_only));

  return RecoverStagedLocked(keep_staged);
}

absl::Status Journal::DropOrphanPayloads(bool read_only) {
  // One seek per transaction that has payloads, not a read of every payload: the keys are
  // in (lsn, block) order, so after the first payload of an LSN the next LSN's is sought.
  const std::string end = TagEnd(RecordTag::kTxnPayload);
  rocksdb::Slice upper = ToSlice(end);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  std::vector<uint64_t> orphans;
  for (it->Seek(ToSlice(TagBegin(RecordTag::kTxnPayload))); it->Valid();) {
    ASSIGN_OR_RETURN(auto key, DecodeTxnPayloadKey(ToView(it->key())));
    const uint64_t lsn = key.first;
    if (!pending_.contains(lsn)) orphans.push_back(lsn);
    // Never handed out again, even if the deletion below is lost.
    last_lsn_ = std::max(last_lsn_, lsn);
    if (lsn == ~uint64_t{0}) break;
    it->Seek(ToSlice(TxnPayloadKey(lsn + 1, 0)));
  }
  RETURN_IF_ERROR(FromRocksDb(it->status(), absl::StrCat("read journal ", dir_)));
  if (orphans.empty() || read_only) return absl::OkStatus();
  UMAP_LOG(kWarn, "journal ", dir_, ": deleting the payloads of ", orphans.size(),
           " transaction(s) whose commit did not finish (no header; the first is LSN ",
           orphans.front(), "): never committed");
  rocksdb::WriteBatch batch;
  for (uint64_t lsn : orphans) {
    DeletePayloads(&batch, lsn);
  }
  // No sync: if the deletion is lost, the next Open finds them again.
  return Write(&batch, /*sync=*/false, "delete payloads of unfinished commits");
}

absl::Status Journal::Write(rocksdb::WriteBatch* batch, bool sync, absl::string_view what) {
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return FromRocksDb(db_->Write(wo, batch), absl::StrCat(what, " in journal ", dir_));
}

absl::Status Journal::WriteAndSettle(rocksdb::WriteBatch* batch, bool sync,
                                     absl::string_view what, const Claim* claim,
                                     absl::FunctionRef<void()> on_success) {
  absl::Status s = Write(batch, sync, what);
  absl::MutexLock l(&mu_);
  if (claim != nullptr) ReleaseLocked(claim);
  if (!s.ok()) {
    PoisonLocked(s);
    return s;
  }
  bytes_written_ += batch->GetDataSize();
  on_success();
  return absl::OkStatus();
}

std::unique_ptr<rocksdb::WriteBatch> Journal::TakeBatch(size_t reserve) {
  {
    absl::MutexLock l(&spare_mu_);
    for (auto it = spare_batches_.begin(); it != spare_batches_.end(); ++it) {
      if ((*it)->Data().capacity() < reserve) continue;
      std::unique_ptr<rocksdb::WriteBatch> b = std::move(*it);
      spare_batches_.erase(it);
      return b;
    }
  }
  return std::make_unique<rocksdb::WriteBatch>(reserve);
}

void Journal::ReturnBatch(std::unique_ptr<rocksdb::WriteBatch> batch) {
  if (batch->Data().capacity() > kSpareBatchBytes) return;
  batch->Clear();
  absl::MutexLock l(&spare_mu_);
  if (spare_batches_.size() < kSpareBatches) {
    spare_batches_.push_back(std::move(batch));
    return;
  }
  // Full: keep the larger ones (they serve more commits).
  auto smallest = std::min_element(spare_batches_.begin(), spare_batches_.end(),
                                   [](const auto& a, const auto& b) {
                                     return a->Data().capacity() < b->Data().capacity();
                                   });
  if ((*smallest)->Data().capacity() < batch->Data().capacity()) *smallest = std::move(batch);
}

absl::Status Journal::WritableLocked() {
  if (poison_.ok()) {
    absl::Status background = listener_->first();
    if (!background.ok()) PoisonLocked(background);
  }
  return poison_;
}

void Journal::PoisonLocked(const absl::Status& cause) {
  if (!poison_.ok()) return;
  poison_ = WithErrno(absl::FailedPreconditionError(absl::StrCat(
                          "journal ", dir_, " poisoned by ", absl::StatusCodeToString(cause.code()),
                          ": ", cause.message(), "; reopen to recover")),
                      ErrnoFromStatus(cause));
  // Info only: every write returns it, and the runtime's JournalHandle says it once per spell
  // of trouble, with what happens meanwhile.
  UMAP_LOG(kInfo, poison_.message());
}

absl::Status Journal::poisoned() {
  absl::MutexLock l(&mu_);
  return WritableLocked();
}

absl::Status Journal::CheckOwner() { return CheckOwnerWith(false); }
absl::Status Journal::CheckOwnerFresh() { return CheckOwnerWith(true); }

absl::Status Journal::CheckOwnerWith(bool fresh_ok) {
  if (fence_ == nullptr) return absl::OkStatus();
  absl::Status s = fresh_ok ? fence_->CheckFresh() : fence_->Check();
  if (s.ok() || !fence_->fenced()) return s;  // not fenced: a check that could not decide
  absl::MutexLock l(&mu_);
  PoisonLocked(s);
  return s;
}

uint64_t Journal::epoch() const { return fence_ != nullptr ? fence_->epoch() : 0; }

bool Journal::ConflictsLocked(const Claim& claim) const {
  for (const Claim* c : claims_) {
    if (c->Overlaps(claim)) return true;
  }
  return false;
}

void Journal::AcquireLocked(const Claim* claim) {
  while (ConflictsLocked(*claim)) claims_changed_.Wait(&mu_);
  claims_.push_back(claim);
}

void Journal::ReleaseLocked(const Claim* claim) {
  claims_.erase(std::find(claims_.begin(), claims_.end(), claim));
  claims_changed_.SignalAll();
}

}  // namespace umap::journal
