#include "chaos/workload.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"

namespace chaos {

std::vector<uint64_t> RoundBlocks(uint64_t seed, uint64_t round, uint64_t blocks) {
  Rng rng(Mix(seed) ^ Mix(round * 0x100000001b3ull));
  const uint64_t count = rng.OneIn(8) ? blocks / 2 : rng.Range(1, std::min<uint64_t>(4, blocks));
  std::vector<uint64_t> out;
  while (out.size() < count) {
    uint64_t b = rng.Range(0, blocks - 1);
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
void Put64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint64_t Get64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
}  // namespace

void FillBlock(uint64_t tag, uint64_t block, uint64_t version, absl::Span<char> out) {
  char* p = out.data();
  const size_t n = out.size();
  Put64(p, kMagic);
  Put64(p + 8, tag);
  Put64(p + 16, block);
  Put64(p + 24, version);
  uint64_t s = Mix(tag) ^ Mix(block + 1) ^ Mix(version * 31 + 7);
  for (size_t i = 32; i + 8 <= n - 4; i += 8) Put64(p + i, s = Mix(s));
  const uint32_t crc = umap::crc32c::Value(p, n - 4);
  std::memcpy(p + n - 4, &crc, 4);
}

Decoded DecodeBlock(uint64_t tag, uint64_t block, absl::Span<const char> in) {
  Decoded d;
  const char* p = in.data();
  const size_t n = in.size();
  if (std::all_of(in.begin(), in.end(), [](char c) { return c == 0; })) {
    d.kind = Decoded::Kind::kZero;
    d.why = "all zeros";
    return d;
  }
  uint32_t stored;
  std::memcpy(&stored, p + n - 4, 4);
  if (umap::crc32c::Value(p, n - 4) != stored) {
    d.kind = Decoded::Kind::kTorn;
    d.why = absl::StrCat("CRC mismatch (header says version ", Get64(p + 24), ")");
    return d;
  }
  if (Get64(p) != kMagic || Get64(p + 8) != tag || Get64(p + 16) != block) {
    d.kind = Decoded::Kind::kForeign;
    d.why = absl::StrCat("intact image of another block/file (tag ", Get64(p + 8), ", block ",
                         Get64(p + 16), ", version ", Get64(p + 24), ")");
    return d;
  }
  d.kind = Decoded::Kind::kVersion;
  d.version = Get64(p + 24);
  return d;
}

}  // namespace chaos
