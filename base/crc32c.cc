#include "base/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace umap::crc32c {

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
  // crc32_iscsi works on the raw (non-inverted) register and takes an int length.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t reg = ~crc;
  while (n > 0) {
    int chunk = n > static_cast<size_t>(INT_MAX / 2) ? INT_MAX / 2 : static_cast<int>(n);
    reg = crc32_iscsi(p, chunk, reg);
    p += chunk;
    n -= static_cast<size_t>(chunk);
  }
  return ~reg;
}

uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

}  // namespace umap::crc32c
