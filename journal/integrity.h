// Integrity of a journal's files, checked before RocksDB opens them for writing (a writable
// open rewrites the database: it moves the recovered log into a table file and deletes the
// old log and every file its MANIFEST does not name, the evidence with them).
// docs/journal_format.md §8 gives the reasons; in short, RocksDB 7.8's own open is silent
// about three kinds of loss, and this check reports each:
//   - damage in the middle of a WAL with intact, durable records after it (point-in-time
//     recovery keeps only the prefix; journal/wal_damage.h);
//   - writes that are in no file RocksDB reads: the sequence numbers of the records it would
//     replay do not continue from those its MANIFEST records (a MANIFEST that lost an edit
//     whose WAL was then deleted, or a WAL file missing between two others);
//   - a complete table file that the MANIFEST does not name and that holds commits newer
//     than anything RocksDB would recover (a lost flush), and a directory whose CURRENT file
//     is gone while the database's files are there (RocksDB would start an empty database).
// What RocksDB reports itself (a CRC or block checksum mismatch, a missing table file, a
// MANIFEST that does not parse) stays its error.
#ifndef UMAP_JOURNAL_INTEGRITY_H_
#define UMAP_JOURNAL_INTEGRITY_H_

#include <string>

#include "absl/status/status.h"

namespace rocksdb {
class FileSystem;
struct Options;
}  // namespace rocksdb

namespace umap::journal {

// OK, or kDataLoss (errno EIO) saying what is lost or unreadable and that acknowledged
// commits may be lost. Reads `dir` through `fs`, and opens it once read-only with
// `options` (its env must carry `fs`); writes nothing. A missing or empty directory is OK
// (a new journal). Other errors: the file system's, or RocksDB's read-only open's.
absl::Status CheckJournalIntegrity(rocksdb::FileSystem& fs, const rocksdb::Options& options,
                                   const std::string& dir);

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_INTEGRITY_H_
