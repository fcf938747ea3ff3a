// Workload runner shared by umap-bench and umap-demo: one timed run of one access pattern
// over one backend (umap, mmap or pread) on one file, with the result checked.
//
// The bench file is an array of 64-bit words; word k holds the double k+1 (so the file is a
// row-major matrix of doubles with A[r][c] = r*cols + c + 1, and a zero page never passes
// for data). A write run with tag t stores -(k + 1 + t*2^40) into every word of each item
// (op-size unit) it writes, so after the run each item holds exactly one of two values, and
// data from a wrong offset or an older run cannot pass. After a write run the whole file is
// read back and checked (written items: the tag value; the others: the original), then the
// written items are restored, so every run starts from the same file.
//
// Threads: RunOnce() is called from one thread at a time; it starts and joins its own
// workers. Nothing here is thread-safe across concurrent RunOnce() calls on one file.
#ifndef UMAP_BENCH_WORKLOAD_H_
#define UMAP_BENCH_WORKLOAD_H_

#include <sys/types.h>

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "umap/umap_types.h"

namespace umap_bench {

enum class Backend { kUmap, kMmap, kPread };
enum class Pattern { kRandom, kSequential, kStrided };
enum class Access { kRead, kWrite, kMixed };
// kDefault leaves the mapping as mmap() made it (no madvise call at all).
enum class Advice { kDefault, kNormal, kRandom, kSequential };
// How much of every read op is compared with the expected words.
enum class ReadCheck { kEnds, kAll };

const char* BackendName(Backend b);
const char* PatternName(Pattern p);
const char* AccessName(Access a);
const char* AdviceName(Advice a);
absl::StatusOr<Backend> ParseBackend(const std::string& s);
absl::StatusOr<Pattern> ParsePattern(const std::string& s);
absl::StatusOr<Access> ParseAccess(const std::string& s);
absl::StatusOr<Advice> ParseAdvice(const std::string& s);
const char* PolicyName(umap_policy p);
const char* JournalModeName(umap_journal_mode m);
absl::StatusOr<umap_policy> ParsePolicy(const std::string& s);
absl::StatusOr<umap_journal_mode> ParseJournalMode(const std::string& s);

// --- the file's contents ---------------------------------------------------------------

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

// The benchmark file. Open() creates and fills it when missing (or too short), and refuses a
// file whose first word is not the pattern's (it is somebody else's data).
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

 private:
  BenchFile(std::string path, uint64_t size) : path_(std::move(path)), size_(size) {}
  absl::Status Fill(uint64_t from) const;

  std::string path_;
  uint64_t size_ = 0;
  double fill_seconds_ = 0;
};

// --- one run ----------------------------------------------------------------------------

struct Workload {
  Pattern pattern = Pattern::kRandom;
  Access access = Access::kRead;
  size_t op_size = 4096;        // bytes per op; item unit for writes and verification
  double locality = 0;          // random only: P(next op is the item after the previous)
  uint64_t stride_items = 16;   // strided: distance between consecutive ops, in items
  double write_fraction = 0.5;  // mixed only
  uint64_t ops_per_thread = 10000;
  unsigned threads = 1;
  uint64_t sync_every = 0;  // umsync/msync/fdatasync every N ops per thread (0: end only)
  ReadCheck read_check = ReadCheck::kEnds;
  uint64_t seed = 1;

  bool writes() const { return access != Access::kRead; }
  // "random-read", "random-write-L0.8", "sequential-mixed50", ... (no thread count).
  std::string Name() const;
};

struct BackendConfig {
  Backend backend = Backend::kUmap;
  // umap
  size_t cache_bytes = size_t{64} << 20;
  size_t block_size = 4096;
  unsigned handler_threads = 2;
  unsigned writeback_threads = 1;
  // Write-back policy and journal (umap_config); empty journal_dir: the runtime's automatic
  // per-runtime journal directory.
  umap_policy policy = UMAP_POLICY_ATOMIC;
  umap_journal_mode journal_mode = UMAP_JOURNAL_DATA;
  std::string journal_dir;
  // mmap
  Advice advice = Advice::kDefault;
  // every backend
  bool drop_caches = false;     // also /proc/sys/vm/drop_caches before each run
  double stall_seconds = 120;   // no op finished for this long: report and exit(4)
  std::string cgroup_dir;       // when set: per-run peak from memory.max_usage_in_bytes
  // Test hook: overwrite file word TEST_corrupt_word (read runs: before the run, restored
  // after it; write runs: after the run, before verification), to prove the checks bite.
  uint64_t TEST_corrupt_word = ~0ull;
};

struct RunResult {
  Backend backend = Backend::kUmap;
  std::string workload;
  unsigned threads = 0;
  int repeat = 0;
  uint64_t ops = 0;
  double wall_s = 0;
  double ops_per_s = 0;
  double mb_per_s = 0;  // 10^6 bytes of ops per second
  uint64_t faults = 0;  // umap: MISSING + WP faults; mmap/pread: minor + major (getrusage)
  uint64_t major_faults = 0;
  uint64_t process_faults = 0;  // minor + major of the whole process during the run
  // umap runtime counters (0 for the others)
  uint64_t umap_cache_used = 0, umap_cache_peak = 0, umap_cache_limit = 0;
  uint64_t umap_blocks_read = 0, umap_blocks_written = 0, umap_evictions = 0,
           umap_dirty_evictions = 0, umap_io_errors = 0, umap_sigbus = 0;
  // umap I/O channels: merged reads and writes, their bytes, read-ahead blocks
  uint64_t umap_io_reads = 0, umap_io_bytes = 0, umap_io_writes = 0, umap_io_write_bytes = 0,
           umap_prefetched = 0;
  uint64_t file_cached_bytes = 0;  // page cache of the file after the run (mincore)
  uint64_t peak_rss = 0;           // VmHWM of the run (reset before it)
  uint64_t cgroup_peak = 0;        // memory.max_usage_in_bytes of the run (cgroup mode)
  uint64_t read_checks = 0;        // read ops whose data was compared
  bool verified = false;           // reads matched and (write runs) the file checked out
  std::string error;               // what failed and where; empty when verified
};

// Fresh mapping/runtime, page cache dropped, workers started and released together, timed
// until every op (and, for writes, the final sync) is done. A failed check is reported in
// RunResult::error (verified=false); a failure to run at all is an error status.
absl::StatusOr<RunResult> RunOnce(const BenchFile& file, const Workload& w,
                                  const BackendConfig& bc, int repeat, uint32_t tag);

// One JSON object (no newline) with every field of r plus the run's context.
std::string ToJson(const RunResult& r, const Workload& w, const BackendConfig& bc,
                   const BenchFile& file, const std::string& label);

// "64 MiB", "4 KiB", "1.5 GiB".
std::string HumanBytes(uint64_t n);
// "12.3k", "1.05M", "950".
std::string HumanCount(double v);

}  // namespace umap_bench

#endif  // UMAP_BENCH_WORKLOAD_H_
