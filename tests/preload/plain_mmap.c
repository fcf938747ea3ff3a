/* A small C program that uses plain mmap(), munmap(), msync(), read() and write() and knows
 * nothing about Umap: the preload tests run it with and without libumap_preload.so.
 *
 *   plain_mmap write  FILE SIZE SEED          create FILE, fill a mapping, msync, munmap
 *   plain_mmap verify FILE SIZE SEED [OFF]    map (from OFF) read-only and compare
 *   plain_mmap hold   FILE SIZE               map, touch every page, print "ready", wait for
 *                                             a line on stdin, unmap
 *   plain_mmap scan   FILE SIZE SEED          map read-only without touching it, print "ready",
 *                                             wait for a line on stdin, then check every
 *                                             byte and print "scanned"
 *   plain_mmap threads FILE SIZE SEED N       N threads, half started before the mmap and
 *                                             half after, each fills its slice; msync; check
 *   plain_mmap kernel-io FILE SIZE OTHER      read() OTHER into the mapping, write() the
 *                                             mapping to OTHER.out, pread/pwrite/readv/writev
 *                                             too; send() its first 64 KiB over a socket
 *                                             and recv() them into a fresh mapping of
 *                                             OTHER.sock; msync
 *   plain_mmap fork   FILE SIZE SEED          fill + msync; a fork child reads the mapping
 *                                             (must see the synced bytes), then writes one
 *                                             byte (must die with SIGSEGV)
 *   plain_mmap fork-first FILE SIZE           fork before any mapping; the child prints
 *                                             "child PID" and runs hold (the parent waits)
 *   plain_mmap partial FILE SIZE              munmap of half a mapping must fail with EINVAL
 *                                             and leave the mapping whole
 *   plain_mmap advise FILE SIZE SEED          fill; madvise(DONTNEED) keeps the bytes;
 *                                             mprotect to read-only is refused; msync
 *   plain_mmap grow   FILE SIZE SEED          fill SIZE, extend the file, mremap(MAYMOVE) to
 *                                             twice the size, old bytes kept, fill the rest
 *   plain_mmap exit-mapped FILE SIZE SEED     fill and exit() without msync or munmap
 *   plain_mmap sigbus FILE 4096 SEED WHEN     install a SIGBUS handler BEFORE or AFTER
 *                                             mapping 2 pages of a 1-page file: the first
 *                                             page reads and writes normally, the second
 *                                             (past end of file) reaches the handler;
 *                                             signal() and sigaction() report the
 *                                             program's own handlers
 * With PLAIN_MMAP_CTOR_FILE=PATH (PATH holds at least 4096 bytes) a constructor maps PATH
 * before main() and prints the sum of its first page; main() checks it again.
 * Exit 0 on success; 1 with a message naming what differed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
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

static int CmdScan(const char* path, size_t size, unsigned seed) {
  unsigned char* m = MapFile(path, size, PROT_READ, 0, 0);
  if (m == NULL) return Die("mmap for scan");
  printf("ready\n");
  fflush(stdout);
  char line[16];
  if (fgets(line, sizeof(line), stdin) == NULL && ferror(stdin)) return Die("stdin");
  if (Check(m, 0, size, seed) != 0) return 1;
  printf("scanned\n");
  fflush(stdout);
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
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return Die("socketpair");
  snprintf(out, sizeof(out), "%s.sock", other);
  unsigned char* s = MapFile(out, 65536, PROT_READ | PROT_WRITE, 0, 1);
  if (s == NULL) return Die("mmap OTHER.sock");
  if (send(sv[0], m, 65536, 0) != 65536) return Die("send from the mapping");
  for (size_t got = 0; got < 65536;) {
    ssize_t r = recv(sv[1], s + got, 65536 - got, 0);
    if (r <= 0) return Die("recv into a fresh mapping");
    got += (size_t)r;
  }
  if (msync(s, 65536, MS_SYNC) != 0 || munmap(s, 65536) != 0) return Die("msync OTHER.sock");
  close(sv[0]);
  close(sv[1]);
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

static int CmdForkFirst(const char* path, size_t size) {
  pid_t pid = fork();
  if (pid == 0) {
    printf("child %d\n", (int)getpid());
    fflush(stdout);
    _exit(CmdHold(path, size));
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return Die("fork/wait");
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
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

static int CmdAdvise(const char* path, size_t size, unsigned seed) {
  unsigned char* m = MapFile(path, size, PROT_READ | PROT_WRITE, 0, 1);
  if (m == NULL) return Die("mmap");
  Fill(m, 0, size, seed);
  /* On a MAP_SHARED file mapping DONTNEED drops only the page-cache view: the bytes stay. */
  if (madvise(m, size, MADV_DONTNEED) != 0) return Die("madvise(DONTNEED)");
  if (madvise(m, size, MADV_SEQUENTIAL) != 0) return Die("madvise(SEQUENTIAL)");
  if (Check(m, 0, size, seed) != 0) return 1;
  if (getenv("PLAIN_MMAP_EXPECT_UMAP") != NULL) {
    if (mprotect(m, size, PROT_READ) == 0 || errno != EINVAL) {
      fprintf(stderr, "plain_mmap: mprotect(PROT_READ) of a Umap mapping was not refused\n");
      return 1;
    }
    if (madvise(m, size, MADV_REMOVE) == 0 || errno != EINVAL) {
      fprintf(stderr, "plain_mmap: madvise(REMOVE) of a Umap mapping was not refused\n");
      return 1;
    }
  }
  if (msync(m, size, MS_SYNC) != 0) return Die("msync");
  return munmap(m, size) == 0 ? 0 : Die("munmap");
}

