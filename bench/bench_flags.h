// umap-bench's command line: the flags, and the matrix of runs they describe.
#ifndef UMAP_BENCH_BENCH_FLAGS_H_
#define UMAP_BENCH_BENCH_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "bench/workload.h"

namespace umap_bench {

struct Flags {
  std::string file = "/var/tmp/umap-bench.dat";
  uint64_t file_size = 256ull << 20;
  bool remove_file = false;
  std::string backends = "umap,mmap,pread";
  std::string patterns = "random";
  std::string accesses = "read";
  std::string localities = "0";
  uint64_t op_size = 4096;
  uint64_t stride = 16;
  double write_fraction = 0.5;
  double working_set = 0.25;
  std::string threads = "1,2,4";
  uint64_t ops = 10000;
  uint64_t sync_every = 0;
  int repeats = 3;
  std::string cache = "auto";
  uint64_t block_size = 4096;
  unsigned handlers = 2;
  unsigned writeback_threads = 1;
  std::string policy = "atomic";
  std::string journal_mode = "data";
  std::string journal_dir;
  std::string madvise = "default";
  bool drop_caches = false;
  std::string check_reads = "ends";
  uint64_t seed = 1;
  double stall_seconds = 120;
  double max_seconds = 0;
  std::string json, markdown, plot_dir, label = "local";
  uint64_t memory_limit = 0;
  std::string cgroup_parent;
  unsigned processes = 1;
  unsigned procs = 1;
  uint64_t test_corrupt_word = ~0ull;
};

void AddFlags(CLI::App& app, Flags& f);

// What to run: every workload at every thread count, `repeats` times, through every backend.
struct Matrix {
  std::vector<std::string> backends;
  std::vector<Workload> workloads;  // threads set per run
  std::vector<unsigned> threads;
  RunConfig config;       // backend name set per run
  std::string cache_how;  // how umap's cache was chosen (for the tables' context line)
};

// Checks every flag; InvalidArgument names the flag.
absl::StatusOr<Matrix> BuildMatrix(const Flags& f);

// "random reads of 4 KiB, 1000 ops per thread, locality L=0" (a table's title).
std::string Title(const Workload& w);

}  // namespace umap_bench

#endif  // UMAP_BENCH_BENCH_FLAGS_H_
