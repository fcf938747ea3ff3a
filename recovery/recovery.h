// Recovery: replays the committed transactions of a journal into their files, verifies file
// blocks against the journal's CRCs, and reports what it found (the protocol and its recovery
// rules: docs/durability.md; records: docs/journal_format.md §5.5 and §6; user guide
// docs/recovery.md).
//
// Two entry points:
//   Recover(options)            opens options.journal_dir itself (the umap-recover CLI; a
//                               journal held by a live process is refused with kUnavailable
//                               naming the pid), and closes it before returning;
//   Recover(journal, options)   works on a Journal the caller already holds open (a runtime
//                               that maps a file with pending records again cannot open its
//                               own journal twice). Set options.only_file and/or
//                               options.skip_mappings so that mappings the caller is using
//                               right now are left alone: a mapping recovery drains is
//                               unregistered.
//
// What a run does (Mode::kReplay), per target file, with nothing written to a file before
// every check for that file passed:
//   1. scan: read every pending transaction header (one pass, no image) and check that each
//      block lies inside the journaled file; a corrupt header refuses the whole run
//      (kDataLoss) before anything is written;
//   2. check: resolve the target path (options.relocations), then compare the file found
//      there with the mapping record: device and inode (skipped for a relocated path) and
//      size (skipped with options.accept_size_change); open it for writing;
//   3. plan: find the newest pending version of every block range of the file; classify
//      the ranges whose newest version is intent-only (no payload): the file is read and
//      each is judged applied / not applied / torn / not applied or torn
//      (docs/journal_format.md §6, refined in docs/recovery.md);
//   4. replay: stream the newest data-mode image of every block out of the journal in LSN
//      order (one ordered pass, each image checked against its CRC as it is read, in
//      bounded buffers) and write each once, through the merged, deadline-bounded
//      WriteEngine (base/write_engine.h); every options.checkpoint_bytes, fdatasync the
//      file and MarkApplied the transactions whose newest images are all written, so that
//      a killed run restarts from there; at the end, the same for the rest. A damaged image
//      stops that file's replay at the damaged record (kRefused, Problem::kCorruptRecord):
//      what came before it is written and checkpointed, nothing after it;
//   5. forget: unregister each mapping that has no pending transaction left (this also
//      discards its uncommitted staged blocks).
// Files are replayed in parallel (options.parallel_files). kDryRun does 1-3 and reads the
// images replay would write (checking their CRCs), with the target opened for writing to
// check it is writable, and writes nothing; it reports what kReplay would write. kVerify
// does the same with every block range (data and intent) classified and the file opened
// read-only: a block whose file bytes differ from its newest committed version is listed.
// Neither writes to a file or to the journal.
//
// Crash safety: a file receives only committed images, each block only its newest one, and
// a transaction is marked applied only after the fdatasync that made the newest images of
// all of its blocks durable. So a run killed at any instant, or run twice, leaves the same
// file bytes after the next complete run: those of every committed transaction applied in
// LSN order. The crash point "recovery.mid_replay" fires before each write is issued.
//
// Threads: one call at a time per journal. Recover(journal, ...) may run while other
// threads use the journal for other mappings.
#ifndef UMAP_RECOVERY_RECOVERY_H_
#define UMAP_RECOVERY_RECOVERY_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "journal/journal.h"
#include "umap/env.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace umap {
class WriteEngine;
}  // namespace umap

