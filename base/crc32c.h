// CRC32C (Castagnoli), from Intel ISA-L (Debian libisal-dev), hardware accelerated.
#ifndef UMAP_BASE_CRC32C_H_
#define UMAP_BASE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace umap::crc32c {

// Standard CRC32C of data (init ~0, final xor ~0): Value("123456789") == 0xE3069283.
uint32_t Value(const void* data, size_t n);
// Continues a CRC returned by Value/Extend over more bytes.
uint32_t Extend(uint32_t crc, const void* data, size_t n);

}  // namespace umap::crc32c

#endif  // UMAP_BASE_CRC32C_H_
