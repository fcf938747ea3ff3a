// Minimal logging for slow and error paths (never on the fault path's fast branch).
// Writes one line to stderr (or to UMAP_LOG_FILE): "umap[pid] LEVEL file:line: message".
// UMAP_LOG_LEVEL=debug|info|warn|error (default warn) and UMAP_LOG_FILE are read once, in
// base/log.cc.
#ifndef UMAP_BASE_LOG_H_
#define UMAP_BASE_LOG_H_

#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"

namespace umap::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

bool Enabled(Level level);
void Write(Level level, const char* file, int line, absl::string_view msg);

}  // namespace umap::log

#define UMAP_LOG(level, ...)                                                           \
  do {                                                                                  \
    if (::umap::log::Enabled(::umap::log::Level::level))                               \
      ::umap::log::Write(::umap::log::Level::level, __FILE__, __LINE__,                \
                         ::absl::StrCat(__VA_ARGS__));                                  \
  } while (0)

#endif  // UMAP_BASE_LOG_H_
