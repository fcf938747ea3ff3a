// PendingReader: one ordered pass over the committed transactions of a journal (recovery's
// streaming reader, docs/recovery.md "Streaming the backlog").
//
// It reads a RocksDB snapshot taken when it was made: the transaction headers ('T' records)
// with one iterator, the payloads ('P' records) with another, each in key order, which is
// LSN order and, within a transaction, block order (docs/journal_format.md §2). No record is
// fetched by a point lookup and none is read twice; what it holds is RocksDB's read-ahead
// buffer and the one data block the current record lies in, whatever the size of a
// transaction. Every record is checked as it is returned (record CRCs of headers; payload
// CRC, length and header cross-check of images).
//
// Thread safety: one thread at a time per reader; several readers of one journal may run at
// once. A reader must not outlive the Journal that made it (Journal::NewPendingReader).
#ifndef UMAP_JOURNAL_PENDING_READER_H_
#define UMAP_JOURNAL_PENDING_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "journal/format.h"

namespace rocksdb {
class DB;
class Iterator;
class ManagedSnapshot;
class Slice;
}  // namespace rocksdb

namespace umap::journal {

struct PendingReaderOptions {
  // Bytes the payload iterator reads ahead of the record it returns (RocksDB's
  // ReadOptions::readahead_size). A replay reads the backlog front to back, so a MiB pays;
  // more costs memory, not speed: RocksDB keeps a prefetch buffer of this size (up to two)
  // in every level's table iterator, so a reader holds a few times it (4 MiB gave a 4 GiB
  // one-transaction replay 281 MiB peak RSS, 1 MiB 235 MiB, at the same rate).
  size_t readahead_bytes = 1 << 20;
};

class PendingReader {
 public:
  ~PendingReader();
  PendingReader(const PendingReader&) = delete;
  PendingReader& operator=(const PendingReader&) = delete;

  // Calls fn with every transaction header in the snapshot, in LSN order; fn's error stops
  // the scan and is returned. kDataLoss: a header is corrupt (the message names its key).
  absl::Status ForEachHeader(absl::FunctionRef<absl::Status(const TxnHeader&)> fn);

  // The header of transaction `lsn`. kNotFound: not in the snapshot. kDataLoss: corrupt.
  absl::StatusOr<TxnHeader> ReadHeader(uint64_t lsn);

  // The image of `entry`, a block of transaction `lsn` as its header lists it, checked: the
  // payload record exists and decodes, its CRC matches its bytes, and its CRC and length
  // equal the header entry's. Requests come in increasing (lsn, block) order; payloads
  // between two requests are stepped over (read, not decoded) or sought past. The view is
  // valid until the next call. kDataLoss names the journal, LSN and block.
  // REQUIRES: (lsn, entry.block) greater than the previous request's.
  absl::StatusOr<absl::string_view> ReadImage(uint64_t lsn, const TxnBlock& entry);

 private:
  friend class Journal;
  PendingReader(rocksdb::DB* db, std::string dir, const PendingReaderOptions& options);
  // Positions payloads_ at the first key >= `key`: a few Next() calls when it is just
  // ahead, else a Seek.
  void PositionAt(const std::string& key);

  rocksdb::DB* const db_;
  const std::string dir_;
  const PendingReaderOptions options_;
  const std::unique_ptr<rocksdb::ManagedSnapshot> snapshot_;
  const std::string payload_end_;                  // upper bound of the payload iterator
  const std::unique_ptr<rocksdb::Slice> payload_end_slice_;
  std::unique_ptr<rocksdb::Iterator> payloads_;    // made by the first ReadImage
  std::string key_;                                // the key ReadImage looks for
};

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_PENDING_READER_H_
