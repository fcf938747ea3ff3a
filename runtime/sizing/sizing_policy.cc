#include "runtime/sizing/sizing_policy.h"

#include <algorithm>

namespace umap::runtime {

void SizingPolicy::OnPressure(const Input& in) {
  // Shrink to the virtual capacity; a cache already at or below it steps down by 1/8.
  uint32_t target = std::min(in.limit, std::max(in.virtual_blocks, options_.floor_blocks));
  if (target >= in.limit) target = in.limit - in.limit / 8;
  target = std::max(target, std::min(options_.floor_blocks, in.limit));
  // Pressure soon after the ceiling rose: that rise was too much; wait longer next time.
  // Pressure after the ceiling had stopped binding is a new situation: start afresh.
  if (pressure_ceiling_ == kUnbounded) {
    hold_us_ = options_.hold_us;
  } else if (rose_since_pressure_ && in.now_us - last_rise_us_ < 2 * hold_us_) {
    hold_us_ = std::min(2 * hold_us_, options_.max_hold_us);
  }
  pressure_ceiling_ = target;  // <= limit <= the old ceiling
  last_pressure_us_ = in.now_us;
  last_rise_us_ = in.now_us;
  seen_pressure_ = true;  // (the PSI window applies from the first event on)
  rose_since_pressure_ = false;
  ++pressure_events_;
}

void SizingPolicy::MaybeRelax(const Input& in) {
  if (pressure_ceiling_ == kUnbounded || in.now_us - last_rise_us_ < hold_us_) return;
  const uint32_t step = std::max(options_.min_step_blocks, pressure_ceiling_ / 8);
  const uint64_t next = uint64_t{pressure_ceiling_} + step;
  pressure_ceiling_ = next >= in.hard_cap ? kUnbounded : static_cast<uint32_t>(next);
  last_rise_us_ = in.now_us;
  rose_since_pressure_ = true;
}

SizingPolicy::Output SizingPolicy::Step(const Input& in) {
  Output out;
  if (in.pressure &&
      (!seen_pressure_ || in.now_us - last_pressure_us_ >= options_.pressure_gap_us)) {
    OnPressure(in);
    out.pressure_acted = true;
  } else {
    MaybeRelax(in);
  }
  const uint32_t budget = std::max(kMinBlocks, in.allowance);
  out.ceiling = std::min({in.hard_cap, budget, pressure_ceiling_});
  out.limit = std::min(in.limit, out.ceiling);
  return out;
}

}  // namespace umap::runtime
