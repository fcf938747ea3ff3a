// Test helper: a file of known bytes in a temp dir, and the expected byte at each offset.
#ifndef UMAP_TESTS_RUNTIME_TEST_FILE_H_
#define UMAP_TESTS_RUNTIME_TEST_FILE_H_

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#define UMAPTEST_NO_UMAP_NAMESPACE
#include "tests/testing/temp_dir.h"

// Top-level namespace: usable from C API tests (see temp_dir.h).
namespace umaptest {

// Deterministic content: differs per byte and per block, so a block read at the wrong
// offset or a stale block is caught.
inline char PatternByte(uint64_t off) {
  return static_cast<char>((off * 131) ^ (off >> 12) ^ 0x5a);
}

inline std::vector<char> Pattern(size_t size) {
  std::vector<char> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = PatternByte(i);
  return v;
}

// Creates `path` holding Pattern(size); returns an fd opened with `flags` (or -1).
inline int MakePatternFile(const std::string& path, size_t size, int flags = O_RDWR) {
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) return -1;
  std::vector<char> v = Pattern(size);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, v.data() + done, size - done);
    if (n <= 0) return -1;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return ::open(path.c_str(), flags);
}

inline std::vector<char> ReadAll(const std::string& path) {
  std::vector<char> out;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  ::close(fd);
  return out;
}

inline std::string ReadString(const std::string& path) {
  std::vector<char> v = ReadAll(path);
  return std::string(v.begin(), v.end());
}

// True when `s` is not empty and every byte of it is `c` (short failure messages instead of
// 4 KiB dumps).
inline bool AllBytesAre(const std::string& s, char c) {
  return !s.empty() && s.find_first_not_of(c) == std::string::npos;
}

}  // namespace umaptest

#endif  // UMAP_TESTS_RUNTIME_TEST_FILE_H_
