#include "base/log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace umap::log {
namespace {

Level ThresholdFromEnv() {
  const char* v = std::getenv("UMAP_LOG_LEVEL");
  if (v == nullptr) return Level::kWarn;
  if (std::strcmp(v, "debug") == 0) return Level::kDebug;
  if (std::strcmp(v, "info") == 0) return Level::kInfo;
  if (std::strcmp(v, "error") == 0) return Level::kError;
  return Level::kWarn;
}

const char* Name(Level l) {
  switch (l) {
    case Level::kDebug: return "DEBUG";
    case Level::kInfo: return "INFO";
    case Level::kWarn: return "WARN";
    case Level::kError: return "ERROR";
  }
  return "?";
}

}  // namespace

bool Enabled(Level level) {
  static const Level threshold = ThresholdFromEnv();
  return level >= threshold;
}

void Write(Level level, const char* file, int line, absl::string_view msg) {
  const char* base = std::strrchr(file, '/');
  std::string out = absl::StrCat("umap[", ::getpid(), "] ", Name(level), " ",
                                 base ? base + 1 : file, ":", line, ": ", msg, "\n");
  // One write() so lines from several threads do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, out.data(), out.size());
  (void)ignored;
}

}  // namespace umap::log
