// Journal record format: keys and values of the journal's RocksDB database.
//
// docs/journal_format.md is the single normative description; this header is a summary
// (leveldb db/log_format.h style). Change both together and bump kFormatVersion when a
// layout changes.
//
// Keys (one byte tag, big-endian numbers so that RocksDB's bytewise order is numeric order):
//
//   'F'                          format   magic "UMAPJRNL" | version u32 | rcrc u32
//   'W'                          watermark last_lsn u64 | last_mapping_id u64 | rcrc u32
//   'M' | id be64                mapping  block_size u32 | policy u8 | contents u8 | device u64 |
//                                         inode u64 | size u64 | path_len u32 | path |
//                                         [birth u8 | birth_a u64 | birth_b u64] | rcrc u32
//   'S' | mapping be64 | block be64   staged block   crc u32 | length u32 | data
//   'T' | lsn be64               txn header  contents u8 | mapping u64 | n u32 |
//                                            n x (block u64 | length u32 | crc u32) | rcrc u32
//   'P' | lsn be64 | block be64  txn payload  crc u32 | length u32 | data  (data mode only)
//
// Value integers are little-endian fixed width. "crc" is the CRC32C (base/crc32c.h) of the
// block bytes alone, so that intent-mode recovery can compare it with the file's bytes.
// "rcrc" (record CRC) is the CRC32C of the key bytes followed by the value bytes before it,
// so a value copied under another key is detected too.
//
// Every decoder takes the key and the value, never reads outside them, and returns
// kDataLoss for any malformed, truncated, over-long or CRC-mismatching input.
#ifndef UMAP_JOURNAL_FORMAT_H_
#define UMAP_JOURNAL_FORMAT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "umap/env.h"

namespace umap::journal {

// The format this build writes and the newest it reads. Version history: 1 = initial;
// 2 = a mapping record may end with the file's birth (FileIdentity::birth).
inline constexpr uint32_t kFormatVersion = 2;
// The first version whose mapping records may carry a birth.
inline constexpr uint32_t kFormatWithBirth = 2;
// The 8 bytes that open the format record's value.
inline constexpr absl::string_view kFormatMagic = "UMAPJRNL";

// The first byte of every key.
enum class RecordTag : char {
  kFormat = 'F',
  kWatermark = 'W',
  kMapping = 'M',
  kStaged = 'S',
  kTxnHeader = 'T',
  kTxnPayload = 'P',
};

// Write-back policy of a mapping (docs/durability.md, "Policies"). Encoded as one byte: 0, 1.
enum class Policy : uint8_t { kAtomic = 0, kRelaxed = 1 };
// What a transaction carries. kIntent (CRC only) is allowed with kRelaxed only.
enum class Contents : uint8_t { kData = 0, kIntent = 1 };

absl::string_view PolicyName(Policy policy);
absl::string_view ContentsName(Contents contents);

// ---- 'F': format record ------------------------------------------------------------------
// Its layout is frozen for all versions, so any build can read the version and refuse.
struct FormatRecord {
  uint32_t version = kFormatVersion;
  friend bool operator==(const FormatRecord&, const FormatRecord&) = default;
};
std::string FormatKey();
std::string EncodeFormat(const FormatRecord& record);
// Any version >= 1 decodes; the caller compares it with kFormatVersion.
absl::StatusOr<FormatRecord> DecodeFormat(absl::string_view key, absl::string_view value);

// ---- 'W': watermark ----------------------------------------------------------------------
// The highest LSN and mapping id ever handed out, so that neither is reused after the
// records that carried them were deleted.
struct Watermark {
  uint64_t last_lsn = 0;
  uint64_t last_mapping_id = 0;
  friend bool operator==(const Watermark&, const Watermark&) = default;
};
std::string WatermarkKey();
std::string EncodeWatermark(const Watermark& record);
absl::StatusOr<Watermark> DecodeWatermark(absl::string_view key, absl::string_view value);

// ---- 'M': mapping registry ---------------------------------------------------------------
struct MappingRecord {
  uint64_t id = 0;  // from the key
  FileIdentity file;
  uint32_t block_size = 0;  // a power of two
  Policy policy = Policy::kAtomic;
  Contents contents = Contents::kData;
  friend bool operator==(const MappingRecord&, const MappingRecord&) = default;
};
std::string MappingKey(uint64_t id);
// The birth fields are written only when record.file.birth is known (version 2); a record
// without them decodes with FileBirth::kUnknown.
std::string EncodeMapping(const MappingRecord& record);
absl::StatusOr<MappingRecord> DecodeMapping(absl::string_view key, absl::string_view value);

// ---- 'S' and 'P': block images -----------------------------------------------------------
// A staged block (atomic policy spill, uncommitted) and a transaction payload share one value
// layout: crc u32 | length u32 | data, with length == data.size() >= 1.
struct StagedBlock {
  uint64_t mapping_id = 0;  // from the key
  uint64_t block = 0;       // from the key
  uint32_t crc = 0;
  absl::string_view data;   // points into the decoded value
};
std::string StagedKey(uint64_t mapping_id, uint64_t block);
std::string EncodeStaged(absl::string_view data);
absl::StatusOr<StagedBlock> DecodeStaged(absl::string_view key, absl::string_view value);

struct TxnPayload {
  uint64_t lsn = 0;    // from the key
  uint64_t block = 0;  // from the key
  uint32_t crc = 0;
  absl::string_view data;  // points into the decoded value
};
std::string TxnPayloadKey(uint64_t lsn, uint64_t block);
std::string EncodeTxnPayload(absl::string_view data);
// The first 8 bytes of EncodeTxnPayload(data) when `crc` is data's CRC32C: a commit writes
// them and the image as two parts of one value, with no copy of the image and no second
// CRC.
std::string TxnPayloadHeader(uint32_t crc, size_t length);
absl::StatusOr<TxnPayload> DecodeTxnPayload(absl::string_view key, absl::string_view value);
// The (lsn, block) of a payload key, without its value. kDataLoss: not a payload key.
absl::StatusOr<std::pair<uint64_t, uint64_t>> DecodeTxnPayloadKey(absl::string_view key);

// ---- 'T': transaction header -------------------------------------------------------------
// Its presence is the commit: header and payloads are written in one WriteBatch.
struct TxnBlock {
  uint64_t block = 0;
  uint32_t length = 0;  // bytes of the block image, 1..block_size
  uint32_t crc = 0;     // CRC32C of those bytes
  friend bool operator==(const TxnBlock&, const TxnBlock&) = default;
};
struct TxnHeader {
  uint64_t lsn = 0;  // from the key
  uint64_t mapping_id = 0;
  Contents contents = Contents::kData;
  std::vector<TxnBlock> blocks;  // at least one, strictly increasing block numbers
  friend bool operator==(const TxnHeader&, const TxnHeader&) = default;
};
std::string TxnHeaderKey(uint64_t lsn);
std::string EncodeTxnHeader(const TxnHeader& header);
absl::StatusOr<TxnHeader> DecodeTxnHeader(absl::string_view key, absl::string_view value);

// Key ranges for scans: every key with `tag` lies in [TagBegin(tag), TagEnd(tag)).
std::string TagBegin(RecordTag tag);
std::string TagEnd(RecordTag tag);
// The staged keys of one mapping lie in [StagedKey(m, first), StagedKey(m, end)); this is
// the exclusive upper bound for all of mapping m's staged keys.
std::string StagedMappingEnd(uint64_t mapping_id);

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_FORMAT_H_
