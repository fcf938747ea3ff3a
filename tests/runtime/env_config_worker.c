/* env_config_worker FILE [ROUNDS [exit]]: the C API configured only by the environment
 * (UMAP_*): creates a runtime from umap_config_init, maps FILE writable, writes a byte (or,
 * with ROUNDS, every byte, ROUNDS times), umsyncs after each round, unmaps, and destroys the
 * runtime (with "exit": returns from main without destroying it, as a program that ends
 * after its last uunmap does). Prints "ok", or "failed STAGE errno N" and exits 1, so that a
 * test can check what a user sees (the log on stderr, at the default level) when a setting is
 * wrong, and what a clean exit leaves behind. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <umap/umap.h>
#include <unistd.h>

static int Failed(const char* stage) {
  printf("failed %s errno %d\n", stage, errno);
  return 1;
}

int main(int argc, char** argv) {
  umap_config config;
  umap_runtime* runtime;
  struct stat st;
  char* p;
  int fd;
  int rounds = 0, r;
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: %s FILE [ROUNDS [exit]]\n", argv[0]);
    return 2;
  }
  if (argc > 2) rounds = atoi(argv[2]);
  if (umap_config_init(&config) != 0) return Failed("umap_config_init");
  runtime = umap_runtime_create(&config);
  if (runtime == NULL) return Failed("umap_runtime_create");
  fd = open(argv[1], O_RDWR);
  if (fd < 0 || fstat(fd, &st) != 0) return Failed("open");
  p = umap_ex(runtime, NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Failed("umap_ex");
  p[0] = 'x';
  if (umsync(p, (size_t)st.st_size, MS_SYNC) != 0) return Failed("umsync");
  for (r = 0; r < rounds; r++) {
    memset(p, 'a' + r % 26, (size_t)st.st_size);
    if (umsync(p, (size_t)st.st_size, MS_SYNC) != 0) return Failed("umsync");
  }
  if (uunmap(p, (size_t)st.st_size) != 0) return Failed("uunmap");
  if (argc == 4 && strcmp(argv[3], "exit") == 0) {
    printf("ok\n");
    return 0;
  }
  if (umap_runtime_destroy(runtime) != 0) return Failed("umap_runtime_destroy");
  printf("ok\n");
  return 0;
}
