/* Source-compatible mode: a program that includes this header after its system headers has
 * its mmap(), munmap() and msync() calls served by Umap where they can be, without other
 * changes. Link with the Umap library.
 *
 *   mmap    a readable, non-executable MAP_SHARED mapping of a file goes to umap() (with
 *           umap()'s rules: the offset must be a multiple of the block size, see umap.h);
 *           anything else (anonymous, MAP_PRIVATE, PROT_EXEC, PROT_NONE) to the kernel.
 *   munmap  a Umap mapping is unmapped with write-back (uunmap: addr/length must name the
 *           whole mapping); anything else goes to the kernel.
 *   msync   on a Umap mapping is umsync() (MS_INVALIDATE is ignored: one cache per
 *           process); anything else goes to the kernel.
 * The functions are also available under their own names (umap_compat_mmap, ...); define
 * UMAP_COMPAT_NO_MACROS before including this header to get only those. Programs that cannot
 * be rebuilt use libumap_preload.so instead (docs/preload.md). */
#ifndef UMAP_UMAP_COMPAT_H_
#define UMAP_UMAP_COMPAT_H_

#include <sys/mman.h>

#include "umap/umap.h"

static inline void* umap_compat_mmap(void* addr, size_t length, int prot, int flags, int fd,
                                     off_t offset) {
  const int type = flags & MAP_TYPE;
  if (fd >= 0 && (flags & MAP_ANONYMOUS) == 0 &&
      (type == MAP_SHARED || type == MAP_SHARED_VALIDATE) && (prot & PROT_EXEC) == 0 &&
      (prot & (PROT_READ | PROT_WRITE)) != 0) {
    return umap(addr, length, prot, flags, fd, offset);
  }
  return mmap(addr, length, prot, flags, fd, offset);
}

/* True when addr lies in a Umap mapping of this process. */
static inline int umap_compat_is_umap(const void* addr) {
  umap_mapping_stats st;
  return umap_get_mapping_stats(addr, &st) == 0;
}

static inline int umap_compat_munmap(void* addr, size_t length) {
  return umap_compat_is_umap(addr) ? uunmap(addr, length) : munmap(addr, length);
}

static inline int umap_compat_msync(void* addr, size_t length, int flags) {
  return umap_compat_is_umap(addr) ? umsync(addr, length, flags & ~MS_INVALIDATE)
                                   : msync(addr, length, flags);
}

#ifndef UMAP_COMPAT_NO_MACROS
#define mmap umap_compat_mmap
#define munmap umap_compat_munmap
#define msync umap_compat_msync
#endif

#endif /* UMAP_UMAP_COMPAT_H_ */
