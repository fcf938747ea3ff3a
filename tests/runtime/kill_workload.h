// The deterministic workload shared by the kill worker and the kill test: round r writes
// whole blocks whose every 8-byte word names (round, block, word), so a torn or mixed block
// is recognisable, and the expected file after any set of rounds can be recomputed.
#ifndef UMAP_TESTS_RUNTIME_KILL_WORKLOAD_H_
#define UMAP_TESTS_RUNTIME_KILL_WORKLOAD_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace killtest {

struct Workload {
  uint64_t seed;
  uint64_t blocks;           // file size in blocks
  uint64_t block_size;
  uint64_t writes_per_round;

  // The blocks round r writes, in order (a block may repeat; the last write wins).
  std::vector<uint64_t> RoundBlocks(uint64_t r) const {
    std::mt19937_64 rng(seed * 1000003 + r);
    std::vector<uint64_t> out(writes_per_round);
    for (auto& b : out) b = rng() % blocks;
    return out;
  }

  // Content of `block` as written by round r (r == 0: the initial file).
  void Fill(uint64_t r, uint64_t block, char* dst) const {
    for (uint64_t w = 0; w < block_size / 8; ++w) {
      uint64_t v = (r << 40) | (block << 12) | w;
      std::memcpy(dst + w * 8, &v, 8);
    }
  }

  // The round whose version `data` holds, or -1 when it is no single round's (torn).
  int64_t VersionOf(uint64_t block, const char* data) const {
    uint64_t first;
    std::memcpy(&first, data, 8);
    uint64_t r = first >> 40;
    std::vector<char> want(block_size);
    Fill(r, block, want.data());
    return std::memcmp(want.data(), data, block_size) == 0 ? static_cast<int64_t>(r) : -1;
  }
};

}  // namespace killtest

#endif  // UMAP_TESTS_RUNTIME_KILL_WORKLOAD_H_
