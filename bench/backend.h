// A backend is one way for the benchmark's worker threads to reach the file's bytes: a umap
// mapping, an mmap mapping, pread/pwrite, ... Each family is one class in its own file
// (<family>_backend.cc) that registers itself with UMAP_BENCH_REGISTER_BACKEND; a backend
// name is the family, optionally followed by "+variant" (e.g. "mmap+random"), and the
// family's factory decides which variants exist.
//
// Life of one backend object (one run): Open (untimed: open the file, create the mapping
// or runtime), then Read/Write/Sync from the worker threads concurrently, each passing its
// own thread index in [0, threads); Collect after the timed region; Close (untimed; an
// error there is a write-back error and fails the run). Open, Collect and Close are called
// from one thread.
#ifndef UMAP_BENCH_BACKEND_H_
#define UMAP_BENCH_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/bench_file.h"
#include "bench/run_result.h"
#include "umap/umap_types.h"

namespace umap_bench {

// mmap advice; kDefault leaves the mapping as mmap() made it (no madvise call at all).
enum class Advice { kDefault, kNormal, kRandom, kSequential };
const char* AdviceName(Advice a);
absl::StatusOr<Advice> ParseAdvice(const std::string& s);

const char* PolicyName(umap_policy p);
const char* JournalModeName(umap_journal_mode m);
absl::StatusOr<umap_policy> ParsePolicy(const std::string& s);
absl::StatusOr<umap_journal_mode> ParseJournalMode(const std::string& s);

// Knobs from the command line; each family reads the ones that concern it.
struct BackendOptions {
  // umap (a umap_config from umap_config_init(), then these)
  size_t cache_bytes = size_t{64} << 20;
  size_t block_size = 4096;
  unsigned handler_threads = 2;
  unsigned writeback_threads = 1;
  // Write-back policy and journal; empty journal_dir: the runtime's automatic per-runtime
  // journal directory.
  umap_policy policy = UMAP_POLICY_ATOMIC;
  umap_journal_mode journal_mode = UMAP_JOURNAL_DATA;
  std::string journal_dir;
  // mmap named without a variant
  Advice advice = Advice::kDefault;
};

// What Open needs to know about the run.
struct OpenParams {
  bool writable = false;  // write and mixed runs
  unsigned threads = 1;   // worker threads; Read/Write/Sync get thread indices below this
  size_t op_size = 4096;  // bytes per op; every op's offset is a multiple of it
};

class BenchBackend {
 public:
  virtual ~BenchBackend() = default;

  // Makes the file reachable for the run's workers.
  virtual absl::Status Open(const BenchFile& file, const OpenParams& p) = 0;

  // The hot path. Read copies n bytes at file offset off into buf. Write stores the tag's
  // words (FillWords) for those n bytes; buf is the thread's own n-byte scratch buffer
  // (aligned to 4 KiB) which a backend may use. Sync makes every write so far durable
  // (msync/umsync/fdatasync of the whole file).
  virtual absl::Status Read(unsigned thread, uint64_t off, char* buf, size_t n) = 0;
  virtual absl::Status Write(unsigned thread, uint64_t off, char* buf, size_t n, uint32_t tag) = 0;
  virtual absl::Status Sync(unsigned thread) = 0;

  // The mapping's first byte (for the SIGBUS report), nullptr when nothing is mapped.
  virtual const char* mapped_base() const { return nullptr; }
  // Extra lines for a stall report (runtime counters), empty when there is nothing to add.
  virtual std::string StallReport() const { return {}; }
  // After the timed region: the backend's own counters into r (faults, cache figures).
  virtual void Collect(RunResult& r) const { (void)r; }
  // Unmaps/closes; an error is a write-back error.
  virtual absl::Status Close() = 0;
};

using BackendFactory = absl::StatusOr<std::unique_ptr<BenchBackend>> (*)(
    const std::string& variant, const BackendOptions& options);

// Adds a family; called once per family at static initialisation (the macro below).
bool RegisterBackendFamily(const char* family, const char* help, BackendFactory factory);

// A new backend object for `name` ("family" or "family+variant"); InvalidArgument names the
// known families when there is no such family or the family refuses the variant.
absl::StatusOr<std::unique_ptr<BenchBackend>> NewBackend(const std::string& name,
                                                         const BackendOptions& options);
// "umap" for "umap+lazy".
std::string BackendFamily(const std::string& name);
// One line per family: "name: help" (for --help and error messages), sorted by name.
std::vector<std::string> BackendHelp();

#define UMAP_BENCH_REGISTER_BACKEND(family, help, factory)             \
  [[maybe_unused]] static const bool umap_bench_registered_##factory = \
      ::umap_bench::RegisterBackendFamily(family, help, factory)

}  // namespace umap_bench

#endif  // UMAP_BENCH_BACKEND_H_