static int CmdGrow(const char* path, size_t size, unsigned seed) {
  int fd = open(path, O_RDWR | O_CREAT, 0644);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) return Die("open");
  unsigned char* m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return Die("mmap");
  Fill(m, 0, size, seed);
  if (ftruncate(fd, (off_t)(2 * size)) != 0) return Die("ftruncate");
  unsigned char* g = mremap(m, size, 2 * size, MREMAP_MAYMOVE);
  if (g == MAP_FAILED) return Die("mremap");
  if (Check(g, 0, size, seed) != 0) return 1;
  Fill(g, size, 2 * size, seed);
  if (msync(g, 2 * size, MS_SYNC) != 0) return Die("msync");
  if (munmap(g, 2 * size) != 0) return Die("munmap");
  close(fd);
  return 0;
}

static int CmdExitMapped(const char* path, size_t size, unsigned seed) {
  unsigned char* m = MapFile(path, size, PROT_READ | PROT_WRITE, 0, 1);
  if (m == NULL) return Die("mmap");
  Fill(m, 0, size, seed);
  exit(0); /* the kernel writes a MAP_SHARED mapping back; so must the shim */
}

static sigjmp_buf g_jmp;
static void* volatile g_bus_addr;
static volatile int g_bus_hits;

static void OnBus(int sig, siginfo_t* si, void* uc) {
  (void)sig;
  (void)uc;
  g_bus_hits++;
  g_bus_addr = si->si_addr;
  siglongjmp(g_jmp, 1);
}

