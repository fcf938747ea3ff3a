// EvictionBatch: victims of one reclaim pass, discarded from the address space together.
//
// Dropping a block's pages (MADV_DONTNEED) ends with a TLB flush, and with threads of the
// process running on other CPUs that flush is an inter-processor interrupt: 10 µs to
// ~200 µs a call on a two-vCPU VM (the other vCPU may have to be woken), more than the
// rest of a miss. The pool therefore evicts victims in batches of up to 256
// (eviction_scratch.h): each victim's entry is locked and its dirty image captured
// (PrepareEvict), then every victim's pages are dropped with one process_madvise(2) — one
// flush for the batch — and only then are the entries unlocked (FinishEvict). A victim
// whose pages could not be dropped is restored: it stays resident, as if it had never been
// chosen. The cache sizer parks sampled blocks in batches the same way (cache_sizer.h); a
// parked victim has no pages mapped (its range is empty).
#ifndef UMAP_RUNTIME_CACHE_EVICTION_BATCH_H_
#define UMAP_RUNTIME_CACHE_EVICTION_BATCH_H_

#include <sys/uio.h>

#include <cstdint>

namespace umap::runtime {

class Mapping;

// The victims of one batch, in storage that EvictionBatchOf<N> provides: a large batch is
// too large for the stack of the thread that evicts (eviction_scratch.h).
struct EvictionBatch {
  struct Victim {
    Mapping* mapping;
    uint64_t block;
    uint64_t locked_value;  // the entry's value when it was locked (to restore on failure)
    uint64_t unlock_value;  // the entry's value once evicted
    uint32_t shadow;        // shadow slot of a dirty victim, or IndexStack::kEmpty
    int index;              // position in the pool's victim list
    bool discarded;
    uint32_t park = 0xffffffffu;  // its park buffer (a parked victim, or a block being parked)
  };
  EvictionBatch(Victim* v, iovec* r, int cap) : victims(v), ranges(r), capacity(cap) {}
  EvictionBatch(const EvictionBatch&) = delete;
  EvictionBatch& operator=(const EvictionBatch&) = delete;
  Victim* const victims;
  iovec* const ranges;
  const int capacity;
  int count = 0;
};

template <int N>
struct EvictionBatchOf : EvictionBatch {
  EvictionBatchOf() : EvictionBatch(victims_, ranges_, N) {}

 private:
  Victim victims_[N];
  iovec ranges_[N];
};

// Drops the pages of every range of `batch` (process_madvise with one TLB flush where the
// kernel allows it, else one madvise per range) and sets each victim's `discarded`.
// `pidfd` is the process's own pidfd, or -1 to use madvise only.
void DiscardBatch(int pidfd, EvictionBatch* batch);

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_CACHE_EVICTION_BATCH_H_
