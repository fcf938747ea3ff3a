// The benchmark file: an array of 64-bit words where word k holds the double k+1 (so the file
// is a row-major matrix of doubles with A[r][c] = r*cols + c + 1, and a zero page never
// passes for data). A write run with tag t stores -(k + 1 + t*2^40) into every word of each
// item (op-size unit) it writes, so after the run each item holds exactly one of two values,
// and data from a wrong offset or an older run cannot pass.
//
// Not thread-safe: one BenchFile is used by one thread at a time (the workers only touch the
// bytes through a backend).
#ifndef UMAP_BENCH_BENCH_FILE_H_
#define UMAP_BENCH_BENCH_FILE_H_

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace umap_bench {

inline constexpr uint64_t kTagShift = 40;
inline constexpr uint32_t kMaxTag = 4095;  // tags are 1..kMaxTag, so values stay < 2^53

inline uint64_t OriginalWord(uint64_t k) {
  return std::bit_cast<uint64_t>(static_cast<double>(k + 1));
}
inline uint64_t WrittenWord(uint64_t k, uint32_t tag) {
  return std::bit_cast<uint64_t>(
      -static_cast<double>(k + 1 + (static_cast<uint64_t>(tag) << kTagShift)));
}
// Fills n words starting at file word `first` (tag 0: the original contents).
void FillWords(uint64_t* dst, uint64_t first, size_t n, uint32_t tag);

// Open() creates and fills the file when missing (or too short), and refuses a file whose
// first word is not the pattern's (it is somebody else's data).
class BenchFile {
 public:
  static absl::StatusOr<BenchFile> Open(const std::string& path, uint64_t size);

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Seconds spent creating/filling, 0 when the file was already there.
  double fill_seconds() const { return fill_seconds_; }

  // Reads the whole file and rewrites every word that is not the original (after an
  // interrupted earlier run). Returns how many bytes were wrong.
  absl::StatusOr<uint64_t> Repair() const;

  // Makes the file's page cache clean, then drops it (posix_fadvise DONTNEED); with
  // `system_wide`, also writes 3 to /proc/sys/vm/drop_caches (brick side of a DFS).
  absl::Status DropCache(bool system_wide) const;

  // Bytes of the file resident in the page cache (mincore over a fresh mapping).
  absl::StatusOr<uint64_t> CachedBytes() const;

  // Checks the whole file after a write run: items set in `written` (item = item_size bytes)
  // hold tag `tag`, all others the original; then restores the written items (and any
  // wrong ones) to the original and syncs. DataLoss names the first wrong offsets.
  absl::Status VerifyAndRestore(const std::vector<uint64_t>& written, uint64_t item_size,
                                uint32_t tag) const;

  // Test hook: stores `value` into word `word` and fsyncs (proves the checks bite).
  absl::Status TEST_WriteWord(uint64_t word, uint64_t value) const;

 private:
  BenchFile(std::string path, uint64_t size) : path_(std::move(path)), size_(size) {}
  absl::Status Fill(uint64_t from) const;

  std::string path_;
  uint64_t size_ = 0;
  double fill_seconds_ = 0;
};

}  // namespace umap_bench

#endif  // UMAP_BENCH_BENCH_FILE_H_
