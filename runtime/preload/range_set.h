// RangeSet: the shim mappings a range of addresses touches, found without allocating (the
// munmap/madvise paths can be reached from inside malloc), and the gaps between them that
// belong to libc.
#ifndef UMAP_RUNTIME_PRELOAD_RANGE_SET_H_
#define UMAP_RUNTIME_PRELOAD_RANGE_SET_H_

#include <cstddef>
#include <cstdint>

#include "runtime/preload/mapping_registry.h"

namespace umap::preload {

class RangeSet {
 public:
  static constexpr int kMax = 64;
  struct Hit {
    int index;
    ShimMapping m;
  };

  // The live mappings whose reserved region overlaps [begin, end), sorted by address.
  // overflow() when more than kMax do (the caller refuses the call).
  RangeSet(const MappingRegistry& registry, uintptr_t begin, uintptr_t end);

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  bool overflow() const { return overflow_; }
  const Hit& operator[](int i) const { return hits_[i]; }

  // Calls fn(gap_begin, gap_len) for each part of [begin, end) outside every hit's
  // reserved region, in address order; stops at the first non-zero return and returns it.
  template <typename Fn>
  int ForEachGap(Fn&& fn) const {
    uintptr_t at = begin_;
    for (int i = 0; i <= n_; ++i) {
      const uintptr_t stop = i < n_ ? hits_[i].m.base : end_;
      if (stop > at) {
        if (int r = fn(at, static_cast<size_t>((stop < end_ ? stop : end_) - at))) return r;
      }
      if (i < n_ && hits_[i].m.base + hits_[i].m.region_len > at) {
        at = hits_[i].m.base + hits_[i].m.region_len;
      }
      if (at >= end_) break;
    }
    return 0;
  }

 private:
  const uintptr_t begin_, end_;
  Hit hits_[kMax];
  int n_ = 0;
  bool overflow_ = false;
};

}  // namespace umap::preload

#endif  // UMAP_RUNTIME_PRELOAD_RANGE_SET_H_
