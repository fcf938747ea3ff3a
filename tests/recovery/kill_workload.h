// The deterministic workload of recovery_kill_worker and the state the kill tests expect.
// Round r (1, 2, ...) writes Image(r, b) into three blocks that are never adjacent, so the
// runtime applies each transaction with three separate writes (three apply.mid_write hits).
#ifndef UMAP_TESTS_RECOVERY_KILL_WORKLOAD_H_
#define UMAP_TESTS_RECOVERY_KILL_WORKLOAD_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/recovery/recovery_test_util.h"

namespace recoverytest {

constexpr uint64_t kKillBlocks = 16;
constexpr uint64_t kKillBlockSize = 4096;

inline std::vector<uint64_t> RoundBlocks(uint64_t r) {
  std::vector<uint64_t> b = {(3 * r) % 16, (3 * r + 5) % 16, (3 * r + 10) % 16};
  std::sort(b.begin(), b.end());
  return b;
}

// The file after rounds 1..k were committed (and replayed), starting from version 0.
inline FileState StateAfter(uint64_t k) {
  FileState s;
  for (uint64_t r = 1; r <= k; ++r) {
    for (uint64_t b : RoundBlocks(r)) s[b] = r;
  }
  return s;
}

// Implemented in kill_worker_backlog.cc (a TU that may see namespace umap).
int RunBacklog(const std::string& file, const std::string& journal, uint64_t rounds,
               bool intent);

}  // namespace recoverytest

#endif  // UMAP_TESTS_RECOVERY_KILL_WORKLOAD_H_