static int CmdSigbus(const char* path, unsigned seed, int before) {
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Die("open");
  unsigned char page[4096];
  for (int i = 0; i < 4096; ++i) page[i] = Pattern((uint64_t)i, seed);
  if (write(fd, page, sizeof(page)) != (ssize_t)sizeof(page)) return Die("write");
  struct sigaction sa, old;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = OnBus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (before && sigaction(SIGBUS, &sa, &old) != 0) return Die("sigaction before");
  unsigned char* m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return Die("mmap");
  if (!before) {
    if (sigaction(SIGBUS, &sa, &old) != 0) return Die("sigaction after");
    if (old.sa_handler != SIG_DFL) {
      fprintf(stderr, "plain_mmap: the SIGBUS handler before ours is not SIG_DFL\n");
      return 1;
    }
  }
  /* Faults on the file's page are served, whoever handles SIGBUS. */
  if (Check(m, 0, 4096, seed) != 0) return 1;
  m[10] = 'x';
  if (g_bus_hits != 0) {
    fprintf(stderr, "plain_mmap: the handler saw %d signals for ordinary faults\n", g_bus_hits);
    return 1;
  }
  if (sigsetjmp(g_jmp, 1) == 0) {
    volatile unsigned char c = m[4096 + 7]; /* past end of file */
    (void)c;
    fprintf(stderr, "plain_mmap: no SIGBUS past end of file\n");
    return 1;
  }
  if (g_bus_hits != 1 || ((uintptr_t)g_bus_addr & ~(uintptr_t)4095) != (uintptr_t)(m + 4096)) {
    fprintf(stderr, "plain_mmap: handler saw %d signals, address %p (page %p expected)\n",
            g_bus_hits, g_bus_addr, (void*)(m + 4096));
    return 1;
  }
  void (*prev)(int) = signal(SIGBUS, SIG_DFL);
  if (prev != (void (*)(int))(void*)OnBus) {
    fprintf(stderr, "plain_mmap: signal() did not return the handler sigaction set\n");
    return 1;
  }
  if (sigaction(SIGBUS, NULL, &old) != 0 || old.sa_handler != SIG_DFL) {
    fprintf(stderr, "plain_mmap: sigaction() does not report SIG_DFL after signal()\n");
    return 1;
  }
  if (msync(m, 4096, MS_SYNC) != 0 || munmap(m, 8192) != 0) return Die("msync/munmap");
  unsigned char back = 0;
  if (pread(fd, &back, 1, 10) != 1 || back != 'x') {
    fprintf(stderr, "plain_mmap: the write did not reach the file\n");
    return 1;
  }
  close(fd);
  return 0;
}

static unsigned g_ctor_sum;
static int g_ctor_done;

__attribute__((constructor)) static void MapBeforeMain(void) {
  const char* path = getenv("PLAIN_MMAP_CTOR_FILE");
  if (path == NULL) return;
  unsigned char* m = MapFile(path, 4096, PROT_READ, 0, 0);
  if (m == NULL) return;
  for (int i = 0; i < 4096; ++i) g_ctor_sum += m[i];
  g_ctor_done = 1;
  munmap(m, 4096);
}

static int CheckConstructor(void) {
  const char* path = getenv("PLAIN_MMAP_CTOR_FILE");
  if (path == NULL) return 0;
  if (!g_ctor_done) {
    fprintf(stderr, "plain_mmap: the constructor could not map %s\n", path);
    return 1;
  }
  int fd = open(path, O_RDONLY);
  unsigned char page[4096];
  if (fd < 0 || read(fd, page, sizeof(page)) != (ssize_t)sizeof(page)) return Die("read ctor file");
  close(fd);
  unsigned sum = 0;
  for (int i = 0; i < 4096; ++i) sum += page[i];
  if (sum != g_ctor_sum) {
    fprintf(stderr, "plain_mmap: the constructor saw sum %u, the file has %u\n", g_ctor_sum, sum);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (CheckConstructor() != 0) return 1;
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
  if (strcmp(cmd, "scan") == 0) return CmdScan(path, size, seed);
  if (strcmp(cmd, "threads") == 0)
    return CmdThreads(path, size, seed, argc > 5 ? atoi(argv[5]) : 8);
  if (strcmp(cmd, "kernel-io") == 0) return CmdKernelIo(path, size, argv[4]);
  if (strcmp(cmd, "fork") == 0) return CmdFork(path, size, seed);
  if (strcmp(cmd, "partial") == 0) return CmdPartial(path, size);
  if (strcmp(cmd, "fork-first") == 0) return CmdForkFirst(path, size);
  if (strcmp(cmd, "advise") == 0) return CmdAdvise(path, size, seed);
  if (strcmp(cmd, "grow") == 0) return CmdGrow(path, size, seed);
  if (strcmp(cmd, "exit-mapped") == 0) return CmdExitMapped(path, size, seed);
  if (strcmp(cmd, "sigbus") == 0) {
    return CmdSigbus(path, seed, argc > 5 && strcmp(argv[5], "before") == 0);
  }
  fprintf(stderr, "plain_mmap: unknown command %s\n", cmd);
  return 2;
}
