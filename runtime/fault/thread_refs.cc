#include "runtime/fault/thread_refs.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace umap::runtime {

ThreadRefs::ThreadRefs(BlockPool* pool) : pool_(pool), slots_(new Slot[kSlots]) {}

ThreadRefs::Slot* ThreadRefs::Find(pid_t tid, bool create) {
  uint32_t h = static_cast<uint32_t>(tid) * 2654435761u;
  Slot* tomb = nullptr;
  for (uint32_t i = 0; i < kSlots; ++i) {
    Slot& s = slots_[(h + i) % kSlots];
    pid_t t = s.tid.load(std::memory_order_acquire);
    if (t == tid) return &s;
    if (t == -1 && tomb == nullptr) tomb = &s;
    if (t == 0) {
      if (!create) return nullptr;
      Slot* target = tomb ? tomb : &s;
      pid_t expected = tomb ? -1 : 0;
      if (target->tid.compare_exchange_strong(expected, tid, std::memory_order_acq_rel)) {
        return target;
      }
      // Lost a race for this slot: look again from the start.
      return Find(tid, create);
    }
  }
  if (create && tomb != nullptr) {
    pid_t expected = -1;
    if (tomb->tid.compare_exchange_strong(expected, tid, std::memory_order_acq_rel)) return tomb;
  }
  return nullptr;
}

void ThreadRefs::Touch(pid_t tid, uint32_t cache_block) {
  Slot* s = Find(tid, /*create=*/true);
  if (s == nullptr) {
    untracked_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  uint32_t gen = pool_->generation(cache_block);
  uint64_t ref = ((static_cast<uint64_t>(gen) << 32) | cache_block) + 1;
  // Already among this thread's references: nothing to do.
  for (auto& r : s->refs) {
    if (r.load(std::memory_order_relaxed) == ref) return;
  }
  if (!pool_->AddRef(cache_block, gen)) return;  // reused under us; the next fault will refer again
  uint32_t pos = s->pos.load(std::memory_order_relaxed);
  uint64_t old = s->refs[pos].exchange(ref, std::memory_order_acq_rel);
  s->pos.store((pos + 1) % kDepth, std::memory_order_relaxed);
  if (old != 0) {
    --old;
    pool_->DropRef(static_cast<uint32_t>(old), static_cast<uint32_t>(old >> 32));
  }
}

void ThreadRefs::DropAll(Slot* s) {
  for (auto& r : s->refs) {
    uint64_t old = r.exchange(0, std::memory_order_acq_rel);
    if (old != 0) {
      --old;
      pool_->DropRef(static_cast<uint32_t>(old), static_cast<uint32_t>(old >> 32));
    }
  }
}

void ThreadRefs::Forget(pid_t tid) {
  if (Slot* s = Find(tid, /*create=*/false)) {
    DropAll(s);
    s->tid.store(-1, std::memory_order_release);
  }
}

int ThreadRefs::ReclaimDead() {
  const pid_t pid = ::getpid();
  int reclaimed = 0;
  for (uint32_t i = 0; i < kSlots; ++i) {
    Slot& s = slots_[i];
    pid_t tid = s.tid.load(std::memory_order_acquire);
    if (tid <= 0) continue;
    if (::syscall(SYS_tgkill, pid, tid, 0) == 0 || errno != ESRCH) continue;
    DropAll(&s);
    pid_t expected = tid;
    if (s.tid.compare_exchange_strong(expected, -1, std::memory_order_acq_rel)) ++reclaimed;
  }
  return reclaimed;
}

int ThreadRefs::live_slots() const {
  int n = 0;
  for (uint32_t i = 0; i < kSlots; ++i) n += slots_[i].tid.load(std::memory_order_relaxed) > 0;
  return n;
}

}  // namespace umap::runtime
