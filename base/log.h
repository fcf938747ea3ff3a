// Minimal logging for slow and error paths (never on the fault path's fast branch).
// Writes one line to stderr (or to UMAP_LOG_FILE): "umap[pid] LEVEL file:line: message".
// UMAP_LOG_LEVEL=debug|info|warn|error (default warn) and UMAP_LOG_FILE are read once, in
// base/log.cc. UMAP_LOG_EVERY writes a call site's line at most once per period, naming
// how many it left out: for errors that repeat while a condition lasts (a full disk).
#ifndef UMAP_BASE_LOG_H_
#define UMAP_BASE_LOG_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace umap::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

bool Enabled(Level level);
void Write(Level level, const char* file, int line, absl::string_view msg);

// One call site's limit: Allow() is true at most once per period (CLOCK_MONOTONIC); the
// lines refused since the last allowed one are counted and returned with the next.
class EveryPeriod {
 public:
  explicit constexpr EveryPeriod(uint64_t period_us) : period_us_(period_us) {}
  bool Allow(uint64_t* left_out);

 private:
  const uint64_t period_us_;
  std::atomic<uint64_t> last_us_{0};
  std::atomic<uint64_t> left_out_{0};
};

}  // namespace umap::log

#define UMAP_LOG(level, ...)                                                           \
  do {                                                                                  \
    if (::umap::log::Enabled(::umap::log::Level::level))                               \
      ::umap::log::Write(::umap::log::Level::level, __FILE__, __LINE__,                \
                         ::absl::StrCat(__VA_ARGS__));                                  \
  } while (0)

#define UMAP_LOG_EVERY(level, seconds, ...)                                            \
  do {                                                                                  \
    static ::umap::log::EveryPeriod umap_log_every_(uint64_t{seconds} * 1'000'000);    \
    uint64_t umap_log_left_out_ = 0;                                                    \
    if (::umap::log::Enabled(::umap::log::Level::level) &&                             \
        umap_log_every_.Allow(&umap_log_left_out_)) {                                   \
      std::string umap_log_msg_ = ::absl::StrCat(__VA_ARGS__);                          \
      if (umap_log_left_out_ > 0) {                                                     \
        ::absl::StrAppend(&umap_log_msg_, " (and ", umap_log_left_out_,                 \
                          " more like it in the last ", seconds, " s)");                \
      }                                                                                 \
      ::umap::log::Write(::umap::log::Level::level, __FILE__, __LINE__, umap_log_msg_); \
    }                                                                                   \
  } while (0)

#endif  // UMAP_BASE_LOG_H_
