/* Test-only LD_PRELOAD library for criu 3.17 (Debian 12) on kernels >= 6.13.
 *
 * Since Linux 6.13 the vDSO's data area shows in /proc/PID/maps as two mappings, [vvar] and
 * [vvar_vclock]; criu before 4.1 expects one [vvar] next to [vdso], finds the areas'
 * bounds inconsistent ("Unexpected rt vDSO area bounds") and refuses every command, check
 * included. Preloaded into criu, this library serves criu's reads of /proc/PID/maps and
 * /proc/PID/smaps (open, openat, fopen) from a copy in which an adjacent [vvar_vclock]
 * entry is merged into the [vvar] entry before it: one [vvar] covering both. Everything
 * else passes through. It is only for the tests of this repository (tests/criu): a site
 * runs criu >= 4.1 instead (docs/operations.md).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int (*openat_fn)(int, const char*, int, ...);
typedef FILE* (*fopen_fn)(const char*, const char*);

static openat_fn real_openat(void) {
  static openat_fn f;
  if (f == NULL) f = (openat_fn)dlsym(RTLD_NEXT, "openat");
  return f;
}

/* The absolute path of (dirfd, path) when it names a maps or smaps file under /proc. */
static int proc_maps_path(int dirfd, const char* path, char* out, size_t n) {
  const char* base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (strcmp(base, "maps") != 0 && strcmp(base, "smaps") != 0) return 0;
  if (path[0] == '/') {
    snprintf(out, n, "%s", path);
  } else {
    char dir[PATH_MAX];
    if (dirfd == AT_FDCWD) {
      if (getcwd(dir, sizeof(dir)) == NULL) return 0;
    } else {
      char link[64];
      snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
      ssize_t k = readlink(link, dir, sizeof(dir) - 1);
      if (k < 0) return 0;
      dir[k] = '\0';
    }
    if ((size_t)snprintf(out, n, "%s/%s", dir, path) >= n) return 0; /* too long for /proc */
  }
  return strncmp(out, "/proc/", 6) == 0;
}

/* A header line of maps/smaps ("start-end perms ..."), with its range. */
static int header(const char* line, unsigned long* start, unsigned long* end) {
  int used = 0;
  return sscanf(line, "%lx-%lx %*s%n", start, end, &used) == 2 && used > 0;
}

static int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* The file at `path`, with [vvar_vclock] merged into [vvar], in a memfd at offset 0. */
static int merged_copy(const char* path) {
  int fd = real_openat()(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t cap = 1 << 16, len = 0;
  char* buf = malloc(cap + 1);
  for (;;) {
    if (buf == NULL) {
      close(fd);
      errno = ENOMEM;
      return -1;
    }
    if (len == cap) {
      char* bigger = realloc(buf, (cap *= 2) + 1);
      if (bigger == NULL) free(buf);
      buf = bigger;
      continue;
    }
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      close(fd);
      free(buf);
      errno = err;
      return -1;
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  close(fd);
  buf[len] = '\0';

  /* The [vvar] entry, and a [vvar_vclock] entry starting where it ends (through the end of
   * its smaps block: the next header line). */
  char *vvar = NULL, *vclock = NULL, *vclock_end = NULL;
  unsigned long vvar_start = 0, vvar_end = 0, vclock_last = 0;
  for (char* p = buf; p < buf + len;) {
    char* nl = strchr(p, '\n');
    char* next = nl ? nl + 1 : buf + len;
    unsigned long s, e;
    if (header(p, &s, &e)) {
      if (vclock != NULL && vclock_end == NULL) vclock_end = p;
      if (memmem(p, (size_t)(next - p), "[vvar]", 6) != NULL) {
        vvar = p;
        vvar_start = s;
        vvar_end = e;
      } else if (vvar != NULL && s == vvar_end &&
                 memmem(p, (size_t)(next - p), "[vvar_vclock]", 13) != NULL) {
        vclock = p;
        vclock_last = e;
      }
    }
    p = next;
  }
  if (vclock != NULL && vclock_end == NULL) vclock_end = buf + len;

  int out = memfd_create("vvar-shim", MFD_CLOEXEC);
  if (out < 0) {
    free(buf);
    return -1;
  }
  int bad = 0;
  if (vvar != NULL && vclock != NULL) {
    /* Before [vvar]; its header with the merged range; its body; after [vvar_vclock]. */
    char* rest = strchr(vvar, ' ');
    char* vvar_nl = strchr(vvar, '\n');
    char range[64];
    int rn = snprintf(range, sizeof(range), "%lx-%lx", vvar_start, vclock_last);
    char* body = vvar_nl ? vvar_nl + 1 : buf + len;
    bad |= write_all(out, buf, (size_t)(vvar - buf));
    bad |= write_all(out, range, (size_t)rn);
    bad |= write_all(out, rest, (size_t)(body - rest));
    bad |= write_all(out, body, (size_t)(vclock - body));
    bad |= write_all(out, vclock_end, (size_t)(buf + len - vclock_end));
  } else {
    bad |= write_all(out, buf, len);
  }
  free(buf);
  if (bad || lseek(out, 0, SEEK_SET) != 0) {
    close(out);
    errno = EIO;
    return -1;
  }
  return out;
}

int openat(int dirfd, const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = (mode_t)va_arg(ap, int);
    va_end(ap);
  }
  char full[PATH_MAX];
  if ((flags & O_ACCMODE) == O_RDONLY && !(flags & O_PATH) &&
      proc_maps_path(dirfd, path, full, sizeof(full))) {
    return merged_copy(full);
  }
  return real_openat()(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char* path, int flags, ...) __attribute__((alias("openat")));

int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = (mode_t)va_arg(ap, int);
    va_end(ap);
  }
  return openat(AT_FDCWD, path, flags, mode);
}

int open64(const char* path, int flags, ...) __attribute__((alias("open")));

/* glibc's fopen opens through an internal call that open() above does not see. */
FILE* fopen(const char* path, const char* mode) {
  static fopen_fn real;
  if (real == NULL) real = (fopen_fn)dlsym(RTLD_NEXT, "fopen");
  char full[PATH_MAX];
  if (mode[0] == 'r' && strchr(mode, '+') == NULL &&
      proc_maps_path(AT_FDCWD, path, full, sizeof(full))) {
    int fd = merged_copy(full);
    return fd < 0 ? NULL : fdopen(fd, mode);
  }
  return real(path, mode);
}

FILE* fopen64(const char* path, const char* mode) __attribute__((alias("fopen")));
