// Journal: the write-ahead journal of dirty block versions (docs/durability.md), in one RocksDB
// database. Record layout: journal/format.h; normative description: docs/journal_format.md.
//
// Protocol, as the runtime uses it:
//   RegisterMapping  once per writable mapping (durable on return);
//   Stage            atomic policy: spill an evicted dirty block (not durable, not committed);
//   Commit           log a transaction: one RocksDB WriteBatch written with sync=true (a
//                    large one: its payloads first, in batches without sync, then the header
//                    with sync). When it returns OK the transaction is committed (survives
//                    process and node crash). The caller then applies the block images to
//                    the file and fdatasyncs it;
//   MarkApplied      after that fdatasync: the records are deleted lazily (no sync);
//   PendingLsns / ReadTransaction / PendingTransactions  committed transactions whose
//                    records remain, in LSN order: what recovery or a retry (re)applies.
//
// Threads: every method may be called from any thread, concurrently. Commits of different
// threads share fsyncs (RocksDB write groups). Operations that touch the same staged block
// or the same committed block of one mapping are serialized, in call order; so for each
// block the LSN order is the order in which its versions became durable.
//
// Failure: after ANY failed RocksDB write or sync (or a RocksDB background error) the journal
// is poisoned. Every later write call (RegisterMapping, UnregisterMapping, Stage, Commit,
// MarkApplied) returns kFailedPrecondition "journal poisoned by <first error>; reopen to
// recover", carrying the first error's errno (ENOSPC, EIO), without touching RocksDB.
// Reads keep working. A Commit that returned an error is indeterminate: after reopen it is
// present or absent, never partial. Destroy the Journal and Open the directory again to
// recover; RocksDB's auto-resume is disabled and Resume() is never called.
#ifndef UMAP_JOURNAL_JOURNAL_H_
#define UMAP_JOURNAL_JOURNAL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "journal/commit_mark.h"
#include "journal/format.h"
#include "journal/journal_fence.h"
#include "journal/pending_reader.h"
#include "umap/env.h"

namespace rocksdb {
class DB;
class Env;
class FileSystem;
class Statistics;
class WriteBatch;
}  // namespace rocksdb

