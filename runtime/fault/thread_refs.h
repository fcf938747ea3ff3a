// ThreadRefs: the per-thread reference map (the paper's rmap).
//
// userfaultfd tells us which thread faulted (UFFD_FEATURE_THREAD_ID). Each thread holds a
// reference to the last kDepth cache blocks it faulted in: a block a live thread is working
// on is "active" and is not evicted. When a thread faults on a new block its oldest
// reference is dropped. Threads that exited keep references until ReclaimDead() finds them
// gone (tgkill(pid, tid, 0) == ESRCH), which the pool calls when it finds no victim.
//
// Lock-free: a fixed open-addressing table of thread slots claimed by CAS. A thread's slot is
// only written by the handler serving that thread's fault, and a thread has at most one
// fault outstanding, so the ring position needs no further synchronisation.
#ifndef UMAP_RUNTIME_FAULT_THREAD_REFS_H_
#define UMAP_RUNTIME_FAULT_THREAD_REFS_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "runtime/cache/block_pool.h"

namespace umap::runtime {

class ThreadRefs {
 public:
  static constexpr int kDepth = 2;
  static constexpr uint32_t kSlots = 4096;

  explicit ThreadRefs(BlockPool* pool);

  // Thread `tid` now uses `cache_block`: reference it, drop the thread's oldest reference.
  void Touch(pid_t tid, uint32_t cache_block);
  // Drops the references of threads that no longer exist; returns how many threads.
  int ReclaimDead();
  // Drops every reference `tid` holds (tests; a thread known to be gone).
  void Forget(pid_t tid);

  uint64_t untracked() const { return untracked_.load(std::memory_order_relaxed); }
  int live_slots() const;

 private:
  struct Slot {
    std::atomic<pid_t> tid{0};  // 0 free, -1 tombstone (reusable)
    std::atomic<uint32_t> pos{0};
    std::atomic<uint64_t> refs[kDepth] = {};  // (generation << 32 | cache_block) + 1; 0 = none
  };
  Slot* Find(pid_t tid, bool create);
  void DropAll(Slot* s);

  BlockPool* const pool_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> untracked_{0};
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_FAULT_THREAD_REFS_H_
