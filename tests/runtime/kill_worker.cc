// A process that writes rounds through umap and umsyncs each, recording in an oracle file
// (outside the journal and the data file) "B r" before umsync of round r and "A r" after it
// returned 0. The kill test SIGKILLs it at random moments. Rounds start at 1.
//
// usage: umap_kill_worker FILE JOURNAL_DIR ORACLE atomic|relaxed SEED BLOCKS WRITES CACHE
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/runtime/kill_workload.h"
#include "umap/umap.h"

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: %s FILE JOURNAL ORACLE atomic|relaxed SEED BLOCKS WRITES CACHE\n", argv[0]);
    return 2;
  }
  killtest::Workload w{std::strtoull(argv[5], nullptr, 10), std::strtoull(argv[6], nullptr, 10),
                       4096, std::strtoull(argv[7], nullptr, 10)};
  int fd = ::open(argv[1], O_RDWR);
  int oracle = ::open(argv[3], O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (fd < 0 || oracle < 0) {
    std::perror("open");
    return 2;
  }
  umap_config c;
  umap_config_init(&c);
  c.cache_bytes = std::strtoull(argv[8], nullptr, 10);
  c.block_size = w.block_size;
  c.journal_dir = argv[2];
  c.policy = std::strcmp(argv[4], "relaxed") == 0 ? UMAP_POLICY_RELAXED : UMAP_POLICY_ATOMIC;
  umap_runtime* rt = umap_runtime_create(&c);
  if (rt == nullptr) {
    std::perror("umap_runtime_create");
    return 2;
  }
  const size_t size = w.blocks * w.block_size;
  char* p = static_cast<char*>(umap_ex(rt, nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (p == MAP_FAILED) {
    std::perror("umap");
    return 2;
  }
  for (uint64_t r = 1;; ++r) {
    for (uint64_t b : w.RoundBlocks(r)) w.Fill(r, b, p + b * w.block_size);
    std::string line = "B " + std::to_string(r) + "\n";
    if (::write(oracle, line.data(), line.size()) < 0) return 2;
    if (umsync(p, size, MS_SYNC) != 0) {
      std::fprintf(stderr, "umsync round %llu: %s\n", static_cast<unsigned long long>(r), std::strerror(errno));
      return 3;
    }
    line = "A " + std::to_string(r) + "\n";
    if (::write(oracle, line.data(), line.size()) < 0) return 2;
  }
}
