// Deadlines of I/O attempts. Every read or write the runtime and recovery issue has a time
// budget (io_timeout_ms); these helpers are the one definition of "expired" and of how long a
// waiter may sleep, shared by the read channels, their watchdog and the write engine, so that
// the read and write paths cannot drift apart on what a stalled request is.
//
// All times are microseconds of one monotonic clock (Env::NowMicros).
#ifndef UMAP_BASE_DEADLINE_H_
#define UMAP_BASE_DEADLINE_H_

#include <time.h>

#include <algorithm>
#include <cstdint>

#include <linux/time_types.h>

namespace umap {

// No deadline pending.
inline constexpr uint64_t kNoDeadline = UINT64_MAX;

// The instant an attempt started at `started_us` runs out of a `timeout_us` budget.
inline uint64_t DeadlineOf(uint64_t started_us, uint64_t timeout_us) {
  return started_us > kNoDeadline - timeout_us ? kNoDeadline : started_us + timeout_us;
}

// True once an attempt started at `started_us` has used up `timeout_us`. A clock read that
// precedes the start (another thread's older reading) is never expired.
inline bool DeadlinePassed(uint64_t started_us, uint64_t timeout_us, uint64_t now_us) {
  return now_us >= started_us && now_us - started_us >= timeout_us;
}

// poll(2) timeout in ms until `wake_at_us`: -1 when there is none, at least 1 ms otherwise (a
// due item that the caller cannot take right now must not make it spin), at most a minute.
inline int PollTimeoutMs(uint64_t wake_at_us, uint64_t now_us) {
  if (wake_at_us == kNoDeadline) return -1;
  if (wake_at_us <= now_us) return 1;
  return static_cast<int>(std::min<uint64_t>((wake_at_us - now_us) / 1000 + 1, 60'000));
}

// The time left until `deadline_us`, for io_uring_wait_cqe_timeout (0 when it has passed).
inline __kernel_timespec TimeLeft(uint64_t deadline_us, uint64_t now_us) {
  const uint64_t us = deadline_us > now_us ? deadline_us - now_us : 0;
  return __kernel_timespec{static_cast<long long>(us / 1'000'000),
                           static_cast<long long>(us % 1'000'000) * 1000};
}

}  // namespace umap

#endif  // UMAP_BASE_DEADLINE_H_
