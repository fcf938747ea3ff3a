/* map_write_sync FILE JOURNAL_DIR|-: the smallest complete use of the C API, in C99 with
 * nothing but libc and <umap/umap.h>. Creates FILE (64 blocks of 4 KiB, each byte
 * (block + offset) % 251), maps it writable through a runtime journaling to JOURNAL_DIR,
 * writes a new pattern into every block through the pointer, umsyncs, reads the pattern back
 * through the mapping, unmaps, and checks the file's bytes with pread.
 * Prints "ok <bytes>" and exits 0; any failure prints what failed and exits non-zero.
 *
 * Built against the installed files by tests/install/install_test.sh (pkg-config), and in the
 * tree against the release and the testing libraries by release_ignores_switches.sh. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <umap/umap.h>

enum { kBlocks = 64, kBlockSize = 4096 };

static unsigned char OldByte(size_t i) { return (unsigned char)((i / kBlockSize + i) % 251); }
static unsigned char NewByte(size_t i) { return (unsigned char)((i * 7 + 3) % 253); }

static int Fail(const char* what) {
  fprintf(stderr, "map_write_sync: %s: %s\n", what, strerror(errno));
  return 1;
}

int main(int argc, char** argv) {
  const size_t size = (size_t)kBlocks * kBlockSize;
  unsigned char* buf;
  umap_config config;
  umap_runtime* runtime;
  unsigned char* p;
  size_t i;
  int fd;

  if (argc != 3) {
    fprintf(stderr, "usage: %s FILE JOURNAL_DIR|-\n", argv[0]);
    return 2;
  }
  buf = malloc(size);
  if (buf == NULL) return Fail("malloc");
  for (i = 0; i < size; i++) buf[i] = OldByte(i);
  fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Fail("open");
  if (pwrite(fd, buf, size, 0) != (ssize_t)size || fsync(fd) != 0) return Fail("pwrite");

  if (umap_config_init(&config) != 0) return Fail("umap_config_init");
  config.cache_bytes = 16 * kBlockSize; /* a quarter of the file: evictions happen */
  config.block_size = kBlockSize;
  config.journal_dir = strcmp(argv[2], "-") == 0 ? NULL : argv[2]; /* -: automatic */
  runtime = umap_runtime_create(&config);
  if (runtime == NULL) return Fail("umap_runtime_create");
  p = umap_ex(runtime, NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Fail("umap_ex");

  for (i = 0; i < size; i++) {
    if (p[i] != OldByte(i)) {
      fprintf(stderr, "map_write_sync: byte %zu reads %u through the mapping, file has %u\n", i,
              p[i], OldByte(i));
      return 1;
    }
  }
  for (i = 0; i < size; i++) p[i] = NewByte(i);
  if (umsync(p, size, MS_SYNC) != 0) return Fail("umsync");
  for (i = 0; i < size; i++) {
    if (p[i] != NewByte(i)) {
      fprintf(stderr, "map_write_sync: byte %zu reads %u after umsync, wrote %u\n", i, p[i],
              NewByte(i));
      return 1;
    }
  }
  if (uunmap(p, size) != 0) return Fail("uunmap");
  if (umap_runtime_destroy(runtime) != 0) return Fail("umap_runtime_destroy");

  memset(buf, 0, size);
  if (pread(fd, buf, size, 0) != (ssize_t)size) return Fail("pread");
  for (i = 0; i < size; i++) {
    if (buf[i] != NewByte(i)) {
      fprintf(stderr, "map_write_sync: file byte %zu is %u after umsync, wrote %u\n", i, buf[i],
              NewByte(i));
      return 1;
    }
  }
  close(fd);
  free(buf);
  printf("ok %zu\n", size);
  return 0;
}
