#include "journal/format.h"

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/coding.h"
#include "base/crc32c.h"
#include "base/mutation.h"

namespace umap::journal {
namespace {

// base/coding.h speaks std::string_view; on Debian 12 absl::string_view is its own type.
std::string_view Std(absl::string_view s) { return std::string_view(s.data(), s.size()); }

absl::Status Malformed(absl::string_view what, absl::string_view why) {
  return absl::DataLossError(absl::StrCat("journal ", what, " record: ", why));
}

uint32_t RecordCrc(absl::string_view key, absl::string_view body) {
  return crc32c::Extend(crc32c::Value(key.data(), key.size()), body.data(), body.size());
}

// Appends the record CRC over key and everything already in *value.
void SealRecord(absl::string_view key, std::string* value) {
  PutFixed32(value, RecordCrc(key, *value));
}

// Checks and strips the trailing record CRC; *body is the value without it.
absl::Status UnsealRecord(absl::string_view what, absl::string_view key, absl::string_view value,
                          std::string_view* body) {
  if (value.size() < 4) return Malformed(what, "value shorter than its CRC");
  std::string_view tail = Std(value.substr(value.size() - 4));
  uint32_t stored = 0;
  GetFixed32(&tail, &stored);
  absl::string_view prefix = value.substr(0, value.size() - 4);
  bool crc_ok = RecordCrc(key, prefix) == stored;
  // The skip_crc mutation (base/mutation.h) proves the chaos suite needs this check.
  UMAP_IF_MUTATION(kSkipCrc) { crc_ok = true; }
  if (!crc_ok) return Malformed(what, "record CRC mismatch");
  *body = Std(prefix);
  return absl::OkStatus();
}

std::string Key(RecordTag tag) { return std::string(1, static_cast<char>(tag)); }

std::string Key(RecordTag tag, uint64_t a) {
  std::string k = Key(tag);
  PutBigEndian64(&k, a);
  return k;
}

std::string Key(RecordTag tag, uint64_t a, uint64_t b) {
  std::string k = Key(tag, a);
  PutBigEndian64(&k, b);
  return k;
}

// Parses a key of `tag` followed by exactly `count` big-endian numbers.
absl::Status ParseKey(absl::string_view what, RecordTag tag, absl::string_view key, int count,
                      uint64_t* a, uint64_t* b) {
  if (key.size() != 1 + 8 * static_cast<size_t>(count) ||
      key[0] != static_cast<char>(tag)) {
    return Malformed(what, "bad key");
  }
  std::string_view in = Std(key.substr(1));
  if (count >= 1) GetBigEndian64(&in, a);
  if (count >= 2) GetBigEndian64(&in, b);
  return absl::OkStatus();
}

bool GetByte(std::string_view* in, uint8_t* v) {
  if (in->empty()) return false;
  *v = static_cast<uint8_t>((*in)[0]);
  in->remove_prefix(1);
  return true;
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// crc | length | image. The length is explicit because a CRC alone misses some truncations:
// after the image bytes FF FF FF FF the CRC32C register is zero, and zero bytes appended
// to it leave the CRC unchanged.
// A block image value: CRC32C and length (fixed32 each), then the bytes.
std::string BlockImageHeader(uint32_t crc, size_t length) {
  std::string v;
  PutFixed32(&v, crc);
  PutFixed32(&v, static_cast<uint32_t>(length));
  return v;
}

std::string EncodeBlockImage(absl::string_view data) {
  std::string v = BlockImageHeader(crc32c::Value(data.data(), data.size()), data.size());
  v.append(data.data(), data.size());
  return v;
}

absl::Status DecodeBlockImage(absl::string_view what, absl::string_view value, uint32_t* crc,
                              absl::string_view* data) {
  std::string_view in = Std(value);
  uint32_t length = 0;
  if (!GetFixed32(&in, crc) || !GetFixed32(&in, &length)) return Malformed(what, "truncated");
  if (length == 0) return Malformed(what, "empty block image");
  if (in.size() != length) return Malformed(what, "image length does not match the value");
  bool crc_ok = crc32c::Value(in.data(), in.size()) == *crc;
  UMAP_IF_MUTATION(kSkipCrc) { crc_ok = true; }
  if (!crc_ok) return Malformed(what, "block CRC mismatch");
  *data = absl::string_view(in.data(), in.size());
  return absl::OkStatus();
}

}  // namespace

absl::string_view PolicyName(Policy policy) {
  return policy == Policy::kAtomic ? "atomic" : "relaxed";
}

absl::string_view ContentsName(Contents contents) {
  return contents == Contents::kData ? "data" : "intent";
}

// ---- 'F' ---------------------------------------------------------------------------------

std::string FormatKey() { return Key(RecordTag::kFormat); }

std::string EncodeFormat(const FormatRecord& record) {
  std::string v(kFormatMagic.data(), kFormatMagic.size());
  PutFixed32(&v, record.version);
  SealRecord(FormatKey(), &v);
  return v;
}

absl::StatusOr<FormatRecord> DecodeFormat(absl::string_view key, absl::string_view value) {
  constexpr absl::string_view kWhat = "format";
  if (absl::Status s = ParseKey(kWhat, RecordTag::kFormat, key, 0, nullptr, nullptr); !s.ok()) {
    return s;
  }
  // The magic is checked before the CRC so that a foreign database is named as such.
  if (value.size() != kFormatMagic.size() + 8 || value.substr(0, kFormatMagic.size()) != kFormatMagic) {
    return Malformed(kWhat, "not a umap journal (bad magic or size)");
  }
  std::string_view body;
  if (absl::Status s = UnsealRecord(kWhat, key, value, &body); !s.ok()) return s;
  body.remove_prefix(kFormatMagic.size());
  FormatRecord r;
  GetFixed32(&body, &r.version);
  if (r.version == 0) return Malformed(kWhat, "version 0");
  return r;
}

// ---- 'W' ---------------------------------------------------------------------------------

std::string WatermarkKey() { return Key(RecordTag::kWatermark); }

std::string EncodeWatermark(const Watermark& record) {
  std::string v;
  PutFixed64(&v, record.last_lsn);
  PutFixed64(&v, record.last_mapping_id);
  SealRecord(WatermarkKey(), &v);
  return v;
}

absl::StatusOr<Watermark> DecodeWatermark(absl::string_view key, absl::string_view value) {
  constexpr absl::string_view kWhat = "watermark";
  if (absl::Status s = ParseKey(kWhat, RecordTag::kWatermark, key, 0, nullptr, nullptr);
      !s.ok()) {
    return s;
  }
  if (value.size() != 20) return Malformed(kWhat, "bad value size");
  std::string_view body;
  if (absl::Status s = UnsealRecord(kWhat, key, value, &body); !s.ok()) return s;
  Watermark w;
  GetFixed64(&body, &w.last_lsn);
  GetFixed64(&body, &w.last_mapping_id);
  return w;
}

// ---- 'M' ---------------------------------------------------------------------------------

std::string MappingKey(uint64_t id) { return Key(RecordTag::kMapping, id); }

std::string EncodeMapping(const MappingRecord& record) {
  std::string v;
  PutFixed32(&v, record.block_size);
  v.push_back(static_cast<char>(record.policy));
  v.push_back(static_cast<char>(record.contents));
  PutFixed64(&v, record.file.device);
  PutFixed64(&v, record.file.inode);
  PutFixed64(&v, record.file.size);
  PutFixed32(&v, static_cast<uint32_t>(record.file.path.size()));
  v.append(record.file.path);
  if (record.file.birth != FileBirth::kUnknown) {
    v.push_back(static_cast<char>(record.file.birth));
    PutFixed64(&v, record.file.birth_a);
    PutFixed64(&v, record.file.birth_b);
  }
  SealRecord(MappingKey(record.id), &v);
  return v;
}

absl::StatusOr<MappingRecord> DecodeMapping(absl::string_view key, absl::string_view value) {
  constexpr absl::string_view kWhat = "mapping";
  MappingRecord r;
  if (absl::Status s = ParseKey(kWhat, RecordTag::kMapping, key, 1, &r.id, nullptr); !s.ok()) {
    return s;
  }
  std::string_view in;
  if (absl::Status s = UnsealRecord(kWhat, key, value, &in); !s.ok()) return s;
  uint8_t policy = 0, contents = 0;
  uint32_t path_len = 0;
  if (!GetFixed32(&in, &r.block_size) || !GetByte(&in, &policy) || !GetByte(&in, &contents) ||
      !GetFixed64(&in, &r.file.device) || !GetFixed64(&in, &r.file.inode) ||
      !GetFixed64(&in, &r.file.size) || !GetFixed32(&in, &path_len)) {
    return Malformed(kWhat, "truncated");
  }
  constexpr size_t kBirthBytes = 17;  // birth u8 | birth_a u64 | birth_b u64
  if (in.size() != path_len && in.size() != path_len + kBirthBytes) {
    return Malformed(kWhat, "path length does not match the value");
  }
  r.file.path.assign(in.data(), path_len);
  in.remove_prefix(path_len);
  if (!in.empty()) {
    uint8_t birth = 0;
    if (!GetByte(&in, &birth) || !GetFixed64(&in, &r.file.birth_a) ||
        !GetFixed64(&in, &r.file.birth_b)) {
      return Malformed(kWhat, "truncated birth");
    }
    if (birth != static_cast<uint8_t>(FileBirth::kBirthTime) &&
        birth != static_cast<uint8_t>(FileBirth::kIdXattr)) {
      return Malformed(kWhat, "unknown kind of birth");
    }
    r.file.birth = static_cast<FileBirth>(birth);
  }
  if (!IsPowerOfTwo(r.block_size)) return Malformed(kWhat, "block size is not a power of two");
  if (policy > 1 || contents > 1) return Malformed(kWhat, "unknown policy or contents");
  r.policy = static_cast<Policy>(policy);
  r.contents = static_cast<Contents>(contents);
  if (r.contents == Contents::kIntent && r.policy != Policy::kRelaxed) {
    return Malformed(kWhat, "intent contents with atomic policy");
  }
  return r;
}

// ---- 'S' ---------------------------------------------------------------------------------

std::string StagedKey(uint64_t mapping_id, uint64_t block) {
  return Key(RecordTag::kStaged, mapping_id, block);
}

std::string EncodeStaged(absl::string_view data) { return EncodeBlockImage(data); }

absl::StatusOr<StagedBlock> DecodeStaged(absl::string_view key, absl::string_view value) {
  constexpr absl::string_view kWhat = "staged";
  StagedBlock r;
  if (absl::Status s = ParseKey(kWhat, RecordTag::kStaged, key, 2, &r.mapping_id, &r.block);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = DecodeBlockImage(kWhat, value, &r.crc, &r.data); !s.ok()) return s;
  return r;
}

// ---- 'P' ---------------------------------------------------------------------------------

std::string TxnPayloadKey(uint64_t lsn, uint64_t block) {
  return Key(RecordTag::kTxnPayload, lsn, block);
}

std::string EncodeTxnPayload(absl::string_view data) { return EncodeBlockImage(data); }

std::string TxnPayloadHeader(uint32_t crc, size_t length) {
  return BlockImageHeader(crc, length);
}

absl::StatusOr<TxnPayload> DecodeTxnPayload(absl::string_view key, absl::string_view value) {
  constexpr absl::string_view kWhat = "payload";
  TxnPayload r;
  if (absl::Status s = ParseKey(kWhat, RecordTag::kTxnPayload, key, 2, &r.lsn, &r.block);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = DecodeBlockImage(kWhat, value, &r.crc, &r.data); !s.ok()) return s;
  return r;
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> DecodeTxnPayloadKey(absl::string_view key) {
  std::pair<uint64_t, uint64_t> r;
  if (absl::Status s = ParseKey("payload", RecordTag::kTxnPayload, key, 2, &r.first, &r.second);
      !s.ok()) {
    return s;
  }
  return r;
}

// ---- 'T' ---------------------------------------------------------------------------------

std::string TxnHeaderKey(uint64_t lsn) { return Key(RecordTag::kTxnHeader, lsn); }

std::string EncodeTxnHeader(const TxnHeader& header) {
  std::string v;
  v.reserve(1 + 8 + 4 + 16 * header.blocks.size() + 4);
  v.push_back(static_cast<char>(header.contents));
  PutFixed64(&v, header.mapping_id);
  PutFixed32(&v, static_cast<uint32_t>(header.blocks.size()));
  for (const TxnBlock& b : header.blocks) {
    PutFixed64(&v, b.block);
    PutFixed32(&v, b.length);
    PutFixed32(&v, b.crc);
  }
  SealRecord(TxnHeaderKey(header.lsn), &v);
  return v;
}

absl::StatusOr<TxnHeader> DecodeTxnHeader(absl::string_view key, absl::string_view value) {
  constexpr absl::string_view kWhat = "transaction header";
  TxnHeader h;
  if (absl::Status s = ParseKey(kWhat, RecordTag::kTxnHeader, key, 1, &h.lsn, nullptr);
      !s.ok()) {
    return s;
  }
  std::string_view in;
  if (absl::Status s = UnsealRecord(kWhat, key, value, &in); !s.ok()) return s;
  uint8_t contents = 0;
  uint32_t n = 0;
  if (!GetByte(&in, &contents) || !GetFixed64(&in, &h.mapping_id) || !GetFixed32(&in, &n)) {
    return Malformed(kWhat, "truncated");
  }
  if (contents > 1) return Malformed(kWhat, "unknown contents");
  h.contents = static_cast<Contents>(contents);
  // Checked before reserving, so a corrupt count cannot make us allocate gigabytes.
  if (n == 0 || in.size() != 16 * static_cast<uint64_t>(n)) {
    return Malformed(kWhat, "block count does not match the value");
  }
  h.blocks.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    TxnBlock& b = h.blocks[i];
    GetFixed64(&in, &b.block);
    GetFixed32(&in, &b.length);
    GetFixed32(&in, &b.crc);
    if (b.length == 0) return Malformed(kWhat, "empty block");
    if (i > 0 && b.block <= h.blocks[i - 1].block) {
      return Malformed(kWhat, "block numbers not strictly increasing");
    }
  }
  return h;
}

// ---- ranges ------------------------------------------------------------------------------

std::string TagBegin(RecordTag tag) { return Key(tag); }

std::string TagEnd(RecordTag tag) {
  return std::string(1, static_cast<char>(static_cast<char>(tag) + 1));
}

std::string StagedMappingEnd(uint64_t mapping_id) {
  if (mapping_id == UINT64_MAX) return TagEnd(RecordTag::kStaged);
  return StagedKey(mapping_id + 1, 0);
}

}  // namespace umap::journal
