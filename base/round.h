// Rounding to a multiple (pages, blocks, sectors). `to` must not be 0.
#ifndef UMAP_BASE_ROUND_H_
#define UMAP_BASE_ROUND_H_

#include <cstddef>

namespace umap {

inline constexpr size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
inline constexpr size_t RoundDown(size_t n, size_t to) { return n / to * to; }

}  // namespace umap

#endif  // UMAP_BASE_ROUND_H_