namespace umap::journal {

struct JournalOptions {
  // The journal directory. Created with mode 0700 if missing (its parent must exist). It
  // must belong to `owner`, nobody else may be able to change it or a directory above it,
  // and it is made 0700 and its files 0600 (base/private_dir.h: CheckPrivateDir). A local
  // directory, or one on a shared file system whose byte-range locks are cluster-wide
  // (docs/operations.md §1): a writable open takes its owner lock and a new epoch
  // (journal/journal_fence.h), which keep a second process out and fence a former owner.
  std::string dir;
  // Who must own the journal: the effective user (unset), or, for root only, the uid of the
  // user whose journal root was told to work on (umap-recover --owner).
  std::optional<uid_t> owner;
  // Carries every journal byte: the RocksDB instance reaches it through
  // rocksdb::NewCompositeEnv(fs). Null = rocksdb::FileSystem::Default(). Fault injection
  // passes a rocksdb::FileSystemWrapper here.
  std::shared_ptr<rocksdb::FileSystem> fs;
  // Creates and identifies `dir`. Null = Env::Default(). Not owned; must outlive Open().
  Env* env = nullptr;
  // Bound on the bytes of staged (spilled, uncommitted) block images, all mappings together.
  uint64_t staged_quota_bytes = 1ull << 30;
  // Open normally discards staged records (their cache is gone). A runtime that reopens its
  // own journal after a write error still has the cache that refers to them: it keeps them.
  bool keep_staged = false;
  // Opens with rocksdb::DB::OpenForReadOnly: nothing is written, not even RocksDB's LOCK, so
  // it works on a full or read-only disk. The journal reads as a writable open would show it
  // (the WAL is replayed in memory; staged records are kept, as with keep_staged), and is
  // born poisoned (FailedPrecondition, errno EROFS): every write fails. The runtime opens
  // one when a writable reopen fails, so that staged and committed block images stay
  // readable (a failed read is a SIGBUS) until a writable reopen succeeds.
  bool read_only = false;
  // A reopen by the process that owns epoch `expected_epoch` (after a write error): it
  // keeps that epoch, and fails with ESTALE (fenced) when another owner took the journal
  // over meanwhile. 0: a new owner (the next epoch).
  uint64_t expected_epoch = 0;
  // No background compaction while this Journal is open (memtable flushes still run). For
  // a recovery run, which deletes the backlog it reads: compacting it meanwhile only
  // rewrites records about to die, competing with the replay for the disk and the CPU.
  // The next open compacts.
  bool defer_compaction = false;
  // Open refuses (kDataLoss) a journal whose write-ahead log is damaged with intact records
  // after the damage (journal/wal_damage.h; a torn tail is normal after a crash and is
  // recovered). With salvage it opens such a journal anyway and keeps every record that can
  // be read, before and after the damage (RocksDB's kSkipAnyCorruptedRecords); commits in
  // the unreadable bytes are lost. Only on the operator's word (umap-recover --salvage).
  bool salvage = false;
  // A data-mode transaction whose images add up to more than this is written in several
  // WriteBatches: its payload records first, without sync, in batches of about this size;
  // then its header with the last payloads and the staged deletions, with sync (the commit
  // point; docs/journal_format.md §5.2). What one commit holds in memory (its batch, and
  // RocksDB's memtable) is then bounded whatever the transaction's size, and Commit returns
  // it without images (Transaction::images_in_journal). 0: no limit (one batch always).
  size_t commit_batch_bytes = size_t{8} << 20;
  // When > 0, RocksDB starts writing back its files (WAL, tables) every this many bytes
  // (sync_file_range; RocksDB's bytes_per_sync and wal_bytes_per_sync) instead of leaving
  // them dirty in the page cache. For a process in a memory cgroup: the cgroup charges the
  // dirty page cache, which it cannot reclaim until written back, and a large atomic
  // umsync puts all its staged images in the WAL unsynced. 8 processes umsyncing 39 MiB
  // each in 256 MiB: 1 OOM kill in 2 runs without it, none with it at 1 MiB (and they
  // finish in 224 MiB). It costs large umsyncs: files deleted before the kernel wrote them
  // back are written now (1 MiB umsyncs 0.8x, one noisy run; docs/durability.md).
  uint64_t sync_written_bytes = 0;
};

using MappingInfo = MappingRecord;

// One block image handed to Commit. `data` is the block's bytes: block_size bytes, except
// that the last block of a file may be shorter (never empty). Borrowed for the call only.
struct BlockWrite {
  uint64_t block = 0;
  absl::string_view data;
};

struct CommittedBlock {
  uint64_t block = 0;
  uint32_t length = 0;  // bytes of the image
  uint32_t crc = 0;     // CRC32C of the image
  // The image. Empty for intent-mode transactions read back from the journal; Commit returns
  // the image it was given in both modes, so that the caller can apply it.
  std::string data;
  friend bool operator==(const CommittedBlock&, const CommittedBlock&) = default;
};

struct Transaction {
  uint64_t lsn = 0;  // kNoLsn: nothing was committed
  uint64_t mapping_id = 0;
  Contents contents = Contents::kData;
  std::vector<CommittedBlock> blocks;  // strictly increasing block numbers
  // No block holds its image (`data` empty; `length` and `crc` set): a commit written in
  // several batches (JournalOptions::commit_batch_bytes) returns none, and a reader that
  // wants the images reads them from the journal (ReadImage, NewPendingReader).
  bool images_in_journal = false;
  friend bool operator==(const Transaction&, const Transaction&) = default;
};

// LSNs start at 1; 0 means "no transaction".
inline constexpr uint64_t kNoLsn = 0;

class Journal {
 public:
  struct Stats {
    uint64_t commits = 0;        // successful Commit calls that wrote a transaction
    uint64_t wal_syncs = 0;      // WAL fsyncs done by RocksDB (commits / wal_syncs = group size)
    uint64_t write_groups = 0;   // RocksDB write groups led (each does one WAL write)
    uint64_t bytes_written = 0;  // bytes of WriteBatches this journal wrote successfully
    uint64_t staged_bytes = 0;   // staged image bytes now (counted against the quota)
    uint64_t staged_blocks = 0;
    uint64_t pending_txns = 0;   // committed, records still in the journal (PendingLsns)
    uint64_t unapplied_txns = 0; // committed, not yet marked applied
    uint64_t mappings = 0;
    // The highest LSN and mapping id ever issued (they never decrease, also across reopen):
    // a journal that shows the same pair as before was not written by anyone meanwhile.
    uint64_t last_lsn = 0;
    uint64_t last_mapping_id = 0;
  };

