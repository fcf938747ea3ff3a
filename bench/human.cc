#include "bench/human.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace umap_bench {

std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return absl::StrCat(n, " B");
  return v >= 100 || v == std::floor(v) ? absl::StrFormat("%.0f %s", v, units[u])
                                        : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string HumanCount(double v) {
  if (v >= 1e6) return absl::StrFormat("%.3gM", v / 1e6);
  if (v >= 1e4) return absl::StrFormat("%.3gk", v / 1e3);
  if (v >= 100) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.3g", v);
}

}  // namespace umap_bench
