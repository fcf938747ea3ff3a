/* criu_writer: the job of the CRIU tests (tests/criu/criu_test.sh), a plain C program on
 * Umap's C API (or on plain mmap/msync, to run under libumap_preload.so).
 *
 *   criu_writer init FILE BLOCKS           writes round 0 into FILE (BLOCKS blocks of 4 KiB)
 *   criu_writer run FILE PROGRESS BLOCKS [--plain] [--delay-ms N]
 *       maps FILE and, for round r = 1, 2, ...: writes every byte of round r, umsyncs (msync
 *       with --plain), then records r in PROGRESS (20 digits and a newline at offset 0).
 *       A second thread reads the mapping all the time, so that a checkpoint always finds a
 *       thread waiting on a quiesced mapping.
 *       So PROGRESS names the last round known committed; the round after it may be
 *       committed too (killed before recording it).
 *   criu_writer time FILE BLOCKS
 *       dirties every block of FILE through Umap and times a umsync of them; dirties them
 *       again and times umap_quiesce(), umap_resume() and reading every block back (the
 *       policy, cache size etc. come from UMAP_* variables).
 *   criu_writer check FILE BLOCKS LO HI [--per-byte]
 *       exit 0 when FILE holds exactly round r for some LO <= r <= HI (it prints r), or with
 *       --per-byte when each byte is that of some round in [LO, HI] (the relaxed policy,
 *       whose unsynced blocks may reach the file); else exit 1 and print the first
 *       mismatch.
 *
 * Rounds differ in every byte: byte i of block b in round r is (r*131 + b*7 + i*3) mod 256,
 * and 131 and 2*131 are not multiples of 256.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "umap/umap.h"

#define BLOCK 4096

static unsigned char Byte(uint64_t r, uint64_t b, uint64_t i) {
  return (unsigned char)(r * 131 + b * 7 + i * 3);
}

static int Usage(void) {
  fprintf(stderr,
          "usage: criu_writer init FILE BLOCKS | run FILE PROGRESS BLOCKS [--plain] "
          "[--delay-ms N] | time FILE BLOCKS | check FILE BLOCKS LO HI [--per-byte]\n");
  return 2;
}

static int Init(const char* path, size_t blocks) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    perror(path);
    return 1;
  }
  unsigned char buf[BLOCK];
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t i = 0; i < BLOCK; ++i) buf[i] = Byte(0, b, i);
    if (pwrite(fd, buf, BLOCK, (off_t)(b * BLOCK)) != BLOCK) {
      perror("pwrite");
      return 1;
    }
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    perror("fsync");
    return 1;
  }
  return 0;
}

struct Reader {
  const volatile unsigned char* p;
  size_t len;
};

static void* ReadForEver(void* arg) {
  const struct Reader* r = arg;
  unsigned sum = 0;
  for (size_t k = 0;; k = (k + 1237 * 8) % r->len) sum += r->p[k];
  return (void*)(uintptr_t)sum;
}

static int Run(const char* path, const char* progress, size_t blocks, int plain, long delay_ms) {
  const size_t len = blocks * BLOCK;
  int fd = open(path, O_RDWR);
  int pf = open(progress, O_WRONLY | O_CREAT, 0644);
  if (fd < 0 || pf < 0) {
    perror("open");
    return 1;
  }
  unsigned char* p = plain ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                           : umap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    perror(plain ? "mmap" : "umap");
    return 1;
  }
  static struct Reader reader;
  reader.p = p;
  reader.len = len;
  pthread_t t;
  if (pthread_create(&t, NULL, ReadForEver, &reader) != 0) {
    fprintf(stderr, "criu_writer: pthread_create failed\n");
    return 1;
  }
  struct timespec delay = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
  for (uint64_t r = 1;; ++r) {
    for (size_t b = 0; b < blocks; ++b) {
      for (size_t i = 0; i < BLOCK; ++i) p[b * BLOCK + i] = Byte(r, b, i);
    }
    if ((plain ? msync(p, len, MS_SYNC) : umsync(p, len, MS_SYNC)) != 0) {
      fprintf(stderr, "criu_writer: round %llu: %s failed: %s\n", (unsigned long long)r,
              plain ? "msync" : "umsync", strerror(errno));
      return 1;
    }
    char line[32];
    snprintf(line, sizeof(line), "%020llu\n", (unsigned long long)r);
    if (pwrite(pf, line, 21, 0) != 21) {
      perror("progress");
      return 1;
    }
    nanosleep(&delay, NULL);
  }
}

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int Time(const char* path, size_t blocks) {
  const size_t len = blocks * BLOCK;
  int fd = open(path, O_RDWR);
  unsigned char* p =
      fd < 0 ? MAP_FAILED : umap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    perror("umap");
    return 1;
  }
  for (size_t k = 0; k < len; k += BLOCK) p[k] = (unsigned char)(k / BLOCK);
  const double s0 = Now();
  if (umsync(p, len, MS_SYNC) != 0) {
    perror("umsync");
    return 1;
  }
  const double s1 = Now();
  for (size_t k = 0; k < len; k += BLOCK) p[k] = (unsigned char)(k / BLOCK + 1);
  const double t0 = Now();
  if (umap_quiesce() != 0) {
    perror("umap_quiesce");
    return 1;
  }
  const double t1 = Now();
  if (umap_resume() != 0) {
    perror("umap_resume");
    return 1;
  }
  const double t2 = Now();
  for (size_t k = 0; k < len; k += BLOCK) {
    if (p[k] != (unsigned char)(k / BLOCK + 1)) {
      fprintf(stderr, "criu_writer: block %zu lost its write\n", k / BLOCK);
      return 1;
    }
  }
  const double t3 = Now();
  printf(
      "%zu MiB dirty: umsync %.0f ms; quiesce %.0f ms, resume %.0f ms, reading it back "
      "%.0f ms\n",
      len >> 20, (s1 - s0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3);
  return uunmap(p, len) == 0 ? 0 : 1;
}

static int Check(const char* path, size_t blocks, uint64_t lo, uint64_t hi, int per_byte) {
  const size_t len = blocks * BLOCK;
  unsigned char* data = malloc(len);
  int fd = open(path, O_RDONLY);
  if (data == NULL || fd < 0 || pread(fd, data, len, 0) != (ssize_t)len) {
    fprintf(stderr, "criu_writer: cannot read %zu bytes of %s\n", len, path);
    return 1;
  }
  if (!per_byte) {
    for (uint64_t r = lo; r <= hi; ++r) {
      size_t k = 0;
      while (k < len && data[k] == Byte(r, k / BLOCK, k % BLOCK)) ++k;
      if (k == len) {
        printf("round %llu\n", (unsigned long long)r);
        return 0;
      }
    }
    fprintf(stderr,
            "criu_writer: %s is none of rounds %llu..%llu: byte 0 is %u (round %llu "
            "would be %u), block 0 starts round ",
            path, (unsigned long long)lo, (unsigned long long)hi, data[0], (unsigned long long)lo,
            Byte(lo, 0, 0));
    for (uint64_t r = 0; r <= hi + 2; ++r) {
      if (data[0] == Byte(r, 0, 0) && data[1] == Byte(r, 0, 1))
        fprintf(stderr, "%llu ", (unsigned long long)r);
    }
    fprintf(stderr, "\n");
    return 1;
  }
  for (size_t k = 0; k < len; ++k) {
    int ok = 0;
    for (uint64_t r = lo; r <= hi && !ok; ++r) ok = data[k] == Byte(r, k / BLOCK, k % BLOCK);
    if (!ok) {
      fprintf(stderr, "criu_writer: %s byte %zu (block %zu) is %u, of no round in %llu..%llu\n",
              path, k, k / BLOCK, data[k], (unsigned long long)lo, (unsigned long long)hi);
      return 1;
    }
  }
  printf("every byte of rounds %llu..%llu\n", (unsigned long long)lo, (unsigned long long)hi);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  if (strcmp(argv[1], "init") == 0 && argc == 4) return Init(argv[2], strtoul(argv[3], 0, 10));
  if (strcmp(argv[1], "run") == 0 && argc >= 5) {
    int plain = 0;
    long delay_ms = 20;
    for (int i = 5; i < argc; ++i) {
      if (strcmp(argv[i], "--plain") == 0) {
        plain = 1;
      } else if (strcmp(argv[i], "--delay-ms") == 0 && i + 1 < argc) {
        delay_ms = strtol(argv[++i], 0, 10);
      } else {
        return Usage();
      }
    }
    return Run(argv[2], argv[3], strtoul(argv[4], 0, 10), plain, delay_ms);
  }
  if (strcmp(argv[1], "time") == 0 && argc == 4) return Time(argv[2], strtoul(argv[3], 0, 10));
  if (strcmp(argv[1], "check") == 0 && (argc == 6 || argc == 7)) {
    const int per_byte = argc == 7 && strcmp(argv[6], "--per-byte") == 0;
    if (argc == 7 && !per_byte) return Usage();
    return Check(argv[2], strtoul(argv[3], 0, 10), strtoull(argv[4], 0, 10),
                 strtoull(argv[5], 0, 10), per_byte);
  }
  return Usage();
}
