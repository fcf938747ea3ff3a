#include "runtime/sizing/capacity_split.h"

#include <algorithm>

namespace umap::runtime {

std::vector<uint32_t> SplitCapacity(absl::Span<const SplitClaim> claims, uint32_t quanta,
                                    uint32_t floor_quanta) {
  std::vector<uint32_t> got(claims.size(), 0);
  uint32_t left = quanta;
  for (size_t i = 0; i < claims.size() && left > 0; ++i) {
    const uint32_t f = std::min({floor_quanta, claims[i].max_quanta, left});
    got[i] = f;
    left -= f;
  }
  while (left > 0) {
    double best_slope = 0;
    size_t best = claims.size();
    uint32_t best_k = 0;
    for (size_t i = 0; i < claims.size(); ++i) {
      const SplitClaim& c = claims[i];
      if (c.misses.empty()) continue;
      const uint32_t steps = static_cast<uint32_t>(c.misses.size()) - 1;
      const uint32_t cap = std::min(c.max_quanta, steps);
      if (got[i] >= cap) continue;
      const double now = c.misses[got[i]];
      for (uint32_t k = 1; k <= std::min(left, cap - got[i]); ++k) {
        const double slope = (now - c.misses[got[i] + k]) / k;
        if (slope > best_slope) {
          best_slope = slope;
          best = i;
          best_k = k;
        }
      }
    }
    if (best == claims.size()) break;  // nobody gains from more
    got[best] += best_k;
    left -= best_k;
  }
  return got;
}

}  // namespace umap::runtime
