#include "base/log.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/clock.h"

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

// UMAP_LOG_FILE: lines are appended there (O_APPEND: one write() per line, so the lines of
// several processes sharing the file do not interleave), for programs whose stderr is
// captured or closed (daemons, test runners). Stderr when unset or when it cannot be opened.
int OutputFd() {
  const char* path = std::getenv("UMAP_LOG_FILE");
  if (path == nullptr || *path == '\0') return STDERR_FILENO;
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const std::string why = absl::StrCat("umap[", ::getpid(), "] WARN log.cc: UMAP_LOG_FILE=",
                                         path, " cannot be opened (", std::strerror(errno),
                                         "); logging to stderr\n");
    ssize_t ignored = ::write(STDERR_FILENO, why.data(), why.size());
    (void)ignored;
    return STDERR_FILENO;
  }
  return fd;
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
  static const int fd = OutputFd();
  ssize_t ignored = ::write(fd, out.data(), out.size());
  (void)ignored;
}

bool EveryPeriod::Allow(uint64_t* left_out) {
  const uint64_t now = MonotonicMicros() + 1;  // +1: a last_us_ of 0 means "never said"
  uint64_t last = last_us_.load(std::memory_order_relaxed);
  if ((last != 0 && now - last < period_us_) ||
      !last_us_.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    left_out_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *left_out = left_out_.exchange(0, std::memory_order_relaxed);
  return true;
}

}  // namespace umap::log
