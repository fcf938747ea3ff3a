// SizingPolicy: the cache's capacity controller, as a pure function of time and inputs (the
// CacheSizer thread feeds it; tests drive it with a simulated clock). docs/design.md "Cache
// sizing" explains the rules; in short:
//
//   ceiling = min(hard cap, memory allowance, pressure ceiling)   (never below kMinBlocks)
//   limit   = min(limit, ceiling)        growth happens on the fault path, up to the ceiling
//
// Memory pressure (a PSI trigger, or the cgroup's usage near its limit) sets the pressure
// ceiling to the virtual capacity (the smallest capacity predicted to miss about as often as
// the current one), or, when the cache is already there, 1/8 below the current limit; the
// floor is the starting capacity. Events closer than `pressure_gap_us` (the PSI window)
// count once. After `hold` without pressure the ceiling rises by one step (1/8, at least the
// minimum batch), once per hold, until it no longer binds. Pressure that returns within two
// holds of a rise doubles the hold (up to `max_hold_us`); pressure that finds the ceiling
// risen all the way (no longer binding) starts again from `hold_us`: the controller probes
// upward ever more rarely where memory is tight, so it settles instead of oscillating, and
// recovers when the pressure is gone.
#ifndef UMAP_RUNTIME_SIZING_SIZING_POLICY_H_
#define UMAP_RUNTIME_SIZING_SIZING_POLICY_H_

#include <cstdint>
#include <limits>

namespace umap::runtime {

class SizingPolicy {
 public:
  // The smallest ceiling the memory budget may impose (the pool needs a few blocks to work).
  static constexpr uint32_t kMinBlocks = 8;
  static constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();

  struct Options {
    uint32_t floor_blocks = 64;     // pressure never shrinks below this (the start)
    uint32_t min_step_blocks = 64;  // smallest relaxation step
    uint64_t hold_us = 4'000'000;   // quiet time before the pressure ceiling rises
    uint64_t max_hold_us = 64'000'000;
    uint64_t pressure_gap_us = 2'000'000;
  };
  struct Input {
    uint64_t now_us = 0;
    uint32_t limit = 0;           // the pool's limit now
    uint32_t hard_cap = 0;        // cache_bytes, or the structural maximum
    uint32_t allowance = 0;       // what the memory budget allows the cache now
    uint32_t virtual_blocks = 0;  // the virtual capacity (all mappings)
    bool pressure = false;
  };
  struct Output {
    uint32_t limit = 0;    // to set (only ever lowered here)
    uint32_t ceiling = 0;  // the fault path may grow the limit up to this
    bool pressure_acted = false;
  };

  explicit SizingPolicy(const Options& o) : options_(o), hold_us_(o.hold_us) {}

  Output Step(const Input& in);

  uint32_t pressure_ceiling() const { return pressure_ceiling_; }
  uint64_t hold_us() const { return hold_us_; }
  uint64_t pressure_events() const { return pressure_events_; }

 private:
  void OnPressure(const Input& in);
  void MaybeRelax(const Input& in);

  const Options options_;
  uint32_t pressure_ceiling_ = kUnbounded;
  uint64_t hold_us_;
  uint64_t last_pressure_us_ = 0;
  uint64_t last_rise_us_ = 0;
  bool seen_pressure_ = false;
  bool rose_since_pressure_ = false;
  uint64_t pressure_events_ = 0;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_SIZING_SIZING_POLICY_H_
