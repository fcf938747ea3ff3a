// Numbers for people: "64 MiB", "4 KiB", "1.5 GiB"; "12.3k", "1.05M", "950".
#ifndef UMAP_BENCH_HUMAN_H_
#define UMAP_BENCH_HUMAN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace umap_bench {

std::string HumanBytes(uint64_t n);
std::string HumanCount(double v);
// "16M" -> 16 MiB, "4K", "1G", "4096" (binary suffixes K/M/G/T, either case).
absl::StatusOr<uint64_t> ParseBytes(const std::string& s);

}  // namespace umap_bench

#endif  // UMAP_BENCH_HUMAN_H_
