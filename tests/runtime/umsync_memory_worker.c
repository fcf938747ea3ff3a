// One writer of the umsync memory test (umsync_memory_cgroup_test.cc): maps FILE (BYTES
// long) with the default runtime, and ROUNDS times stores round r + 1 into the first byte
// of DIRTY/4096 pseudo-random 4 KiB blocks, then umsyncs the whole mapping. After each
// umsync it checks with pread that the file holds every store. Prints "done hwm=KiB".
// Exit: 0 done, 2 usage, 3 a call failed, 4 the file lacks a store after umsync.
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <umap/umap.h>
#include <unistd.h>

static long PeakRssKib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  long v = -1;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "VmHWM:", 6) == 0) v = atol(line + 6);
  }
  fclose(f);
  return v;
}

// Block i of round r's stores (a fixed sequence per seed).
static uint64_t Next(uint64_t* s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 17;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s FILE BYTES DIRTY ROUNDS\n", argv[0]);
    return 2;
  }
  const size_t len = strtoull(argv[2], NULL, 10), dirty = strtoull(argv[3], NULL, 10);
  const int rounds = atoi(argv[4]);
  const size_t blocks = len / 4096;
  const int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
    perror(argv[1]);
    return 3;
  }
  char* p = umap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    perror("umap");
    return 3;
  }
  for (int r = 0; r < rounds; ++r) {
    uint64_t s = (uint64_t)r * 7919u + 1;
    for (size_t i = 0; i < dirty / 4096; ++i) p[(Next(&s) % blocks) * 4096] = (char)(r + 1);
    if (umsync(p, len, MS_SYNC) != 0) {
      perror("umsync");
      return 3;
    }
    s = (uint64_t)r * 7919u + 1;
    for (size_t i = 0; i < dirty / 4096; ++i) {
      const uint64_t b = Next(&s) % blocks;
      char c = 0;
      if (pread(fd, &c, 1, (off_t)(b * 4096)) != 1) {
        perror("pread");
        return 3;
      }
      if (c != (char)(r + 1)) {
        fprintf(stderr, "round %d: block %llu holds %d after umsync\n", r,
                (unsigned long long)b, c);
        return 4;
      }
    }
    fprintf(stderr, "round %d umsynced, peak RSS %ld KiB\n", r, PeakRssKib());
  }
  if (uunmap(p, len) != 0) {
    perror("uunmap");
    return 3;
  }
  printf("done hwm=%ld\n", PeakRssKib());
  return 0;
}
