// CLOCK_MONOTONIC in microseconds: for periods and ages inside one machine (log limits,
// staleness, back-off). Async-signal-safe (vDSO). Env::NowMicros is the one to use where a
// test must control time.
#ifndef UMAP_BASE_CLOCK_H_
#define UMAP_BASE_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace umap {

inline uint64_t MonotonicMicros() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

}  // namespace umap

#endif  // UMAP_BASE_CLOCK_H_
