/* A small C program that uses plain mmap(), munmap(), msync(), read() and write() and knows
 * nothing about Umap: the preload tests run it with and without libumap_preload.so.
 *
 *   plain_mmap write  FILE SIZE SEED          create FILE, fill a mapping, msync, munmap
 *   plain_mmap verify FILE SIZE SEED [OFF]    map (from OFF) read-only and compare
 *   plain_mmap hold   FILE SIZE               map, touch every page, print "ready", wait for
 *                                             a line on stdin, unmap
 *   plain_mmap threads FILE SIZE SEED N       N threads, half started before the mmap and
 *                                             half after, each fills its slice; msync; check
 *   plain_mmap kernel-io FILE SIZE OTHER      read() OTHER into the mapping, write() the
 *                                             mapping to OTHER.out, pread/pwrite/readv/writev
 *                                             too; msync
 *   plain_mmap fork   FILE SIZE SEED          fill + msync; a fork child reads the mapping
 *                                             (must see the synced bytes), then writes one
 *                                             byte (must die with SIGSEGV)
 *   plain_mmap partial FILE SIZE              munmap of half a mapping must fail with EINVAL
 *                                             and leave the mapping whole
 * Exit 0 on success; 1 with a message naming what differed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned char Pattern(uint64_t i, unsigned seed) {
  return (unsigned char)(((i * 2654435761u) >> 13) ^ (i >> 12) ^ seed);
}

static int Die(const char* what) {
  fprintf(stderr, "plain_mmap: %s: %s\n", what, strerror(errno));
  return 1;
}

static unsigned char* MapFile(const char* path, size_t size, int prot, off_t off, int create) {
  int fd = open(path, (prot & PROT_WRITE ? O_RDWR : O_RDONLY) | (create ? O_CREAT : 0), 0644);
  if (fd < 0) return NULL;
  if (create && ftruncate(fd, (off_t)size) != 0) return NULL;
  void* p = mmap(NULL, size - (size_t)off, prot, MAP_SHARED, fd, off);
  close(fd); /* a mapping outlives its descriptor */
  return p == MAP_FAILED ? NULL : (unsigned char*)p;
}

static int Fill(unsigned char* m, uint64_t from, uint64_t to, unsigned seed) {
  for (uint64_t i = from; i < to; ++i) m[i] = Pattern(i, seed);
  return 0;
}

static int Check(const unsigned char* m, uint64_t base, uint64_t n, unsigned seed) {
  for (uint64_t i = 0; i < n; ++i) {
    if (m[i] != Pattern(base + i, seed)) {
      fprintf(stderr, "plain_mmap: byte %llu is %u, expected %u\n", (unsigned long long)(base + i),
              m[i], Pattern(base + i, seed));
      return 1;
    }
  }
  return 0;
}

static int CmdWrite(const char* path, size_t size, unsigned seed) {
  unsigned char* m = MapFile(path, size, PROT_READ | PROT_WRITE, 0, 1);
  if (m == NULL) return Die("mmap for write");
  Fill(m, 0, size, seed);
  if (msync(m, size, MS_SYNC) != 0) return Die("msync");
  if (munmap(m, size) != 0) return Die("munmap");
  return 0;
}

static int CmdVerify(const char* path, size_t size, unsigned seed, off_t off) {
  unsigned char* m = MapFile(path, size, PROT_READ, off, 0);
  if (m == NULL) return Die("mmap for verify");
  int rc = Check(m, (uint64_t)off, size - (size_t)off, seed);
  if (munmap(m, size - (size_t)off) != 0) return Die("munmap");
  return rc;
}

static int CmdHold(const char* path, size_t size) {
  unsigned char* m = MapFile(path, size, PROT_READ, 0, 0);
  if (m == NULL) return Die("mmap for hold");
  volatile unsigned sum = 0;
  for (size_t i = 0; i < size; i += 4096) sum += m[i];
  printf("ready %u\n", sum);
  fflush(stdout);
  char line[16];
  if (fgets(line, sizeof(line), stdin) == NULL && ferror(stdin)) return Die("stdin");
  return munmap(m, size) == 0 ? 0 : Die("munmap");
}

struct Slice {
  unsigned char* volatile* map;
  uint64_t from, to;
  unsigned seed;
};

static void* FillSlice(void* arg) {
  struct Slice* s = (struct Slice*)arg;
  while (*s->map == NULL) usleep(100); /* threads started before the mmap wait for it */
  Fill(*s->map, s->from, s->to, s->seed);
  return NULL;
}

