#include "base/process_memory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace umap {

uint64_t PeakRssBytes() {
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t bytes = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmHWM:", 6) == 0) {
      bytes = std::strtoull(line + 6, nullptr, 10) << 10;  // "VmHWM:   1234 kB"
      break;
    }
  }
  std::fclose(f);
  return bytes;
}

}  // namespace umap