  // Opens (creating if needed) the journal in options.dir and recovers its state: mappings,
  // pending transactions (headers are verified now, payloads when read), the highest LSN
  // and mapping id ever issued.
  // Staged records are discarded: they belonged to a cache that no longer exists and were
  // never committed (unless options.keep_staged). Errors:
  //   kUnavailable         the journal is open elsewhere (message names the directory and,
  //                        when it can be found, the pid holding it), or RocksDB I/O failed;
  //   kFailedPrecondition  the journal was written in a newer format than this build reads;
  //   kDataLoss            a record is corrupt, the directory holds another database, or
  //                        the write-ahead log is damaged with records after the damage
  //                        (JournalOptions::salvage; nothing was written);
  //   kInvalidArgument     options.dir is empty;
  //   kPermissionDenied    the directory is not private to its owner (errno EPERM), or
  //                        options.owner names another user and the caller is not root;
  //   an Env error         creating the directory failed (kNotFound: no parent).
  // The "in use" errors carry errno EBUSY.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const JournalOptions& options);

  // What Open checks first: that the existing directory options.dir is private to its
  // owner (JournalOptions::dir, ::owner). OK or kPermissionDenied; other errors: errno.
  static absl::Status CheckPrivate(const JournalOptions& options);

  // What Open checks before RocksDB touches the directory (journal/integrity.h): OK, or the
  // kDataLoss that Open returns without options.salvage. Writes nothing.
  static absl::Status CheckIntegrity(const JournalOptions& options);
  // CheckIntegrity worded as Open refuses the journal: with what to do (keep a copy, then
  // salvage), or the journal reported in use when a live process holds it.
  static absl::Status CheckIntegrityForOpen(const JournalOptions& options);

  // Closes RocksDB, after flushing its log into a table file if anything was written (WriteCloseMark).
  // Pending transactions stay in the journal for the next Open.
  // REQUIRES: no other call on this Journal is running.
  ~Journal();

  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Registers a file; returns its mapping id (never reused, also across reopen). Durable on
  // return (sync). kInvalidArgument: block_size not a power of two, or intent with atomic.
  absl::StatusOr<uint64_t> RegisterMapping(const FileIdentity& file, uint32_t block_size,
                                           Policy policy, Contents contents);

  // Forgets a mapping and discards its staged blocks (not synced: a crash may bring the
  // mapping record back, harmlessly). kNotFound: unknown id. kFailedPrecondition: the
  // mapping still has committed transactions not applied (they need its file identity).
  // Waits for in-flight Stage/Commit calls on the mapping.
  absl::Status UnregisterMapping(uint64_t mapping_id);

  // Spills the image of a dirty block of an atomic-policy mapping: replaces an older staged
  // image of the same block. Not synced and not committed: it never reaches the file unless
  // a later Commit takes it, and a reopen discards it. Errors: kNotFound (mapping),
  // kInvalidArgument (relaxed mapping, empty or oversized data), kResourceExhausted (the
  // staged quota would be exceeded; nothing was written: sync more, raise the quota, or
  // use the relaxed policy).
  absl::Status Stage(uint64_t mapping_id, uint64_t block, absl::string_view data);

  // The staged image of a block, or nullopt. kDataLoss if the record is corrupt.
  absl::StatusOr<std::optional<std::string>> ReadStaged(uint64_t mapping_id, uint64_t block);

