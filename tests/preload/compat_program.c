/* The source-compatible mode (umap/umap_compat.h): an ordinary mmap program, rebuilt with
 * the header, must map its file with Umap (the runtime counts the faults), keep anonymous
 * mappings with the kernel, and leave the right bytes in the file. Exit 0 when all holds. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "umap/umap_compat.h"

static int Fail(const char* what) {
  fprintf(stderr, "compat_program: %s (%s)\n", what, strerror(errno));
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const size_t size = 1 << 20;
  int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) return Fail("open");
  unsigned char* m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return Fail("mmap of the file");
  if (!umap_compat_is_umap(m)) return Fail("the file mapping is not a Umap mapping");
  unsigned char* anon =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (anon == MAP_FAILED || umap_compat_is_umap(anon)) return Fail("anonymous mapping");
  for (size_t i = 0; i < size; ++i) m[i] = (unsigned char)(i * 7 + 3);
  if (msync(m, size, MS_SYNC) != 0) return Fail("msync");
  umap_stats st;
  if (umap_get_stats(umap_default_runtime(), &st) != 0) return Fail("umap_get_stats");
  /* The umsync wrote every block through Umap (read-ahead may have spared some faults). */
  if (st.faults_missing == 0 || st.blocks_written < size / 4096) {
    return Fail("the runtime did not serve the mapping");
  }
  if (munmap(m, size) != 0 || munmap(anon, 4096) != 0) return Fail("munmap");
  unsigned char buf[4096];
  for (off_t off = 0; off < (off_t)size; off += sizeof(buf)) {
    if (pread(fd, buf, sizeof(buf), off) != (ssize_t)sizeof(buf)) return Fail("pread");
    for (size_t i = 0; i < sizeof(buf); ++i) {
      if (buf[i] != (unsigned char)((off + i) * 7 + 3)) return Fail("file bytes differ");
    }
  }
  close(fd);
  return 0;
}
