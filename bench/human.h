// Numbers for people: "64 MiB", "4 KiB", "1.5 GiB"; "12.3k", "1.05M", "950".
#ifndef UMAP_BENCH_HUMAN_H_
#define UMAP_BENCH_HUMAN_H_

#include <cstdint>
#include <string>

namespace umap_bench {

std::string HumanBytes(uint64_t n);
std::string HumanCount(double v);

}  // namespace umap_bench

#endif  // UMAP_BENCH_HUMAN_H_