  // Commits one transaction of `mapping_id`: the images in `blocks` plus every staged block
  // of the mapping with first_block <= block < end_block (a block both staged and in
  // `blocks` takes the `blocks` version). All staged records it supersedes (those in the
  // range and those of any block in `blocks`) are deleted in the same WriteBatch as the
  // header, which is written with sync=true. Returns the transaction with every image, for
  // the caller to apply, then MarkApplied; a transaction over commit_batch_bytes is written
  // in several batches (payloads first, crash point "journal.mid_stream" after each) and
  // returned without images (images_in_journal). If there is nothing to commit, writes
  // nothing and returns a Transaction with lsn == kNoLsn.
  // Errors: kNotFound (mapping), kInvalidArgument (empty or oversized image, a block listed
  // twice, first_block > end_block), kDataLoss (a staged record is corrupt; nothing was
  // written), a converted RocksDB error (the journal is then poisoned; the commit is
  // indeterminate), kFailedPrecondition (poisoned).
  // kCallerKeeps: the returned transaction's blocks that came from `blocks` carry no copy
  // of their image (`data` empty; `length` and `crc` set): the caller, which still holds
  // them, applies from its own buffers, and copies them into the transaction if it keeps
  // the transaction past them. The staged images a commit takes are always returned.
  enum class ImageCopies { kCopy, kCallerKeeps };
  absl::StatusOr<Transaction> Commit(uint64_t mapping_id, absl::Span<const BlockWrite> blocks,
                                     uint64_t first_block, uint64_t end_block,
                                     ImageCopies copies = ImageCopies::kCopy);

  // Marks committed transactions as applied (their images are durable in the file).
  // REQUIRES: for each block, the caller applies transactions in LSN order.
  // Their records are deleted in one batch, without sync: re-applying a block image is
  // idempotent. May be called in any order: the records of an applied transaction are kept
  // until no older, unapplied transaction of its mapping shares a block with it, so that a
  // replay (after a crash, or of PendingLsns) can never roll such a block back. Marking an
  // LSN twice is OK. kNotFound: an LSN that is not pending (nothing is marked then).
  absl::Status MarkApplied(uint64_t lsn);
  absl::Status MarkApplied(absl::Span<const uint64_t> lsns);

  // Makes every record written so far durable: the applied marks and watermark that
  // MarkApplied writes without sync (a checkpoint hands the journal on in exactly this
  // state). A failure poisons the journal.
  absl::Status Sync();

  // The committed transactions whose records are still in the journal, in LSN order: every
  // one not yet marked applied, and any marked one kept because an older unmarked one
  // shares a block with it. This is what a reopen finds. Replaying all of them in LSN order
  // over a file to which transactions were applied in LSN order gives the committed state.
  std::vector<uint64_t> PendingLsns() const;
  // Reads one committed transaction with its images (verified against their CRCs).
  // kNotFound: no such transaction (never committed, or applied and deleted). kDataLoss:
  // a record is corrupt or missing.
  // kLeaveInJournal: the header alone, checked, as a transaction whose images stay in the
  // journal (images_in_journal, in data mode): for a reader that applies it a few images at
  // a time, whatever its size.
  enum class Images { kRead, kLeaveInJournal };
  absl::StatusOr<Transaction> ReadTransaction(uint64_t lsn, Images images = Images::kRead);
  // Copies the image of `entry`, a block of committed transaction `lsn` (as its header or
  // Commit listed it), into dst (at most dst.size() bytes), checked against entry's length
  // and CRC. kNotFound: no such payload. kDataLoss: corrupt or not matching.
  absl::Status ReadImage(uint64_t lsn, const CommittedBlock& entry, absl::Span<char> dst);
  // ReadTransaction of every PendingLsns() entry. Holds all images in memory: recovery of a
  // large journal streams them through NewPendingReader instead. A transaction deleted while
  // this runs (marked applied) is left out.
  absl::StatusOr<std::vector<Transaction>> PendingTransactions();
  // A reader of the committed records as they are now (a snapshot): every header, then the
  // images in one ordered pass, in bounded memory (journal/pending_reader.h). It must not
  // outlive this Journal. Records marked applied and deleted later stay visible to it.
  std::unique_ptr<PendingReader> NewPendingReader(const PendingReaderOptions& options);

