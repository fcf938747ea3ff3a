// What the Journal's source files (journal.cc, journal_commit.cc, journal_apply.cc) share:
// conversions between RocksDB's slices and string views, and the helpers that build a
// commit's records. Internal to the journal.
#ifndef UMAP_JOURNAL_JOURNAL_RECORDS_H_
#define UMAP_JOURNAL_JOURNAL_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "journal/journal.h"
#include "rocksdb/slice.h"
#include "rocksdb/write_batch.h"

namespace umap::journal {

inline rocksdb::Slice ToSlice(absl::string_view s) { return rocksdb::Slice(s.data(), s.size()); }
inline absl::string_view ToView(const rocksdb::Slice& s) {
  return absl::string_view(s.data(), s.size());
}

inline bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// A commit's blocks: calls on_given for each of the caller's images and on_staged for each
// staged block it takes, in block order (both lists are sorted and share no block). The
// first error stops the walk.
absl::Status ForEachInBlockOrder(absl::Span<const BlockWrite* const> given,
                                 absl::Span<const uint64_t> staged,
                                 absl::FunctionRef<absl::Status(const BlockWrite&)> on_given,
                                 absl::FunctionRef<absl::Status(uint64_t)> on_staged);

// The transaction entry of one of the caller's images (no copy of it).
CommittedBlock EntryOf(const BlockWrite& b);

// Adds the payload record of `cb` (a block of transaction `lsn`) to `batch`: the bytes of
// EncodeTxnPayload(image), from cb's CRC and length and the image in place (no copy).
void PutPayload(rocksdb::WriteBatch* batch, uint64_t lsn, const CommittedBlock& cb,
                absl::string_view image);

// Deletes every payload record of transaction `lsn` with one range deletion.
void DeletePayloads(rocksdb::WriteBatch* batch, uint64_t lsn);

// A staged record the journal's index lists but RocksDB no longer holds.
absl::Status StagedVanished(const std::string& dir, uint64_t mapping_id, uint64_t block);

// Transactions of at least this many blocks have their payloads deleted with one range
// deletion. Smaller ones keep point deletions: every range tombstone in a memtable makes
// RocksDB rebuild its fragmented tombstone list at the next read, and small transactions
// (the runtime's evictions) are many.
inline constexpr size_t kRangeDeleteBlocks = 64;

// The read-ahead of the iterator a commit reads its staged images with. RocksDB keeps a
// prefetch buffer of this size in every table iterator, one per table file the staged
// records lie in (a dozen and more after a large atomic umsync): 1 MiB held 10 MiB.
inline constexpr size_t kStagedReadaheadBytes = size_t{128} << 10;

// The staged and committed blocks of one mapping that a Stage or Commit call touches. Calls
// whose claims overlap run one after the other (see AcquireLocked).
struct Journal::Claim {
  uint64_t mapping_id = 0;
  uint64_t first = 0, end = 0;   // a block range, [first, end); may be empty
  std::vector<uint64_t> blocks;  // single blocks, sorted

  bool InRange(uint64_t b) const { return first <= b && b < end; }
  bool Touches(uint64_t b) const {
    return InRange(b) || std::binary_search(blocks.begin(), blocks.end(), b);
  }
  bool Overlaps(const Claim& o) const {
    if (mapping_id != o.mapping_id) return false;
    if (first < end && o.first < o.end && first < o.end && o.first < end) return true;
    for (uint64_t b : blocks) {
      if (o.Touches(b)) return true;
    }
    for (uint64_t b : o.blocks) {
      if (InRange(b)) return true;
    }
    return false;
  }
};

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_JOURNAL_RECORDS_H_
