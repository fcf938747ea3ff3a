#include "base/coding.h"

#include "absl/base/internal/endian.h"

namespace umap {

void PutFixed32(std::string* dst, uint32_t v) {
  char buf[4];
  absl::little_endian::Store32(buf, v);
  dst->append(buf, 4);
}

void PutFixed64(std::string* dst, uint64_t v) {
  char buf[8];
  absl::little_endian::Store64(buf, v);
  dst->append(buf, 8);
}

void PutVarint64(std::string* dst, uint64_t v) {
  while (v >= 0x80) {
    dst->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  dst->push_back(static_cast<char>(v));
}

void PutLengthPrefixed(std::string* dst, std::string_view bytes) {
  PutVarint64(dst, bytes.size());
  dst->append(bytes.data(), bytes.size());
}

bool GetFixed32(std::string_view* in, uint32_t* v) {
  if (in->size() < 4) return false;
  *v = absl::little_endian::Load32(in->data());
  in->remove_prefix(4);
  return true;
}

bool GetFixed64(std::string_view* in, uint64_t* v) {
  if (in->size() < 8) return false;
  *v = absl::little_endian::Load64(in->data());
  in->remove_prefix(8);
  return true;
}

bool GetVarint64(std::string_view* in, uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0, i = 0; shift <= 63 && i < static_cast<int>(in->size()); shift += 7, ++i) {
    uint64_t byte = static_cast<unsigned char>((*in)[static_cast<size_t>(i)]);
    // The 10th byte may carry only the top bit of a 64-bit value.
    if (shift == 63 && byte > 1) return false;
    result |= (byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *v = result;
      in->remove_prefix(static_cast<size_t>(i) + 1);
      return true;
    }
  }
  return false;
}

bool GetLengthPrefixed(std::string_view* in, std::string_view* bytes) {
  std::string_view copy = *in;
  uint64_t len = 0;
  if (!GetVarint64(&copy, &len) || len > copy.size()) return false;
  *bytes = copy.substr(0, static_cast<size_t>(len));
  copy.remove_prefix(static_cast<size_t>(len));
  *in = copy;
  return true;
}

void PutBigEndian64(std::string* dst, uint64_t v) {
  char buf[8];
  absl::big_endian::Store64(buf, v);
  dst->append(buf, 8);
}

bool GetBigEndian64(std::string_view* in, uint64_t* v) {
  if (in->size() < 8) return false;
  *v = absl::big_endian::Load64(in->data());
  in->remove_prefix(8);
  return true;
}

}  // namespace umap