namespace umap::recovery {

enum class Mode {
  kReplay,  // write committed images, sync, mark applied, forget drained mappings
  kDryRun,  // every check and read of kReplay; writes nothing (files or journal)
  kVerify,  // compare every pending block with the file; writes nothing
};
absl::string_view ModeName(Mode mode);

// Where a journaled path is now. `from` is either a whole journaled path or a directory
// prefix of journaled paths (`/mnt/old` relocates `/mnt/old/a/b` to `<to>/a/b`); the
// longest matching rule wins. A relocated target skips the device/inode check (a
// different mount or node gives different numbers) but keeps the size check.
struct PathRelocation {
  std::string from;
  std::string to;
};
// Parses "OLD=NEW" (the CLI's --force-path). kInvalidArgument when malformed or relative.
absl::StatusOr<PathRelocation> ParseRelocation(absl::string_view spec);

struct Progress {
  // kScan: reading the transaction headers; kReplay: writing images; kSync: a checkpoint's
  // fdatasync; kCheck: reading and checking the images without writing (dry run, verify).
  enum class Phase { kScan, kReplay, kSync, kCheck };
  Phase phase = Phase::kScan;
  uint64_t done = 0;   // kScan: transactions read; otherwise image bytes handled
  uint64_t total = 0;  // same unit as done
  uint64_t elapsed_micros = 0;  // since the start of the run
  // `done` per second since the phase began (kReplay and kSync count as one phase), and
  // the time left at that rate; both 0 until the phase has run long enough to tell.
  uint64_t rate_per_second = 0;
  uint64_t eta_micros = 0;
  std::string path;    // the file being replayed, or "N files" when several are at once
};
absl::string_view PhaseName(Progress::Phase phase);

struct RecoverOptions {
  // Recover(options) only: the journal directory. Must exist and hold a journal, unless
  // allow_missing_journal (then a missing or empty directory is "nothing to do").
  std::string journal_dir;
  bool allow_missing_journal = false;
  // Recover(options) only: root confirms that the journal is user `journal_owner`'s
  // (journal::JournalOptions::owner). Unset: it must be the caller's own.
  std::optional<uid_t> journal_owner;
  // Carries every byte of the target files. Null = Env::Default(). Not owned.
  Env* env = nullptr;
  // Recover(options) only: the journal's RocksDB file system (null = default) and the Env
  // that identifies its directory (null = env).
  std::shared_ptr<rocksdb::FileSystem> journal_fs;
  Env* journal_env = nullptr;
  Mode mode = Mode::kReplay;
  // Recover(options) only: the journal is damaged (an open refuses it with kDataLoss, see
  // journal/integrity.h) and the operator chose to keep what can be read: every WAL record
  // before and after the damage (journal::JournalOptions::salvage). Report::salvaged says
  // what was damaged. Modes other than kReplay open it read-only: they show what a
  // salvaging replay would do and write nothing.
  bool salvage = false;
  std::vector<PathRelocation> relocations;
  // Replay into a file whose size differs from the journaled size. Umap never changes a
  // file's size, so a different size means another file or a truncation: refused unless set.
  bool accept_size_change = false;
  // Only the mappings of this file: same device and inode, or the same non-empty path.
  std::optional<FileIdentity> only_file;
  // Mappings to leave alone (in-process: the caller's live mappings).
  std::vector<uint64_t> skip_mappings;
  // kReplay: after each fdatasync, read every block written since the previous one back and
  // compare its CRC (a mismatch is an I/O error: the transactions stay pending).
  bool verify_after_replay = false;
  // kReplay: fdatasync and mark applied after this many image bytes (0 = only at the end).
  // A run killed between two checkpoints writes at most this much again.
  uint64_t checkpoint_bytes = 256ull << 20;
  // Memory for images on their way from the journal to the files, all files together
  // (read_threads + 1 buffers per file replayed at once; each holds at least the largest
  // block image).
  uint64_t buffer_bytes = 64ull << 20;
  // Files (groups of mappings of one file) replayed at the same time, and threads reading
  // (and copying and checking) each one's images.
  size_t parallel_files = 4;
  size_t read_threads = 2;
  // What the journal reader reads ahead of the image it copies (per reading thread;
  // journal/pending_reader.h says why not more).
  uint64_t readahead_bytes = 1ull << 20;
  // The write path: null = an engine of recovery's own with the settings below (io_uring,
  // up to io_depth merged writes of at most io_max_bytes in flight per file, each with a
  // deadline of io_timeout_ms). The runtime passes its own engine for map-time replay.
  WriteEngine* write_engine = nullptr;
  unsigned io_depth = 16;
  uint64_t io_max_bytes = 1ull << 20;
  uint64_t io_timeout_ms = 30'000;
  // Called on the calling thread at most every progress_interval_micros, and once at the
  // end of each phase. May be empty.
  std::function<void(const Progress&)> progress;
  uint64_t progress_interval_micros = 200'000;
  // Block findings kept per mapping in the report (the counters count all of them).
  size_t max_findings = 1000;
};

// What the file holds for a block, judged against its newest pending version.
enum class BlockClass {
  kApplied,     // the newest committed image
  kNotApplied,  // an older committed image still pending in the journal (matched_lsn)
  kTorn,        // neither the newest nor any older pending version: a partial write (or,
                // after a power cut, an older version whose unsynced write-back was lost)
  kNotAppliedOrTorn,  // not the newest, and no older version is known to compare with:
                      // the file holds an unjournaled version (not applied) or a torn one
};
absl::string_view BlockClassName(BlockClass c);

struct BlockFinding {
  uint64_t mapping_id = 0;
  uint64_t lsn = 0;         // the newest pending transaction that writes the block
  uint64_t block = 0;
  uint64_t offset = 0;      // block * block_size
  uint32_t length = 0;      // bytes of the image
  uint32_t expected_crc = 0;
  uint32_t found_crc = 0;   // CRC32C of the bytes read (fewer if the file ends early)
  BlockClass cls = BlockClass::kNotAppliedOrTorn;
  uint64_t matched_lsn = 0;  // kNotApplied: the LSN whose image the file holds
  bool repairable = false;   // a data-mode image exists (replay rewrites it)
};

enum class MappingState {
  kClean,        // no pending transaction
  kReplayed,     // every pending transaction replayed (or classified) and marked applied
  kWouldReplay,  // kDryRun: every check passed
  kVerified,     // kVerify: every check passed (see the findings)
  kRefused,      // a check failed; nothing written; transactions kept
  kIoError,      // a read, write or sync failed; transactions kept; safe to rerun
};
absl::string_view MappingStateName(MappingState s);

// Why a mapping was refused (kRefused) or failed (kIoError).
enum class Problem {
  kNone,
  kNoPath,            // the mapping record has no path
  kMissingFile,       // nothing at the target path
  kIdentityMismatch,  // another device/inode at the path
  kSizeMismatch,      // the file's size differs from the journaled size
  kNotWritable,       // cannot open the file for writing (EACCES, EROFS, EPERM)
  kBadTransaction,    // a transaction writes outside the journaled file
  kCorruptRecord,     // a journal record of it is damaged: replay stopped there
  kIo,                // read/write/sync/stat error
  kJournal,           // the journal failed (MarkApplied or UnregisterMapping)
};
absl::string_view ProblemName(Problem p);

struct MappingReport {
  journal::MappingInfo mapping;  // the journaled record
  std::string target_path;       // where recovery looked (after relocation)
  bool relocated = false;
  MappingState state = MappingState::kClean;
  Problem problem = Problem::kNone;
  absl::Status status;           // the refusal or error, with file, offset and LSN

