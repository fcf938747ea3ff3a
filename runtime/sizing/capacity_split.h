// SplitCapacity: shares one cache among several mappings by marginal gain (Qureshi & Patt's
// utility-based partitioning with look-ahead, MICRO'06), for lazy sizing
// (docs/design.md "Cache sizing").
//
// Each claimant brings its miss curve (misses[j] = predicted misses with j quanta of cache,
// j = 0..steps) and its most useful size (`max_quanta`: beyond it the curve is flat, e.g. the
// mapping's own size). Every claimant first gets `floor_quanta`; then, repeatedly, the
// claimant whose curve falls fastest per quantum over some extension (the look-ahead: a
// curve with a cliff, such as a working set that only helps once it fits whole, is judged by
// its best average slope, not its next step) gets that extension, until the quanta run out
// or nobody gains. Quanta nobody gains from stay unassigned (first come, first served).
//
// Cost: O(steps^2 x claimants) comparisons; no allocation besides the result.
#ifndef UMAP_RUNTIME_SIZING_CAPACITY_SPLIT_H_
#define UMAP_RUNTIME_SIZING_CAPACITY_SPLIT_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace umap::runtime {

struct SplitClaim {
  absl::Span<const double> misses;  // misses with 0, 1, ..., steps quanta; non-increasing
  uint32_t max_quanta = 0;          // the claimant never gets more
};

// Returns the quanta of each claimant; their sum is at most `quanta`.
std::vector<uint32_t> SplitCapacity(absl::Span<const SplitClaim> claims, uint32_t quanta,
                                    uint32_t floor_quanta);

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_SIZING_CAPACITY_SPLIT_H_
