// umap-misscost: what one miss costs, for the per-miss breakdown (docs/performance.md "Cost
// of a miss"). Every timed op reads one 4 KiB block that no op of the run has read before (a
// shuffled permutation of the file's even-numbered blocks, dealt out to the threads: no two
// are adjacent, so read-ahead never starts), so with the file's page cache dropped every op
// is exactly one miss, for every backend. Warm-up ops first fill umap's cache (and, when the
// caller runs this in a memory cgroup, the cgroup up to its limit), so that every timed miss
// also evicts, as in the steady state of a long job.
//
// Prints, per miss of the timed region: wall time, user and system CPU time and voluntary and
// involuntary context switches of the whole process (getrusage: every thread, the runtime's
// included), minor and major faults, and for umap the runtime's own counters.
//
// Under valgrind --tool=callgrind --instr-atstart=no the timed region is marked with client
// requests (no-ops otherwise) that switch instrumentation on and off for the whole process,
// so that the profile's total is the user-space instructions of the timed region, all
// threads together.
// bench/miss-cost.sh runs it that way, under strace -c and under perf stat.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/backend.h"
#include "bench/bench_file.h"
#include "bench/human.h"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

namespace umap_bench {
namespace {

constexpr size_t kBlock = 4096;

struct Flags {
  std::string file = "/var/tmp/umap-misscost.dat";
  uint64_t file_size = uint64_t{256} << 20;
  std::string backend = "umap";
  std::string cache = "16M";
  unsigned handlers = 2;
  unsigned threads = 1;
  uint64_t ops = 4096;
  int64_t warmup = -1;  // per thread; -1: the cache's blocks (divided among the threads) + 1/8
  bool drop_caches = false;
  uint64_t seed = 1;
  // "user": loads from the mapping (an application's access); "kernel": the kernel copies
  // each block out of the mapping (write(2) to a pipe, then read back), so the miss is a
  // fault taken inside a system call. Handler mode serves those; under valgrind it is the
  // only way to measure handler mode (a thread blocked in a user-mode fault holds
  // valgrind's lock, so the handler threads could never run).
  std::string access = "user";
};

struct Usage {
  double wall_s;  // CLOCK_MONOTONIC (perf record -k monotonic stamps its samples alike)
  double user_s, sys_s;
  long nvcsw, nivcsw, minflt, majflt;
};

Usage Now() {
  struct rusage ru = {};
  ::getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return {
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
      secs(ru.ru_utime),
      secs(ru.ru_stime),
      ru.ru_nvcsw,
      ru.ru_nivcsw,
      ru.ru_minflt,
      ru.ru_majflt};
}

// A system call strace shows with this path (it fails with ENOENT): bench/miss-cost.sh
// counts the system calls between the start and the end marks.
void TimedRegionMark(const char* path) { (void)::faccessat(AT_FDCWD, path, F_OK, 0); }

// The kernel's copy of one block out of the mapping, through a pipe (see Flags::access).
absl::Status KernelRead(const char* src, char* buf, const int* pipe) {
  if (::write(pipe[1], src, kBlock) != static_cast<ssize_t>(kBlock)) {
    return absl::InternalError(absl::StrCat("write(2) from the mapping: ", std::strerror(errno)));
  }
  if (::read(pipe[0], buf, kBlock) != static_cast<ssize_t>(kBlock)) {
    return absl::InternalError(absl::StrCat("read(2) from the pipe: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Reads the blocks of `order` through the backend (or, with a pipe, by the kernel's copy
// out of the mapping), checking the first word of each.
absl::Status ReadBlocks(BenchBackend& b, unsigned t, const uint64_t* order, uint64_t n, char* buf,
                        const int* pipe) {
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t off = order[i] * kBlock;
    absl::Status s = pipe != nullptr ? KernelRead(b.mapped_base() + off, buf, pipe)
                                     : b.Read(t, off, buf, kBlock);
    if (!s.ok()) return s;
    if (*reinterpret_cast<const uint64_t*>(buf) != OriginalWord(off / 8)) [[unlikely]] {
      return absl::DataLossError(absl::StrFormat("thread %u: wrong data at offset %u", t, off));
    }
  }
  return absl::OkStatus();
}

// The blocks the threads read, thread t from order[t * per_thread]: warm-up first, then the
// timed ops. False (said) when the file is too small for them.
bool PlanReads(const Flags& f, uint64_t warmup, uint64_t per_thread, std::vector<uint64_t>* order) {
  // Only even-numbered blocks are read: no block read is next to another, so no access
  // looks like the start of a sequential stream and read-ahead never runs.
  const uint64_t blocks = f.file_size / kBlock / 2;
  if (per_thread * f.threads > blocks) {
    std::fprintf(stderr,
                 "umap-misscost: %u threads x (%lu warm-up + %lu ops) blocks > the file's %lu "
                 "even-numbered blocks: give a larger --file-size\n",
                 f.threads, warmup, f.ops, blocks);
    return false;
  }
  order->resize(blocks);
  for (uint64_t i = 0; i < blocks; ++i) (*order)[i] = 2 * i;
  std::shuffle(order->begin(), order->end(), std::mt19937_64(f.seed));
  return true;
}

// The run's line and its per-miss figures, from the usage and counters at the barriers.
void PrintFigures(const Flags& f, uint64_t warmup, uint64_t cache_bytes, const Usage& u0,
                  const Usage& u1, const RunResult& before, const RunResult& after) {
  const double n = static_cast<double>(f.ops) * f.threads;
  const double wall = u1.wall_s - u0.wall_s;
  absl::PrintF(
      "umap-misscost backend=%s threads=%u ops=%.0f warmup=%lu cache=%s wall_s=%.3f "
      "ops_per_s=%.0f region_monotonic=%.6f,%.6f\n",
      f.backend, f.threads, n, warmup, HumanBytes(cache_bytes), wall, n / wall, u0.wall_s,
      u1.wall_s);
  absl::PrintF(
      "per_miss: wall_us %.2f user_us %.2f sys_us %.2f cpu_us %.2f vcsw %.3f ivcsw %.3f "
      "minflt %.3f majflt %.3f",
      wall * 1e6 / n * f.threads, (u1.user_s - u0.user_s) * 1e6 / n,
      (u1.sys_s - u0.sys_s) * 1e6 / n, (u1.user_s + u1.sys_s - u0.user_s - u0.sys_s) * 1e6 / n,
      (u1.nvcsw - u0.nvcsw) / n, (u1.nivcsw - u0.nivcsw) / n, (u1.minflt - u0.minflt) / n,
      (u1.majflt - u0.majflt) / n);
  if (after.umap_faults_missing > 0) {
    absl::PrintF(" umap_faults %.3f umap_blocks_read %.3f umap_evictions %.3f umap_io_reads %.3f",
                 (after.umap_faults_missing - before.umap_faults_missing) / n,
                 (after.umap_blocks_read - before.umap_blocks_read) / n,
                 (after.umap_evictions - before.umap_evictions) / n,
                 (after.umap_io_reads - before.umap_io_reads) / n);
  }
  std::printf("\n");
}

int Run(const Flags& f) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(f.file).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  absl::StatusOr<BenchFile> file = BenchFile::Open(f.file, f.file_size);
  if (!file.ok()) {
    std::fprintf(stderr, "umap-misscost: %s\n", file.status().ToString().c_str());
    return 1;
  }
  BackendOptions o;
  absl::StatusOr<uint64_t> cache = ParseBytes(f.cache);
  if (!cache.ok()) {
    std::fprintf(stderr, "umap-misscost: --cache: %s\n", cache.status().ToString().c_str());
    return 2;
  }
  o.cache_bytes = *cache;
  o.handler_threads = f.handlers;
  const uint64_t warmup = f.warmup >= 0 ? static_cast<uint64_t>(f.warmup)
                                        : (o.cache_bytes / kBlock * 9 / 8) / f.threads;
  const uint64_t per_thread = warmup + f.ops;
  std::vector<uint64_t> order;
  if (!PlanReads(f, warmup, per_thread, &order)) return 2;

  absl::StatusOr<std::unique_ptr<BenchBackend>> backend = NewBackend(f.backend, o);
  if (!backend.ok()) {
    std::fprintf(stderr, "umap-misscost: %s\n", backend.status().ToString().c_str());
    return 2;
  }
  absl::Status s = file->DropCache(f.drop_caches);
  if (s.ok()) s = (*backend)->Open(*file, OpenParams{.writable = false, .threads = f.threads});
  const bool kernel = f.access == "kernel";
  if (s.ok() && kernel && (*backend)->mapped_base() == nullptr) {
    s = absl::InvalidArgumentError("--access kernel needs a mapped backend (umap, mmap)");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "umap-misscost: %s\n", s.ToString().c_str());
    return 1;
  }

  // Phases: warm-up, [barrier], timed, [barrier], exit. The main thread takes the figures
  // at the two barriers' completions.
  RunResult before, after;
  Usage u0{}, u1{};
  int phase = 0;
  auto on_barrier = [&]() noexcept {
    if (phase++ == 0) {
      (*backend)->Collect(before);
      TimedRegionMark("/umap-misscost/timed-start");
      u0 = Now();
      CALLGRIND_START_INSTRUMENTATION;
    } else {
      CALLGRIND_STOP_INSTRUMENTATION;
      u1 = Now();
      TimedRegionMark("/umap-misscost/timed-end");
      (*backend)->Collect(after);
    }
  };
  std::barrier sync(f.threads, on_barrier);
  std::vector<absl::Status> errors(f.threads);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < f.threads; ++t) {
    workers.emplace_back([&, t] {
      alignas(4096) static thread_local char buf[kBlock];
      int pipe[2] = {-1, -1};
      if (kernel && ::pipe2(pipe, O_CLOEXEC) != 0) {
        errors[t] = absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
      }
      const int* p = kernel ? pipe : nullptr;
      const uint64_t* mine = order.data() + t * per_thread;
      if (errors[t].ok()) errors[t] = ReadBlocks(**backend, t, mine, warmup, buf, p);
      sync.arrive_and_wait();
      absl::Status timed =
          errors[t].ok() ? ReadBlocks(**backend, t, mine + warmup, f.ops, buf, p) : errors[t];
      if (errors[t].ok()) errors[t] = timed;
      sync.arrive_and_wait();
      if (kernel) {
        ::close(pipe[0]);
        ::close(pipe[1]);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  s = (*backend)->Close();
  for (const absl::Status& e : errors) {
    if (s.ok()) s = e;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "umap-misscost: %s\n", s.ToString().c_str());
    return 1;
  }
  PrintFigures(f, warmup, o.cache_bytes, u0, u1, before, after);
  return 0;
}

}  // namespace
}  // namespace umap_bench

int main(int argc, char** argv) {
  umap_bench::Flags f;
  CLI::App app{"umap-misscost: the cost of one miss (every op reads a block never read before)"};
  app.option_defaults()->always_capture_default();
  app.add_option("--file", f.file, "benchmark file; created and filled when missing");
  app.add_option("--file-size", f.file_size, "bytes of the file used")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--backend", f.backend,
                 "one umap-bench backend (umap, mmap+random, pread+direct, uring, ...); "
                 "UMAP_FAULT_MODE=handler for umap's handler mode");
  app.add_option("--cache", f.cache, "umap cache_bytes");
  app.add_option("--handlers", f.handlers, "umap handler threads (handler mode)");
  app.add_option("--threads", f.threads, "reader threads")->check(CLI::Range(1, 64));
  app.add_option("--ops", f.ops, "timed ops (misses) per thread")->check(CLI::PositiveNumber);
  app.add_option("--warmup", f.warmup,
                 "untimed ops per thread before (-1: 9/8 of the cache's blocks, shared out)");
  app.add_option("--access", f.access,
                 "user (loads from the mapping) or kernel (write(2) from the mapping to a pipe)")
      ->check(CLI::IsMember({"user", "kernel"}));
  app.add_flag("--drop-caches", f.drop_caches, "also write 3 to /proc/sys/vm/drop_caches");
  app.add_option("--seed", f.seed, "shuffle seed");
  CLI11_PARSE(app, argc, argv);
  return umap_bench::Run(f);
}