  std::vector<MappingInfo> Mappings() const;
  Stats stats() const;
  // OK, or the kFailedPrecondition status that write calls return.
  absl::Status poisoned();
  // OK while this process owns the journal (JournalFence::Check: its owner lock stands and
  // the owner record names it). Once another owner took over: kFailedPrecondition with
  // errno ESTALE naming it, for good, and the journal is poisoned. A process resumed from a
  // checkpoint calls it before it writes again. A read-only journal: OK.
  absl::Status CheckOwner();
  // CheckOwner, unless a check succeeded within the last few milliseconds
  // (JournalFence::CheckFresh). Commit calls it first; so must anything that writes the
  // journal's transactions into files (applies).
  absl::Status CheckOwnerFresh();
  // The owner epoch of this open (0 for a read-only open).
  uint64_t epoch() const;
  // Test-only: the fence of a writable open (null for a read-only one).
  JournalFence* TEST_fence() { return fence_.get(); }
  const std::string& dir() const { return dir_; }

 private:
  class Listener;
  struct Claim;
  class ClaimGuard;
  struct PendingTxn {
    uint64_t mapping_id = 0;
    std::vector<uint64_t> blocks;  // increasing
    Contents contents = Contents::kData;
    bool applied = false;
  };
  using StagedId = std::pair<uint64_t, uint64_t>;  // (mapping id, block)
  using DirId = std::pair<uint64_t, uint64_t>;     // (device, inode) of the directory

  Journal(std::string dir, DirId dir_id, uint64_t staged_quota, uint64_t commit_batch_bytes,
          std::unique_ptr<JournalFence> fence, std::unique_ptr<rocksdb::Env> env,
          std::shared_ptr<Listener> listener, std::shared_ptr<rocksdb::Statistics> statistics,
          rocksdb::DB* db);

