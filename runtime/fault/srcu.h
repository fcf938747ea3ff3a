// Srcu: sleepable read-copy-update for objects the fault path reads without locks.
//
// Fault handlers (handler threads, or application threads inside the SIGBUS handler) look
// up a Mapping or a Runtime through an atomic pointer and use it for as long as the fault
// takes, I/O included. Whoever removes such an object first clears the pointer, then calls
// Synchronize(), which returns once every reader that might still hold the old pointer has
// left its read section; then the object may be freed.
//
// Readers cost two atomic read-modify-writes on a shared counter and never wait; there is no
// per-thread state (application threads come and go, and thread-local storage is not safe to
// touch for the first time inside a signal handler). Synchronize flips the reader counter
// twice, so a reader that keeps re-entering can never starve it (classic two-counter SRCU).
//
// Async-signal-safe: ReadLock/ReadUnlock use only lock-free atomics.
#ifndef UMAP_RUNTIME_FAULT_SRCU_H_
#define UMAP_RUNTIME_FAULT_SRCU_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace umap::runtime {

class Srcu {
 public:
  // Enters a read section; pass the result to ReadUnlock.
  uint32_t ReadLock() {
    for (;;) {
      const uint32_t g = gen_.load(std::memory_order_seq_cst);
      readers_[g & 1].value.fetch_add(1, std::memory_order_seq_cst);
      // If a writer flipped meanwhile it may already be waiting on the other counter only:
      // enter through the new one instead, so that Synchronize's wait covers this reader.
      if (gen_.load(std::memory_order_seq_cst) == g) return g;
      readers_[g & 1].value.fetch_sub(1, std::memory_order_release);
    }
  }
  void ReadUnlock(uint32_t token) {
    readers_[token & 1].value.fetch_sub(1, std::memory_order_release);
  }

  // Returns when every read section that started before the call has ended. Callers are
  // serialised by the caller (map/unmap hold a mutex); sleeps, never spins hard.
  void Synchronize() {
    for (int flip = 0; flip < 2; ++flip) {
      const uint32_t old = gen_.fetch_add(1, std::memory_order_seq_cst);
      while (readers_[old & 1].value.load(std::memory_order_seq_cst) != 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

 private:
  struct alignas(64) Counter {
    std::atomic<uint64_t> value{0};
  };
  std::atomic<uint32_t> gen_{0};
  Counter readers_[2];
};

// RAII read section.
class SrcuReadLock {
 public:
  explicit SrcuReadLock(Srcu& s) : s_(s), token_(s.ReadLock()) {}
  ~SrcuReadLock() { s_.ReadUnlock(token_); }
  SrcuReadLock(const SrcuReadLock&) = delete;
  SrcuReadLock& operator=(const SrcuReadLock&) = delete;

 private:
  Srcu& s_;
  const uint32_t token_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_FAULT_SRCU_H_
