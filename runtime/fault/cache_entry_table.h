// CacheEntryTable: one 64-bit atomic entry per file block of a mapping (the paper's CET).
//
// An entry says whether the block is resident in the application's address space and in
// which cache block (CB), whether it is dirty, and whether an evicted version is still being
// written back (shadow) or was spilled to the journal (staged). Each entry carries its own
// lock bit: every transition of a block (fill, first write, capture, eviction) happens under
// it, so two handler threads never work on one block at once and the fault path takes no
// global lock. Waiters sleep on the entry's upper half (a futex on the flags word).
//
// Layout of an entry (bit 63 first):
//   63 lock | 62 present | 61 dirty | 60 shadow pending | 59 poisoned | 58 staged (the
//   write-back sink may hold a newer image than the file: a miss asks it first) |
//   57 syncing | 56 fill queued | 55 queued fill wanted by a write | 54 stash |
//   53 waiters | 52 seen | 51 parked | 47..32 shadow (or stash, or park) index + 1
//   (0 = none) | 31..0 cache block index
//
// Waiters: a thread about to sleep on the entry (for its lock, or for a change) sets this
// bit first; Unlock wakes sleepers only when it was set. Without it every unlock would be a
// futex wake system call whenever any thread sleeps on any entry hashing to the same wait
// bucket, and a reader waiting for one block of a long fill would be woken block by block.
//
// Stash (read-ahead triggers): on a queued fill, "keep this block's data aside instead of
// installing it"; once filled, a stashed block is not present, owns its cache block, and
// its data waits in stash buffer `stash_index`. The reader's fault on it is served from
// memory and starts the next read-ahead window, as the kernel's PG_readahead page does.
//
// Seen (lazy sizing): an application access brought the block into the cache before, so a
// miss on it now is a re-miss (its reuse distance exceeds the cache), which may grow the
// cache; a first miss never does. Read-ahead that nobody waited for does not set it.
//
// Parked (lazy sizing): a sampled resident block whose pages were dropped so that its next
// access faults and is seen by the reuse tracker. It still holds its cache block (resident
// for the pool, evictable), is clean, and its data waits in park buffer `park_index`; the
// fault installs it from there (cache_sizer.h).
//
// A queued fill (kFilling) owns the cache block in the cache_block field: the block is neither
// present nor evictable, a second fault on it is dropped (the fill wakes every waiter), and
// the I/O manager's scheduler finds adjacent queued blocks through these bits (the PIAO
// order is the table itself: neighbours are one index away).
#ifndef UMAP_RUNTIME_FAULT_CACHE_ENTRY_TABLE_H_
#define UMAP_RUNTIME_FAULT_CACHE_ENTRY_TABLE_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <climits>
#include <cstdint>
#include <memory>

namespace umap::runtime {

class CacheEntryTable {
 public:
  static constexpr uint64_t kLock = 1ull << 63;
  static constexpr uint64_t kPresent = 1ull << 62;
  static constexpr uint64_t kDirty = 1ull << 61;
  static constexpr uint64_t kShadow = 1ull << 60;
  static constexpr uint64_t kPoisoned = 1ull << 59;
  static constexpr uint64_t kStaged = 1ull << 58;
  // The block's captured version belongs to a umsync in progress: a dirty eviction must not
  // start a second write of it until that umsync has written it (one apply in flight).
  static constexpr uint64_t kSyncing = 1ull << 57;
  static constexpr uint64_t kFilling = 1ull << 56;
  static constexpr uint64_t kFillWrite = 1ull << 55;
  static constexpr uint64_t kStash = 1ull << 54;
  static constexpr uint64_t kWaiters = 1ull << 53;
  static constexpr uint64_t kSeen = 1ull << 52;
  static constexpr uint64_t kParked = 1ull << 51;
  static constexpr uint64_t kShadowMask = ((1ull << 16) - 1) << 32;
  static constexpr uint64_t kCbMask = 0xffffffffull;

