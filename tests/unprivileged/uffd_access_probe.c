/* Maps a file with the release library, writes, umsyncs, reads it back, then tries a read(2)
 * into a non-resident part of the mapping, and prints what it found:
 *   access=<userfaultfd|/dev/userfaultfd|user-mode-only> fault_mode=<signal|handler>
 *   kernel_read=<ok|EFAULT>
 * Exit 0 when the mapping's bytes are right (whatever the access), 1 otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "umap/umap.h"

static const char* Access(int a) {
  switch (a) {
    case UMAP_UFFD_SYSCALL: return "userfaultfd";
    case UMAP_UFFD_DEVICE: return "/dev/userfaultfd";
    case UMAP_UFFD_USER_MODE_ONLY: return "user-mode-only";
  }
  return "?";
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  const size_t size = 64 << 12;
  int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
    perror("file");
    return 1;
  }
  umap_config c;
  if (umap_config_init(&c) != 0) return 1;
  c.cache_bytes = 32 << 12;
  umap_runtime* rt = umap_runtime_create(&c);
  if (rt == NULL) {
    perror("umap_runtime_create");
    return 1;
  }
  char* p = umap_ex(rt, NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    perror("umap_ex");
    return 1;
  }
  memset(p, 'u', 4096);
  if (umsync(p, size, MS_SYNC) != 0) {
    perror("umsync");
    return 1;
  }
  char check[4096];
  if (pread(fd, check, sizeof check, 0) != (ssize_t)sizeof check || check[0] != 'u' ||
      check[4095] != 'u') {
    fprintf(stderr, "umsync'ed bytes not in the file\n");
    return 1;
  }
  /* The kernel writes into a page of the mapping nobody touched yet. */
  int src = open(argv[1], O_RDONLY);
  ssize_t n = read(src, p + 40 * 4096, 4096);
  const char* kernel = n == 4096 ? "ok" : (errno == EFAULT ? "EFAULT" : strerror(errno));
  close(src);
  umap_stats st;
  if (umap_get_stats(rt, &st) != 0) return 1;
  printf("access=%s fault_mode=%s kernel_read=%s\n", Access(st.uffd_access),
         st.fault_mode == UMAP_FAULT_SIGNAL ? "signal" : "handler", kernel);
  if (n == 4096 && p[40 * 4096] != 'u') {
    fprintf(stderr, "read(2) into the mapping returned wrong bytes\n");
    return 1;
  }
  if (uunmap(p, size) != 0 || umap_runtime_destroy(rt) != 0) return 1;
  close(fd);
  return 0;
}