  absl::Status Recover(bool keep_staged, bool read_only);
  // Parts of Recover: the format record (read and checked first: nothing else is read
  // before the version is known; written in an empty journal), and the staged records
  // (discarded, or indexed again for a runtime reopening its own journal).
  absl::Status RecoverFormatLocked(bool read_only) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RecoverStagedLocked(bool keep_staged) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Part of Recover: deletes the payload records whose transaction has no header (a
  // streamed commit cut short by a crash or a write error; never committed), and keeps
  // their LSNs from being handed out again. A read-only open only steps over them.
  absl::Status DropOrphanPayloads(bool read_only) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The staged record of (mapping_id, block), read into *value; the result views it.
  // kDataLoss: missing (the caller's index says it is there) or corrupt.
  absl::StatusOr<StagedBlock> ReadStagedRecord(uint64_t mapping_id, uint64_t block,
                                               std::string* value);
  // Commit's writing of a transaction over commit_batch_bytes_: the payloads in batches
  // without sync, then `tail` (header and staged deletions) with the last of them, synced
  // by WriteAndSettle. Staged images are read here, in one ordered pass. On an error after a
  // payload batch was written, those payloads are deleted again (or, if even that fails,
  // by the next Open); `claim` is released in every case.
  absl::Status CommitStreamed(Transaction* txn, absl::Span<const BlockWrite* const> given,
                              absl::Span<const uint64_t> staged_to_take,
                              absl::FunctionRef<void(rocksdb::WriteBatch*)> tail,
                              const Claim* claim, absl::FunctionRef<void()> on_success)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckOwnerWith(bool fresh_ok);
  // A clean close moves the log into a table file (a RocksDB flush), so that a closed
  // journal's records are all in block-checksummed tables and none is in a WAL tail, where
  // damage could not be told from the torn tail of a crash (docs/journal_format.md §8).
  void FlushAtClose();
  // After a commit's synced `batch` was written: records it as the last acknowledged commit
  // (journal/commit_mark.h) before Commit returns. A failure poisons the journal.
  absl::Status PublishCommit(const rocksdb::WriteBatch& batch, uint64_t lsn);
  // Writes `batch`; the caller poisons the journal if this fails.
  absl::Status Write(rocksdb::WriteBatch* batch, bool sync, absl::string_view what);
  // The ending of every write call: writes `batch`, then, with mu_ held, releases `claim`
  // (when not null) and either poisons the journal and returns the write's error, or counts
  // the batch's bytes and runs `on_success` (which updates the in-memory state).
  absl::Status WriteAndSettle(rocksdb::WriteBatch* batch, bool sync, absl::string_view what,
                              const Claim* claim, absl::FunctionRef<void()> on_success)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A commit's batch, at least `reserve` bytes large: a spare one kept by an earlier commit
  // when one is large enough, else a new one. A batch allocated and freed per commit stays,
  // freed, in the malloc arena of the thread that committed: with many threads committing
  // (the umsyncs of a mapping come from any of its threads) that is one transaction's size
  // per thread. ReturnBatch keeps up to kSpareBatches of at most kSpareBatchBytes.
  std::unique_ptr<rocksdb::WriteBatch> TakeBatch(size_t reserve) ABSL_LOCKS_EXCLUDED(spare_mu_);
  void ReturnBatch(std::unique_ptr<rocksdb::WriteBatch> batch) ABSL_LOCKS_EXCLUDED(spare_mu_);
  static constexpr size_t kSpareBatches = 4;
  static constexpr size_t kSpareBatchBytes = size_t{16} << 20;
  // OK, or the poisoned status. Also picks up a background error seen by the listener.
  absl::Status WritableLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PoisonLocked(const absl::Status& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The registered mapping `mapping_id`, or kNotFound naming it.
  absl::StatusOr<const MappingInfo*> FindMappingLocked(uint64_t mapping_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ConflictsLocked(const Claim& claim) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until no registered claim conflicts with `claim`, then registers it.
  void AcquireLocked(const Claim* claim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(const Claim* claim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the applied transactions whose records may now be deleted from pending_ and
  // returns them.
  std::vector<std::pair<uint64_t, PendingTxn>> TakeDeletableLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Const after construction.
  const std::string dir_;
  const DirId dir_id_;
  const uint64_t staged_quota_;
  const uint64_t commit_batch_bytes_;  // 0: no limit
  // Null for a read-only open. Declared before env_: the FencedFs inside env_ uses it.
  const std::unique_ptr<JournalFence> fence_;
  const std::unique_ptr<rocksdb::Env> env_;  // the composite Env over JournalOptions::fs
  const std::shared_ptr<Listener> listener_;
  const std::shared_ptr<rocksdb::Statistics> statistics_;
  rocksdb::DB* const db_;  // owned; closed and deleted in ~Journal
  // The record of the last acknowledged commit; null for a read-only open. Set by Open.
  std::unique_ptr<CommitMark> mark_;

  // Serializes the writes that carry the watermark record (RegisterMapping, MarkApplied), so
  // that they reach the WAL in the order their values were computed. Taken before mu_.
  absl::Mutex watermark_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  absl::Mutex spare_mu_;
  std::vector<std::unique_ptr<rocksdb::WriteBatch>> spare_batches_ ABSL_GUARDED_BY(spare_mu_);
  absl::CondVar claims_changed_;
  absl::Status poison_ ABSL_GUARDED_BY(mu_);
  uint32_t format_version_ ABSL_GUARDED_BY(mu_) = kFormatVersion;  // the journal's F record
  uint64_t last_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_mapping_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, MappingInfo> mappings_ ABSL_GUARDED_BY(mu_);
  std::map<StagedId, uint64_t> staged_ ABSL_GUARDED_BY(mu_);  // -> image bytes
  uint64_t staged_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, PendingTxn> pending_ ABSL_GUARDED_BY(mu_);  // by LSN
  uint64_t unapplied_ ABSL_GUARDED_BY(mu_) = 0;  // pending_ entries with !applied
  std::vector<const Claim*> claims_ ABSL_GUARDED_BY(mu_);
  uint64_t commits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_written_ ABSL_GUARDED_BY(mu_) = 0;
};


}  // namespace umap::journal

#endif  // UMAP_JOURNAL_JOURNAL_H_
