// consumer FILE JOURNAL_DIR: the C++ RAII layer (umap/umap.hpp) against an installed Umap.
// Writes a 256 KiB file, maps it writable, doubles every byte through the pointer, syncs,
// unmaps, and checks the file. Prints "ok <bytes>" and exits 0.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "umap/umap.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s FILE JOURNAL_DIR\n", argv[0]);
    return 2;
  }
  constexpr size_t kSize = 256 << 10;
  std::vector<unsigned char> bytes(kSize);
  for (size_t i = 0; i < kSize; ++i) bytes[i] = static_cast<unsigned char>(i % 101);
  const int fd = ::open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ::pwrite(fd, bytes.data(), kSize, 0) != static_cast<ssize_t>(kSize)) {
    std::perror("write the file");
    return 1;
  }
  absl::StatusOr<umap_config> config = Umap::Runtime::DefaultConfig();
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 1;
  }
  config->cache_bytes = 64 << 10;  // a quarter of the file
  config->journal_dir = argv[2];
  absl::StatusOr<Umap::Runtime> runtime = Umap::Runtime::Create(*config);
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s\n", runtime.status().ToString().c_str());
    return 1;
  }
  {
    absl::StatusOr<Umap::Mapping> m =
        Umap::Mapping::Open(runtime->get(), fd, kSize, PROT_READ | PROT_WRITE);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
      return 1;
    }
    unsigned char* p = m->as<unsigned char>();
    for (size_t i = 0; i < kSize; ++i) p[i] = static_cast<unsigned char>(p[i] * 2);
    if (absl::Status s = m->Sync(); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    if (absl::Status s = m->Unmap(); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::vector<unsigned char> got(kSize);
  if (::pread(fd, got.data(), kSize, 0) != static_cast<ssize_t>(kSize)) {
    std::perror("pread");
    return 1;
  }
  for (size_t i = 0; i < kSize; ++i) {
    if (got[i] != static_cast<unsigned char>(bytes[i] * 2)) {
      std::fprintf(stderr, "file byte %zu is %u, expected %u\n", i, got[i],
                   static_cast<unsigned char>(bytes[i] * 2));
      return 1;
    }
  }
  ::close(fd);
  std::printf("ok %zu\n", kSize);
  return 0;
}
