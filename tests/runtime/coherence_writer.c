/* coherence_writer: one process mapping a file through the public C API with a coherence mode
 * (umap_ex2), for the coherence tests (tests/runtime/coherence_test.cc, and the two-node
 * tests on GlusterFS, tests/cluster/). It maps, writes, umsyncs, holds the mapping until a
 * file appears, and unmaps, reporting each step on stdout:
 *   mapped pid PID | map-error ERRNO   written   synced | umsync-error ERRNO   unmapped
 *
 *   coherence_writer FILE [--mode auto|read-only|partitioned-write|shared-write]
 *                         [--map OFF:LEN] [--range OFF:LEN]... [--write OFF:LEN:CHAR]...
 *                         [--sync] [--hold PATH] [--then-write OFF:LEN:CHAR] [--journal DIR]
 * --then-write: after the hold, one more write and umsync (a writer that outlived a cut).
 * Exit: 0 done; 2 usage; 3 umap failed; 4 umsync failed; 5 uunmap failed. A write that the
 * mapping refuses ends the process with SIGSEGV (what read-only promises). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "umap/umap.h"

#define kMax 16

static int Usage(void) {
  fprintf(stderr,
          "usage: coherence_writer FILE [--mode M] [--map OFF:LEN] [--range OFF:LEN]... "
          "[--write OFF:LEN:CHAR]... [--sync] [--hold PATH] [--journal DIR]\n");
  return 2;
}

static void Say(const char* what, int err) {
  if (err != 0) {
    printf("%s %d %s\n", what, err, strerror(err));
  } else {
    printf("%s\n", what);
  }
  fflush(stdout);
}

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const char* path = argv[1];
  umap_map_options opt;
  memset(&opt, 0, sizeof(opt));
  umap_range ranges[kMax];
  size_t n_ranges = 0;
  unsigned long long writes[kMax][3];
  size_t n_writes = 0;
  unsigned long long map_off = 0, map_len = 0;
  int sync = 0;
  const char* hold = NULL;
  unsigned long long then[3] = {0, 0, 0};
  const char* journal = NULL;
  for (int i = 2; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--sync") == 0) {
      sync = 1;
      continue;
    }
    if (v == NULL) return Usage();
    ++i;
    if (strcmp(a, "--mode") == 0) {
      if (strcmp(v, "auto") == 0) opt.coherence = UMAP_COHERENCE_AUTO;
      else if (strcmp(v, "read-only") == 0) opt.coherence = UMAP_COHERENCE_READ_ONLY;
      else if (strcmp(v, "partitioned-write") == 0) opt.coherence = UMAP_COHERENCE_PARTITIONED_WRITE;
      else if (strcmp(v, "shared-write") == 0) opt.coherence = UMAP_COHERENCE_SHARED_WRITE;
      else return Usage();
    } else if (strcmp(a, "--map") == 0) {
      if (sscanf(v, "%llu:%llu", &map_off, &map_len) != 2) return Usage();
    } else if (strcmp(a, "--range") == 0 && n_ranges < kMax) {
      unsigned long long o, l;
      if (sscanf(v, "%llu:%llu", &o, &l) != 2) return Usage();
      ranges[n_ranges].offset = o;
      ranges[n_ranges].length = l;
      ++n_ranges;
    } else if (strcmp(a, "--write") == 0 && n_writes < kMax) {
      char c;
      if (sscanf(v, "%llu:%llu:%c", &writes[n_writes][0], &writes[n_writes][1], &c) != 3) {
        return Usage();
      }
      writes[n_writes++][2] = (unsigned char)c;
    } else if (strcmp(a, "--then-write") == 0) {
      char c;
      if (sscanf(v, "%llu:%llu:%c", &then[0], &then[1], &c) != 3) return Usage();
      then[2] = (unsigned char)c;
    } else if (strcmp(a, "--hold") == 0) {
      hold = v;
    } else if (strcmp(a, "--journal") == 0) {
      journal = v;
    } else {
      return Usage();
    }
  }
  opt.write_ranges = n_ranges > 0 ? ranges : NULL;
  opt.write_range_count = n_ranges;

  const int writable = opt.coherence != UMAP_COHERENCE_READ_ONLY;
  int fd = open(path, writable ? O_RDWR : O_RDONLY);
  if (fd < 0 && errno == EACCES && !writable) fd = open(path, O_RDONLY);
  if (fd < 0) {
    Say("open-error", errno);
    return 3;
  }
  if (map_len == 0) {
    struct stat st;
    if (fstat(fd, &st) != 0) return 3;
    map_len = (unsigned long long)st.st_size - map_off;
  }
  umap_config cfg;
  if (umap_config_init(&cfg) != 0) return 3;
  cfg.cache_bytes = 1 << 20;
  if (journal != NULL) cfg.journal_dir = journal;
  umap_runtime* rt = umap_runtime_create(&cfg);
  if (rt == NULL) {
    Say("runtime-error", errno);
    return 3;
  }
  /* A read-only mapping still asks for PROT_WRITE: the mode, not prot, must refuse. */
  char* p = umap_ex2(rt, NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                     (off_t)map_off, &opt);
  if (p == MAP_FAILED) {
    Say("map-error", errno);
    return 3;
  }
  printf("mapped pid %d\n", (int)getpid());
  fflush(stdout);
  for (size_t k = 0; k < n_writes; ++k) {
    memset(p + (writes[k][0] - map_off), (int)writes[k][2], writes[k][1]);
  }
  if (n_writes > 0) Say("written", 0);
  if (sync) {
    if (umsync(p, map_len, MS_SYNC) != 0) {
      Say("umsync-error", errno);
      return 4;
    }
    Say("synced", 0);
  }
  if (hold != NULL) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    for (int t = 0; t < 12000 && access(hold, F_OK) != 0; ++t) nanosleep(&ts, NULL);
  }
  if (then[1] > 0) {
    memset(p + (then[0] - map_off), (int)then[2], then[1]);
    if (umsync(p, map_len, MS_SYNC) != 0) {
      Say("umsync-error", errno);
      return 4;
    }
    Say("synced", 0);
  }
  if (uunmap(p, map_len) != 0) {
    Say("uunmap-error", errno);
    return 5;
  }
  Say("unmapped", 0);
  umap_runtime_destroy(rt);
  close(fd);
  return 0;
}