static int CmdThreads(const char* path, size_t size, unsigned seed, int n) {
  unsigned char* volatile map = NULL;
  pthread_t t[64];
  struct Slice sl[64];
  if (n < 2 || n > 64) return 1;
  int fd = open(path, O_RDWR | O_CREAT, 0644);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) return Die("open");
  for (int i = 0; i < n; ++i) {
    sl[i] = (struct Slice){&map, size * i / n, size * (i + 1) / n, seed};
    if (i == n / 2) {
      void* p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) return Die("mmap");
      map = p;
    }
    if (pthread_create(&t[i], NULL, FillSlice, &sl[i]) != 0) return Die("pthread_create");
  }
  for (int i = 0; i < n; ++i) pthread_join(t[i], NULL);
  if (msync(map, size, MS_SYNC) != 0) return Die("msync");
  int rc = Check(map, 0, size, seed);
  if (munmap(map, size) != 0) return Die("munmap");
  close(fd);
  return rc;
}

static int CmdKernelIo(const char* path, size_t size, const char* other) {
  unsigned char* m = MapFile(path, size, PROT_READ | PROT_WRITE, 0, 1);
  if (m == NULL) return Die("mmap");
  int in = open(other, O_RDONLY);
  if (in < 0) return Die("open OTHER");
  /* read() straight into pages that were never touched: the kernel writes them. */
  size_t half = size / 2;
  for (size_t done = 0; done < half;) {
    ssize_t r = read(in, m + done, half - done);
    if (r <= 0) return Die("read into the mapping");
    done += (size_t)r;
  }
  if (pread(in, m + half, size - half, (off_t)half) != (ssize_t)(size - half)) {
    return Die("pread into the mapping");
  }
  char out[4096];
  snprintf(out, sizeof(out), "%s.out", other);
  int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (o < 0) return Die("open OTHER.out");
  struct iovec iov[2] = {{m, half}, {m + half, size - half}};
  if (writev(o, iov, 2) != (ssize_t)size) return Die("writev from the mapping");
  if (pwrite(o, m, 4096, 0) != 4096) return Die("pwrite from the mapping");
  close(o);
  if (msync(m, size, MS_SYNC) != 0) return Die("msync");
  if (munmap(m, size) != 0) return Die("munmap");
  close(in);
  return 0;
}

static int CmdFork(const char* path, size_t size, unsigned seed) {
  unsigned char* m = MapFile(path, size, PROT_READ | PROT_WRITE, 0, 1);
  if (m == NULL) return Die("mmap");
  Fill(m, 0, size, seed);
  if (msync(m, size, MS_SYNC) != 0) return Die("msync");
  pid_t pid = fork();
  if (pid == 0) {
    if (Check(m, 0, size, seed) != 0) _exit(3); /* the child reads the synced bytes */
    m[0] ^= 1;                                  /* a write must be refused loudly */
    _exit(4);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return Die("fork/wait");
  if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV) {
    fprintf(stderr, "plain_mmap: fork child ended with status 0x%x, expected SIGSEGV\n", st);
    return 1;
  }
  if (munmap(m, size) != 0) return Die("munmap");
  return 0;
}

static int CmdPartial(const char* path, size_t size) {
  unsigned char* m = MapFile(path, size, PROT_READ, 0, 0);
  if (m == NULL) return Die("mmap");
  if (munmap(m + size / 2, size / 2) == 0 || errno != EINVAL) {
    fprintf(stderr, "plain_mmap: munmap of half the mapping did not fail with EINVAL\n");
    return 1;
  }
  volatile unsigned char c = m[size - 1]; /* still mapped */
  (void)c;
  return munmap(m, size) == 0 ? 0 : Die("munmap");
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: see the comment at the top of plain_mmap.c\n");
    return 2;
  }
  const char* cmd = argv[1];
  const char* path = argv[2];
  size_t size = strtoull(argv[3], NULL, 0);
  unsigned seed = argc > 4 ? (unsigned)strtoul(argv[4], NULL, 0) : 0;
  if (strcmp(cmd, "write") == 0) return CmdWrite(path, size, seed);
  if (strcmp(cmd, "verify") == 0) {
    return CmdVerify(path, size, seed, argc > 5 ? (off_t)strtoll(argv[5], NULL, 0) : 0);
  }
  if (strcmp(cmd, "hold") == 0) return CmdHold(path, size);
  if (strcmp(cmd, "threads") == 0)
    return CmdThreads(path, size, seed, argc > 5 ? atoi(argv[5]) : 8);
  if (strcmp(cmd, "kernel-io") == 0) return CmdKernelIo(path, size, argv[4]);
  if (strcmp(cmd, "fork") == 0) return CmdFork(path, size, seed);
  if (strcmp(cmd, "partial") == 0) return CmdPartial(path, size);
  fprintf(stderr, "plain_mmap: unknown command %s\n", cmd);
  return 2;
}
