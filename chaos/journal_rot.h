// Journal rot: corrupts one byte of one committed block image inside the journal, below
// Umap's CRCs but above RocksDB's own checksums (the value is rewritten through RocksDB, so
// RocksDB sees a consistent record). This is the damage Umap's per-block CRC32C exists for:
// a bit flipped in memory or by a faulty device path before RocksDB checksummed it. Correct
// recovery refuses the journal (kDataLoss, exit code 2) and writes nothing; recovery without
// the check (the skip_crc mutation) writes a garbled block.
#ifndef UMAP_CHAOS_JOURNAL_ROT_H_
#define UMAP_CHAOS_JOURNAL_ROT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace chaos {

// Flips one bit of the image of one pending transaction payload in the journal at `dir`
// (chosen by `seed`). Returns a description of what was corrupted, or "" when the journal
// holds no payload. REQUIRES: no process has the journal open.
absl::StatusOr<std::string> RotOnePayload(const std::string& dir, uint64_t seed);

}  // namespace chaos

#endif  // UMAP_CHAOS_JOURNAL_ROT_H_