  uint64_t first_lsn = 0, last_lsn = 0;  // pending range (0 when none)
  uint64_t txns_pending = 0;
  uint64_t txns_replayed = 0;    // data transactions whose images are in the file and marked
  uint64_t txns_discarded = 0;   // intent transactions: nothing to replay, marked applied
  uint64_t blocks_pending = 0;   // block entries of the pending transactions
  uint64_t bytes_pending = 0;    // their image bytes
  uint64_t blocks_to_write = 0;  // newest data-mode version of each block (what replay writes)
  uint64_t bytes_to_write = 0;
  uint64_t blocks_written = 0;
  uint64_t bytes_written = 0;
  uint64_t blocks_verified = 0;  // read from the file and equal to the newest version
  uint64_t blocks_not_applied = 0;
  uint64_t blocks_torn = 0;
  uint64_t blocks_not_applied_or_torn = 0;
  uint64_t staged_discarded = 0;  // uncommitted staged blocks dropped with the mapping
  bool unregistered = false;
  uint64_t duration_micros = 0;
  std::vector<BlockFinding> findings;  // blocks not kApplied, at most max_findings
  uint64_t findings_omitted = 0;
};

struct Report {
  std::string journal_dir;
  Mode mode = Mode::kReplay;
  bool journal_found = true;      // false: allow_missing_journal and nothing there
  uint64_t pending_txns = 0;      // in the whole journal at the start
  uint64_t staged_blocks = 0;     // uncommitted staged blocks at open (Recover(options))
  uint64_t staged_bytes = 0;
  std::vector<MappingReport> mappings;  // by mapping id; filtered ones left out
  absl::Status journal_status;    // a journal error after the scan (MarkApplied etc.)
  // RecoverOptions::salvage: the damage the open went past (the kDataLoss an open without
  // salvage returns), OK when the journal was whole. Not OK counts as data loss (exit 1).
  absl::Status salvaged;
  uint64_t duration_micros = 0;
  // Where the time went (microseconds): open and close of the journal; reading the
  // transaction headers (scan); then, summed over the files, the readers streaming and
  // checking the images (read) and the writes, which overlap each other, the fdatasyncs
  // (sync) and MarkApplied (mark).
  struct Timings {
    uint64_t open = 0, scan = 0, read = 0, write = 0, sync = 0, mark = 0, close = 0;
  } timings;
  // The peak resident memory of the process that ran the recovery, at its end (VmHWM,
  // base/process_memory.h): the memory a restart needs for it.
  uint64_t peak_rss_bytes = 0;
};

// The umap-recover exit codes (docs/umap-recover.1.md).
enum class ExitCode : int {
  kOk = 0,          // nothing to do, or everything replayed / verified equal
  kDataLoss = 1,    // done, but data was discarded or cannot be repaired (listed)
  kRefused = 2,     // refused: owner alive, identity/size mismatch, newer or corrupt journal
  kIoError = 3,     // I/O error: journal kept, safe to rerun
};
// For a report: the worst of its mappings (kRefused > kIoError > kDataLoss > kOk), and
// kDataLoss at least after a salvage that went past damage.
ExitCode ExitCodeOf(const Report& report);

// Whether `found` is the file the journal names (or a checkpointed runtime mapped). The
// inode must match. So must the device, except that file systems without a block device of
// their own (FUSE — GlusterFS —, NFS, and other anonymous-device mounts, major number 0) get
// a new st_dev at every mount: after a client restart or a node reboot the same file comes
// back under another device number. A journaled birth (FileIdentity::birth) must be found
// again: a file deleted and created again at the same inode number is another file.
bool SameFile(const FileIdentity& journaled, const FileIdentity& found);
// "device D inode I born TIME" (or "id HEX"), for messages.
std::string DescribeIdentity(const FileIdentity& file);
// For an error Recover returned instead of a report.
ExitCode ExitCodeOf(const absl::Status& status);

// Opens options.journal_dir, recovers it, closes it. Errors (nothing was written):
//   kUnavailable         the journal is held by a live process (errno EBUSY; the message
//                        names the pid), or journal I/O failed;
//   kNotFound            no journal in journal_dir (and !allow_missing_journal);
//   kFailedPrecondition  the journal has a newer format;
//   kDataLoss            a transaction header is corrupt (the message names the LSN);
//   kInvalidArgument     bad options.
// Per-mapping refusals and I/O errors are in the report, not in the status; so is a damaged
// image, found while that file is replayed (Problem::kCorruptRecord).
absl::StatusOr<Report> Recover(const RecoverOptions& options);

// The same on a journal the caller holds open (options.journal_dir, journal_fs and
// journal_env are ignored; the report's staged counts stay 0).
absl::StatusOr<Report> Recover(journal::Journal& journal, const RecoverOptions& options);

}  // namespace umap::recovery

#endif  // UMAP_RECOVERY_RECOVERY_H_
