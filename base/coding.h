// Little-endian fixed-width and varint encoding for on-disk records (journal/).
// Decoders take a string_view by pointer and advance it; they return false on short input
// and never read past its end.
#ifndef UMAP_BASE_CODING_H_
#define UMAP_BASE_CODING_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace umap {

void PutFixed32(std::string* dst, uint32_t v);
void PutFixed64(std::string* dst, uint64_t v);
void PutVarint64(std::string* dst, uint64_t v);
// Varint length followed by the bytes.
void PutLengthPrefixed(std::string* dst, std::string_view bytes);

bool GetFixed32(std::string_view* in, uint32_t* v);
bool GetFixed64(std::string_view* in, uint64_t* v);
bool GetVarint64(std::string_view* in, uint64_t* v);
bool GetLengthPrefixed(std::string_view* in, std::string_view* bytes);

// Big-endian fixed64, for RocksDB keys that must sort numerically.
void PutBigEndian64(std::string* dst, uint64_t v);
bool GetBigEndian64(std::string_view* in, uint64_t* v);

}  // namespace umap

#endif  // UMAP_BASE_CODING_H_
