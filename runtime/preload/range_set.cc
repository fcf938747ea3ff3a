#include "runtime/preload/range_set.h"

namespace umap::preload {

RangeSet::RangeSet(const MappingRegistry& registry, uintptr_t begin, uintptr_t end)
    : begin_(begin), end_(end) {
  if (registry.live() == 0 || end <= begin) return;
  registry.ForEachOverlapping(begin, end - begin, [&](int index, const ShimMapping& m) {
    if (n_ == kMax) {
      overflow_ = true;
      return;
    }
    // Insertion by base address: a handful of entries at most in practice.
    int j = n_++;
    while (j > 0 && hits_[j - 1].m.base > m.base) {
      hits_[j] = hits_[j - 1];
      --j;
    }
    hits_[j] = Hit{index, m};
  });
}

}  // namespace umap::preload
