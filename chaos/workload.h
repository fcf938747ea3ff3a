// The chaos workload, shared by the driver (umap-chaos, which keeps the oracle) and the
// worker (umap-chaos-worker, which writes through umap): which blocks each round writes,
// and the self-describing image of one block version.
//
// Block image (kBlockSize bytes, little endian):
//   [0, 8)    kMagic "UMAPCHAO"
//   [8, 16)   file tag (random per iteration: a block of another file or run is foreign)
//   [16, 24)  block index (a misdirected write is foreign)
//   [24, 32)  version: the round that wrote it (0 = the initial file)
//   [32, n-4) filler drawn from (tag, block, version)
//   [n-4, n)  CRC32C of [0, n-4)
// So every version of every block is distinguishable, and a torn or garbled block matches
// no version (its CRC fails).
//
// Round r (1, 2, ... counted across the worker runs of one iteration) writes version r into
// RoundBlocks(seed, r, blocks): a few random blocks, and now and then half the file (more
// than the cache holds, so dirty blocks are evicted: spilled in atomic, stolen in relaxed).
#ifndef UMAP_CHAOS_WORKLOAD_H_
#define UMAP_CHAOS_WORKLOAD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace chaos {

inline constexpr uint64_t kBlockSize = 4096;
inline constexpr uint64_t kMagic = 0x4f41484350414d55ull;  // "UMAPCHAO"

// splitmix64: the one PRNG of the harness (seeded, reproducible, no global state).
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() { return Mix(s_++ * 0x2545f4914f6cdd1dull); }
  // Uniform in [lo, hi] (hi >= lo).
  uint64_t Range(uint64_t lo, uint64_t hi) { return lo + Next() % (hi - lo + 1); }
  bool OneIn(uint64_t n) { return Next() % n == 0; }

 private:
  uint64_t s_;
};

// The blocks round `round` writes, sorted, distinct, each < blocks.
std::vector<uint64_t> RoundBlocks(uint64_t seed, uint64_t round, uint64_t blocks);

// Writes the image of (tag, block, version) into out (out.size() == kBlockSize).
void FillBlock(uint64_t tag, uint64_t block, uint64_t version, absl::Span<char> out);

// What a block of the file holds. kZero: every byte is 0 (a hole, or a block the DFS never
// got); version is then 0, and the oracle accepts it only where the harness left a hole.
struct Decoded {
  enum class Kind { kVersion, kTorn, kForeign, kZero } kind = Kind::kTorn;
  uint64_t version = 0;  // kVersion (kZero: 0)
  std::string why;       // kTorn / kForeign / kZero: what did not match
};
Decoded DecodeBlock(uint64_t tag, uint64_t block, absl::Span<const char> in);

}  // namespace chaos

#endif  // UMAP_CHAOS_WORKLOAD_H_
