#include "bench/human.h"

#include <cmath>

#include "absl/strings/numbers.h"
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

absl::StatusOr<uint64_t> ParseBytes(const std::string& s) {
  int shift = 0;
  std::string digits = s;
  switch (s.empty() ? '\0' : s.back()) {
    case 'K':
    case 'k':
      shift = 10;
      break;
    case 'M':
    case 'm':
      shift = 20;
      break;
    case 'G':
    case 'g':
      shift = 30;
      break;
    case 'T':
    case 't':
      shift = 40;
      break;
    default:
      break;
  }
  if (shift != 0) digits.pop_back();
  uint64_t v = 0;
  if (digits.empty() || !absl::SimpleAtoi(digits, &v) || (v << shift >> shift) != v) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", s, "' is not a size (e.g. 4096, 64K, 16M, 1G)"));
  }
  return v << shift;
}

}  // namespace umap_bench
