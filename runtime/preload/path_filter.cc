#include "runtime/preload/path_filter.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace umap::preload {
namespace {

// Splits on `sep`, dropping empty elements.
std::vector<std::string> Split(const char* list, char sep) {
  std::vector<std::string> out;
  if (list == nullptr) return out;
  std::string_view rest(list);
  while (!rest.empty()) {
    const size_t end = rest.find(sep);
    std::string_view item = rest.substr(0, end);
    if (!item.empty()) out.emplace_back(item);
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return out;
}

std::string Canonical(const std::string& p) {
  char buf[PATH_MAX];
  std::string out = ::realpath(p.c_str(), buf) != nullptr ? std::string(buf) : p;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// Reads major:minor at the start of `field`.
bool ParseDevice(std::string_view field, unsigned* major, unsigned* minor) {
  unsigned a = 0, b = 0;
  size_t i = 0;
  if (i >= field.size() || field[i] < '0' || field[i] > '9') return false;
  while (i < field.size() && field[i] >= '0' && field[i] <= '9') a = a * 10 + (field[i++] - '0');
  if (i >= field.size() || field[i++] != ':') return false;
  if (i >= field.size() || field[i] < '0' || field[i] > '9') return false;
  while (i < field.size() && field[i] >= '0' && field[i] <= '9') b = b * 10 + (field[i++] - '0');
  if (i != field.size()) return false;
  *major = a;
  *minor = b;
  return true;
}

}  // namespace

PathFilter::PathFilter(const char* paths, const char* fstypes) {
  for (const std::string& p : Split(paths, ':')) prefixes_.push_back(Canonical(p));
  fstypes_ = Split(fstypes, ',');
}

bool PathFilter::MatchesPath(std::string_view path) const {
  for (const std::string& p : prefixes_) {
    if (p == "/") return !path.empty() && path[0] == '/';
    if (path.size() < p.size() || path.compare(0, p.size(), p) != 0) continue;
    if (path.size() == p.size() || path[p.size()] == '/') return true;
  }
  return false;
}

bool PathFilter::MatchesFsType(std::string_view type) const {
  for (const std::string& t : fstypes_) {
    if (type == t) return true;
  }
  return false;
}

bool PathFilter::TypeIfDevice(std::string_view line, dev_t dev, std::string_view* type) {
  // "36 35 98:0 /root /mnt rw,noatime master:1 - ext4 /dev/root rw": field 3 is the
  // device, the field after the " - " separator the type.
  size_t pos = 0;
  std::string_view fields[3];
  for (int i = 0; i < 3; ++i) {
    const size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) return false;
    fields[i] = line.substr(pos, end - pos);
    pos = end + 1;
  }
  unsigned major = 0, minor = 0;
  if (!ParseDevice(fields[2], &major, &minor)) return false;
  if (major != ::major(dev) || minor != ::minor(dev)) return false;
  const size_t sep = line.find(" - ", pos);
  if (sep == std::string_view::npos) return false;
  std::string_view rest = line.substr(sep + 3);
  *type = rest.substr(0, rest.find(' '));
  return !type->empty();
}

bool PathFilter::FsTypeOfDevice(dev_t dev, char* out, size_t out_len) {
  const int fd = ::open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // Lines are read into a fixed buffer; a line longer than it (a mount point with a very
  // long path) is skipped, never misparsed.
  char buf[8192];
  size_t have = 0;
  bool found = false, skipping = false;
  for (;;) {
    const ssize_t n = ::read(fd, buf + have, sizeof(buf) - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
    size_t start = 0;
    for (;;) {
      const void* nl = std::memchr(buf + start, '\n', have - start);
      if (nl == nullptr) break;
      const size_t end = static_cast<const char*>(nl) - buf;
      std::string_view type;
      if (!skipping && TypeIfDevice(std::string_view(buf + start, end - start), dev, &type) &&
          type.size() < out_len) {
        std::memcpy(out, type.data(), type.size());
        out[type.size()] = '\0';
        found = true;
        break;
      }
      skipping = false;
      start = end + 1;
    }
    if (found) break;
    if (start == 0 && have == sizeof(buf)) {
      skipping = true;  // drop the head of an overlong line
      have = 0;
      continue;
    }
    std::memmove(buf, buf + start, have - start);
    have -= start;
  }
  ::close(fd);
  return found;
}

bool PathFilter::DeviceMatches(dev_t dev) const {
  const uint64_t key = static_cast<uint64_t>(dev) + 1;
  for (int i = 0; i < kCacheSize; ++i) {
    if (cache_dev_[i].load(std::memory_order_acquire) != key) continue;
    const int verdict = cache_verdict_[i].load(std::memory_order_acquire);
    // Still the same key after reading the verdict: the slot was not being reused.
    if (cache_dev_[i].load(std::memory_order_acquire) == key) return verdict == 1;
  }
  char type[64];
  const bool match = FsTypeOfDevice(dev, type, sizeof(type)) && MatchesFsType(type);
  // Racing writers may both fill a slot: a verdict is the same whoever computes it. The
  // verdict is stored before the key is published.
  const uint32_t slot = cache_next_.fetch_add(1, std::memory_order_relaxed) % kCacheSize;
  cache_dev_[slot].store(0, std::memory_order_release);
  cache_verdict_[slot].store(match ? 1 : 0, std::memory_order_release);
  cache_dev_[slot].store(key, std::memory_order_release);
  return match;
}

bool PathFilter::Matches(int fd) const {
  if (empty()) return false;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (!fstypes_.empty() && DeviceMatches(st.st_dev)) return true;
  if (prefixes_.empty()) return false;
  char link[64];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  char path[PATH_MAX];
  const ssize_t n = ::readlink(link, path, sizeof(path) - 1);
  if (n <= 0) return false;
  return MatchesPath(std::string_view(path, static_cast<size_t>(n)));
}

}  // namespace umap::preload
