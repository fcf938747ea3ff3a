// WAL damage: tells a torn tail of a journal's write-ahead log (what a crash leaves, and
// what RocksDB's point-in-time recovery is right to drop) from damage with intact records
// after it (a flipped bit, a zeroed sector: point-in-time recovery would silently drop
// every record after it, acknowledged commits included). docs/journal_format.md §8 says
// why and how; Journal::Open refuses a damaged journal unless told to salvage it.
//
// The scan reads the WAL files as RocksDB's log format lays them out (32 KiB blocks of
// physical records, each with a masked CRC32C, a length and a type; a logical record is one
// WriteBatch): RocksDB's own reader drops the rest of a 32 KiB block after a bad record
// (the right thing for recovery: a corrupt length cannot be trusted) and so cannot say
// whether intact records follow. This scan only looks; what the journal recovers always
// comes from RocksDB itself.
#ifndef UMAP_JOURNAL_WAL_DAMAGE_H_
#define UMAP_JOURNAL_WAL_DAMAGE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace umap::journal {

struct WalDamage {
  std::string file;       // the WAL file (name within the journal directory) of the damage
  uint64_t offset = 0;    // its first unreadable byte: the start of the first logical record
                          // that cannot be read whole
  uint64_t end = 0;       // the first intact byte after it in that file (its size when the
                          // intact records are all in later WAL files)
  uint64_t records_after = 0;  // intact WAL records (write batches) after the damage
  uint64_t fragments_after = 0;  // intact physical records after it (records_after's and
                                 // the pieces of records whose start is unreadable)
  uint64_t commits_after = 0;    // transactions committed in records_after
  uint64_t first_lsn_after = 0;  // their lowest and highest LSN (0: none)
  uint64_t last_lsn_after = 0;
  uint64_t last_lsn_before = 0;  // the highest LSN committed before the damage (0: none)
};

// Scans the write-ahead log files of the journal in `dir` numbered min_wal_number or more
// (older ones are obsolete: RocksDB does not read them), in log order, through `fs`. Returns
// the first damage after which the log proves that the damaged bytes had been durable: an
// intact synced record (a commit, a registration) followed by any intact
// record, in the same file or a later one. Otherwise (every file reads whole, or the damage
// is a tail that no completed sync covered, even if a power cut persisted some later
// unsynced bytes) nullopt: RocksDB's point-in-time recovery keeps exactly what was
// acknowledged. Errors: the file system's (listing or reading a file).
absl::StatusOr<std::optional<WalDamage>> FindWalDamage(rocksdb::FileSystem& fs,
                                                       const std::string& dir,
                                                       uint64_t min_wal_number = 0);

// Where the readable records of the WAL file at `path` end: the offset after the last
// logical record that reads whole from the start of the file. What follows is a torn or
// damaged record, the zeros a WAL is written into (journal/wal_zero_fill.h), or nothing.
// Errors: the file system's.
absl::StatusOr<uint64_t> WalRecordsEnd(rocksdb::FileSystem& fs, const std::string& path);

// True if every byte of the file at `path` is zero (a WAL written into zeros and never
// appended to). Errors: the file system's.
absl::StatusOr<bool> AllZeros(rocksdb::FileSystem& fs, const std::string& path);

// The refusal of a damaged journal: kDataLoss (errno EIO), naming the bytes that cannot be
// read, the LSNs around them, that acknowledged commits may be lost, and what to do.
absl::Status DamagedWalError(const std::string& dir, const WalDamage& damage);

// The LSNs of the transactions a WAL record (one WriteBatch's bytes) commits.
std::vector<uint64_t> CommitsIn(absl::string_view record);

// A one-line description of `damage` (the bytes, the records and LSNs after it).
std::string DescribeWalDamage(const WalDamage& damage);

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_WAL_DAMAGE_H_
