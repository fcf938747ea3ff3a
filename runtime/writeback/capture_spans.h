// How a umsync's capture groups the dirty blocks it write-protects (Mapping::CaptureDirty):
// up to kMaxBatch blocks per UFFDIO_WRITEPROTECT, within kMaxSpan blocks, a span ending
// before a gap of more than kMaxGapPages pages. umap-wpcost (bench/wp_cost.cc) models the
// same rule. Why these values: the comment in CaptureDirty.
#ifndef UMAP_RUNTIME_WRITEBACK_CAPTURE_SPANS_H_
#define UMAP_RUNTIME_WRITEBACK_CAPTURE_SPANS_H_

#include <cstdint>

namespace umap::runtime::capture {

inline constexpr int kMaxBatch = 64;
inline constexpr uint64_t kMaxSpan = 8192;
inline constexpr uint64_t kMaxGapPages = 256;

}  // namespace umap::runtime::capture

#endif  // UMAP_RUNTIME_WRITEBACK_CAPTURE_SPANS_H_