  // A decoded view of an entry value.
  struct Entry {
    uint64_t v = 0;
    bool locked() const { return v & kLock; }  // only in values from Load()
    bool present() const { return v & kPresent; }
    bool dirty() const { return v & kDirty; }
    bool shadow() const { return v & kShadow; }
    bool poisoned() const { return v & kPoisoned; }
    bool staged() const { return v & kStaged; }
    bool syncing() const { return v & kSyncing; }
    bool filling() const { return v & kFilling; }
    // Filled into a stash buffer, not installed (see above).
    bool stashed() const { return (v & kStash) && !(v & kFilling); }
    uint32_t stash_index() const { return static_cast<uint32_t>(((v & kShadowMask) >> 32) - 1); }
    bool seen() const { return v & kSeen; }
    bool parked() const { return v & kParked; }
    uint32_t park_index() const { return stash_index(); }
    uint32_t cache_block() const { return static_cast<uint32_t>(v & kCbMask); }
    // Shadow slot, valid when shadow().
    uint32_t shadow_index() const { return static_cast<uint32_t>(((v & kShadowMask) >> 32) - 1); }
  };

  static uint64_t WithCb(uint64_t v, uint32_t cache_block) { return (v & ~kCbMask) | cache_block; }
  static uint64_t WithShadow(uint64_t v, uint32_t shadow) {
    return (v & ~kShadowMask) | kShadow | (static_cast<uint64_t>(shadow + 1) << 32);
  }
  static uint64_t WithoutShadow(uint64_t v) { return v & ~(kShadowMask | kShadow); }
  static uint64_t WithStash(uint64_t v, uint32_t stash) {
    return (v & ~kShadowMask) | kStash | (static_cast<uint64_t>(stash + 1) << 32);
  }
  static uint64_t WithoutStash(uint64_t v) { return v & ~(kShadowMask | kStash); }
  static uint64_t WithPark(uint64_t v, uint32_t park) {
    return (v & ~(kShadowMask | kPresent)) | kParked | (static_cast<uint64_t>(park + 1) << 32);
  }
  static uint64_t WithoutPark(uint64_t v) { return v & ~(kShadowMask | kParked); }

  explicit CacheEntryTable(uint64_t blocks)
      : blocks_(blocks), entries_(new std::atomic<uint64_t>[blocks]) {
    for (uint64_t i = 0; i < blocks; ++i) entries_[i].store(0, std::memory_order_relaxed);
  }

  uint64_t size() const { return blocks_; }

  // The entry's value (waiters bit cleared).
  Entry Load(uint64_t block) const {
    return Entry{entries_[block].load(std::memory_order_acquire) & ~kWaiters};
  }

  // Blocks until the entry's lock is taken; returns the value under the lock (lock and
  // waiters bits cleared in the returned copy).
  Entry Lock(uint64_t block) {
    std::atomic<uint64_t>& e = entries_[block];
    uint64_t v = e.load(std::memory_order_relaxed);
    for (;;) {
      if (v & kLock) {
        SleepWhile(e, v);
        v = e.load(std::memory_order_relaxed);
        continue;
      }
      if (e.compare_exchange_weak(v, v | kLock, std::memory_order_acquire,
                                  std::memory_order_relaxed)) {
        return Entry{v & ~kWaiters};
      }
    }
  }

  // Takes the lock only if it is free right now (eviction uses this to avoid deadlock).
  bool TryLock(uint64_t block, Entry* out) {
    std::atomic<uint64_t>& e = entries_[block];
    uint64_t v = e.load(std::memory_order_relaxed);
    while (!(v & kLock)) {
      if (e.compare_exchange_weak(v, v | kLock, std::memory_order_acquire,
                                  std::memory_order_relaxed)) {
        *out = Entry{v & ~kWaiters};
        return true;
      }
    }
    return false;
  }

