// A memory cgroup made for benchmark runs: a limit on the memory of the processes in it,
// their page cache included, and the peak they reached. cgroup v1 (the memory controller at
// /sys/fs/cgroup/memory) and v2 (a unified hierarchy whose cgroup.controllers lists
// memory) are both supported; creating one needs root or a delegated parent directory.
//
// | figure      | v1                                  | v2                               |
// |-------------|-------------------------------------|----------------------------------|
// | limit       | memory.limit_in_bytes               | memory.max (memory.swap.max 0)   |
// | peak        | memory.max_usage_in_bytes (reset: 0)| memory.peak (reset per open file, kernel
// >= 6.12; else since creation) | | limit hits  | memory.failcnt                      |
// memory.events "max"              | | OOM kills   | memory.oom_control "oom_kill"       |
// memory.events "oom_kill"         |
//
// Not thread-safe. A process joins by writing its pid (Join() from the child itself).
#ifndef UMAP_BENCH_MEMORY_CGROUP_H_
#define UMAP_BENCH_MEMORY_CGROUP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/posix_io.h"

namespace umap_bench {

class MemoryCgroup {
 public:
  enum class Version { kV1, kV2 };

  // Where cgroups are made by default: v2's /sys/fs/cgroup when it has the memory
  // controller, else v1's /sys/fs/cgroup/memory. FailedPrecondition names what is missing.
  static absl::StatusOr<std::string> DefaultParent();

  // Creates parent/name with the limit. The destructor removes it (it must be empty then).
  static absl::StatusOr<MemoryCgroup> Create(const std::string& parent, const std::string& name,
                                             uint64_t limit_bytes);
  // An existing cgroup directory (a child process measuring the cgroup it was put in); the
  // destructor leaves it.
  static absl::StatusOr<MemoryCgroup> Attach(const std::string& dir);

  MemoryCgroup(MemoryCgroup&& o) noexcept;
  MemoryCgroup& operator=(MemoryCgroup&&) = delete;
  MemoryCgroup(const MemoryCgroup&) = delete;
  ~MemoryCgroup();

  const std::string& dir() const { return dir_; }
  Version version() const { return version_; }

  // Moves the calling process into the cgroup.
  absl::Status Join() const;
  // Starts a new peak window: from now on Peak() reports the highest usage since this call
  // (v2 before Linux 6.12: since the cgroup was made, the reset is not available).
  absl::Status ResetPeak();
  // Highest usage (bytes, processes plus their page cache) since ResetPeak or creation.
  absl::StatusOr<uint64_t> Peak() const;
  // How often usage hit the limit, and how many processes the OOM killer killed in it.
  absl::StatusOr<uint64_t> LimitHits() const;
  absl::StatusOr<uint64_t> OomKills() const;
  // Removes the (empty) cgroup now; the destructor then does nothing.
  absl::Status Remove();

 private:
  MemoryCgroup(std::string dir, Version v, bool owned)
      : dir_(std::move(dir)), version_(v), owned_(owned) {}
  std::string File(const char* v1_name, const char* v2_name) const;
  // The number after `key` in a "key value" per line file (memory.events, oom_control).
  absl::StatusOr<uint64_t> KeyedValue(const std::string& file, const std::string& key) const;

  std::string dir_;
  Version version_;
  bool owned_;
  Fd peak_fd_;  // v2 with per-file peak reset: the open memory.peak the window belongs to
};

}  // namespace umap_bench

#endif  // UMAP_BENCH_MEMORY_CGROUP_H_
