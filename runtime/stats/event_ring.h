// EventRing: a bounded multi-producer, single-consumer queue of 16-byte events, for the fault
// path to hand sampled accesses to the cache sizer's thread.
//
// Producers (faulting threads, possibly inside a signal handler) never block, never
// allocate and never take a lock: a push claims a cell with one CAS and publishes it with
// one store (Vyukov's bounded queue); when the ring is full the event is dropped and
// counted. A producer interrupted between the claim and the publication (a signal handler
// faulting on another block) only delays the consumer, which stops at the unpublished cell.
// The consumer is one thread.
#ifndef UMAP_RUNTIME_STATS_EVENT_RING_H_
#define UMAP_RUNTIME_STATS_EVENT_RING_H_

#include <atomic>
#include <cstdint>

#include "runtime/cache/zeroed_array.h"

namespace umap::runtime {

class EventRing {
 public:
  struct Event {
    uint64_t a = 0;
    uint64_t b = 0;
  };

  // `capacity`: a power of two.
  explicit EventRing(uint32_t capacity) : mask_(capacity - 1), cells_(capacity) {
    for (uint32_t i = 0; i < capacity; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }
  EventRing(const EventRing&) = delete;
  EventRing& operator=(const EventRing&) = delete;

  uint32_t capacity() const { return mask_ + 1; }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  // Any thread. False (and counted) when the ring is full.
  bool Push(const Event& e) {
    uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& c = cells_[pos & mask_];
      const uint64_t seq = c.seq.load(std::memory_order_acquire);
      const int64_t dif = static_cast<int64_t>(seq) - static_cast<int64_t>(pos);
      if (dif == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          c.a = e.a;
          c.b = e.b;
          c.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (dif < 0) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return false;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // The consumer thread only. False when nothing is published at the head.
  bool Pop(Event* out) {
    Cell& c = cells_[head_ & mask_];
    if (c.seq.load(std::memory_order_acquire) != head_ + 1) return false;
    out->a = c.a;
    out->b = c.b;
    c.seq.store(head_ + mask_ + 1, std::memory_order_release);
    ++head_;
    return true;
  }

 private:
  struct Cell {
    std::atomic<uint64_t> seq;
    uint64_t a;
    uint64_t b;
  };
  const uint64_t mask_;
  ZeroedArray<Cell> cells_;
  alignas(64) std::atomic<uint64_t> tail_{0};
  alignas(64) uint64_t head_ = 0;  // consumer only
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_STATS_EVENT_RING_H_