  // Sets `bits` if the entry is unlocked and has all of `if_set`; false otherwise. Used to
  // note a write fault on a queued fill without waiting for the fill's lock.
  bool TryOr(uint64_t block, uint64_t if_set, uint64_t bits) {
    std::atomic<uint64_t>& e = entries_[block];
    uint64_t v = e.load(std::memory_order_relaxed);
    while (!(v & kLock) && (v & if_set) == if_set) {
      if (e.compare_exchange_weak(v, v | bits, std::memory_order_acq_rel,
                                  std::memory_order_relaxed)) {
        return true;
      }
    }
    return false;
  }

  // Clears `bits` if the entry is unlocked and has all of `if_set`; false otherwise.
  bool TryClear(uint64_t block, uint64_t if_set, uint64_t bits) {
    std::atomic<uint64_t>& e = entries_[block];
    uint64_t v = e.load(std::memory_order_relaxed);
    while (!(v & kLock) && (v & if_set) == if_set) {
      if (e.compare_exchange_weak(v, v & ~bits, std::memory_order_acq_rel,
                                  std::memory_order_relaxed)) {
        return true;
      }
    }
    return false;
  }

  // Publishes `value` (without the lock bit) and wakes the threads sleeping on the entry.
  void Unlock(uint64_t block, uint64_t value) {
    const uint64_t old =
        entries_[block].exchange(value & ~(kLock | kWaiters), std::memory_order_acq_rel);
    if (old & kWaiters) {
      // Wakes the sleepers of this entry only; any result is fine (a sleeper that was not
      // there any more has looked at the new value itself).
      (void)::syscall(SYS_futex, FlagsWord(entries_[block]), FUTEX_WAKE_PRIVATE, INT_MAX,
                      nullptr, nullptr, 0);
    }
  }

  // Waits until the entry's value is no longer `seen` (compared without the waiters bit).
  void WaitChange(uint64_t block, uint64_t seen) {
    std::atomic<uint64_t>& e = entries_[block];
    uint64_t v = e.load(std::memory_order_acquire);
    while ((v & ~kWaiters) == (seen & ~kWaiters)) {
      SleepWhile(e, v);
      v = e.load(std::memory_order_acquire);
    }
  }

 private:
  // The futex word of an entry: its upper half, which holds every flag, the lock and the
  // waiters bit among them, so every Unlock that a sleeper waits for changes it. (Not
  // std::atomic<uint64_t>::wait: for a 64-bit value libstdc++ spins with sched_yield and
  // then sleeps on a futex shared by every address that hashes alike, so a fault waiting
  // for its read yielded the CPU to the threads it waited on again and again, and woke for
  // other blocks' fills: in a 4-thread scan on 2 cores, 23% of the application threads'
  // context switches were sched_yield.)
  static uint32_t* FlagsWord(std::atomic<uint64_t>& e) {
    static_assert(std::endian::native == std::endian::little, "the flags are the upper half");
    static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free);
    return reinterpret_cast<uint32_t*>(&e) + 1;
  }
  // Sleeps while the entry still holds `v`, after announcing the sleeper (kWaiters). Returns
  // at once if the entry changed meanwhile; may return spuriously. Every result of the wait
  // (woken, EAGAIN: the flags changed before it slept, EINTR: a signal) sends the caller to
  // look at the entry again, which is all it does with any of them.
  static void SleepWhile(std::atomic<uint64_t>& e, uint64_t v) {
    if (!(v & kWaiters)) {
      if (!e.compare_exchange_strong(v, v | kWaiters, std::memory_order_relaxed,
                                     std::memory_order_relaxed)) {
        return;  // changed meanwhile: the caller looks again
      }
      v |= kWaiters;
    }
    (void)::syscall(SYS_futex, FlagsWord(e), FUTEX_WAIT_PRIVATE, static_cast<uint32_t>(v >> 32),
                    nullptr, nullptr, 0);
  }

  const uint64_t blocks_;
  std::unique_ptr<std::atomic<uint64_t>[]> entries_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_FAULT_CACHE_ENTRY_TABLE_H_
