// A job as users run it: umap()'s default runtime (configured from the environment only, the
// cache sized by lazy sizing within the memory cgroup this process was put in) reads FILE:
// a scan of the whole file, then random 4 KiB reads over its first WS bytes for SECONDS.
// Every word read is checked (word k of the file holds k + 1). Every 250 ms it prints
//   t=<s> capacity=<bytes> virtual=<bytes> ceiling=<bytes> peak=<bytes> remisses=<n>
// and at the end "done reads=<n>". lazy_cgroup_test runs it in memory cgroups.
//
// usage: lazy_cgroup_worker FILE WS_BYTES SECONDS [noscan]
// Exit: 0 done; 1 a word was wrong; 2 usage or set-up.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "umap/umap.h"

namespace {

void Report(double t) {
  umap_stats s;
  if (umap_get_stats(umap_default_runtime(), &s) != 0) return;
  std::printf("t=%.2f capacity=%" PRIu64 " virtual=%" PRIu64 " ceiling=%" PRIu64
              " peak=%" PRIu64 " remisses=%" PRIu64 "\n",
              t, s.cache_capacity_bytes, s.cache_virtual_bytes, s.cache_ceiling_bytes,
              s.cache_bytes_peak, s.cache_remisses);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const int fd = ::open(argv[1], O_RDONLY);
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) return 2;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t ws = std::min<uint64_t>(std::strtoull(argv[2], nullptr, 10), size);
  const double seconds = std::atof(argv[3]);
  const bool scan = argc < 5 || std::strcmp(argv[4], "noscan") != 0;
  auto* words = static_cast<const uint64_t*>(umap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0));
  if (words == MAP_FAILED) {
    std::perror("umap");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double next_report = 0;
  uint64_t reads = 0;
  auto check = [&](uint64_t word) {
    ++reads;
    if (words[word] != word + 1) {
      std::fprintf(stderr, "word %" PRIu64 " is %" PRIu64 "\n", word, words[word]);
      std::exit(1);
    }
  };
  if (scan) {
    for (uint64_t w = 0; w < size / 8; w += 512) {
      check(w);
      if ((w & 0xffff) == 0 && elapsed() >= next_report) {
        Report(elapsed());
        next_report += 0.25;
      }
    }
  }
  std::mt19937_64 rng(static_cast<uint64_t>(::getpid()));
  const auto until = start + std::chrono::duration<double>(seconds + (scan ? elapsed() : 0));
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 256; ++i) check((rng() % (ws / 4096)) * 512 + rng() % 512);
    if (elapsed() >= next_report) {
      Report(elapsed());
      next_report += 0.25;
    }
  }
  Report(elapsed());
  std::printf("done reads=%" PRIu64 "\n", reads);
  return uunmap(const_cast<uint64_t*>(words), size) == 0 ? 0 : 2;
}
