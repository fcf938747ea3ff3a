// Helpers for recovery tests: block images that differ per (version, block), a data file on
// the local disk, and verbs for the protocol steps a crashed writer may have done
// (commit, apply some blocks, tear a block, mark applied).
#ifndef UMAP_TESTS_RECOVERY_RECOVERY_TEST_UTIL_H_
#define UMAP_TESTS_RECOVERY_RECOVERY_TEST_UTIL_H_

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace recoverytest {

// The bytes of `block` at `version` (version 0: the file's initial content). Every byte
// depends on both, so a stale, misplaced or torn block is caught.
inline std::string Image(uint64_t version, uint64_t block, size_t n = 4096) {
  std::string s(n, '\0');
  uint64_t x = (version + 1) * 0x9E3779B97F4A7C15ull ^ (block + 7) * 0xC2B2AE3D27D4EB4Full;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

// block -> version; a file of `blocks` blocks holds Image(state[b], b) at block b.
using FileState = std::map<uint64_t, uint64_t>;

inline std::string Contents(const FileState& state, uint64_t blocks, size_t bs = 4096) {
  std::string out;
  for (uint64_t b = 0; b < blocks; ++b) {
    auto it = state.find(b);
    out += Image(it == state.end() ? 0 : it->second, b, bs);
  }
  return out;
}

inline bool WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.flush();
  return f.good();
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool PWrite(const std::string& path, uint64_t offset, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) return false;
  bool ok = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)) ==
            static_cast<ssize_t>(bytes.size());
  ::close(fd);
  return ok;
}

// The first block that differs, for readable failures ("-1" when equal).
inline std::string FirstDiff(const std::string& got, const std::string& want, size_t bs = 4096) {
  if (got.size() != want.size()) {
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  for (size_t off = 0; off < got.size(); off += bs) {
    if (std::memcmp(got.data() + off, want.data() + off, std::min(bs, got.size() - off)) != 0) {
      return "block " + std::to_string(off / bs);
    }
  }
  return "-1";
}

}  // namespace recoverytest

#endif  // UMAP_TESTS_RECOVERY_RECOVERY_TEST_UTIL_H_
