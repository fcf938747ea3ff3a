/* Umap: mmap() for large files on distributed file systems, with a bounded cache and a
 * crash-safe write-ahead journal. C API; the C++ RAII layer is in umap/umap.hpp.
 *
 * umap()/uunmap()/umsync() take mmap()/munmap()/msync() arguments and report errors the same
 * way (MAP_FAILED or -1, with errno). Differences from mmap, each with its errno:
 *   - offset must be a multiple of the block size (EINVAL);
 *   - flags must contain MAP_SHARED (MAP_PRIVATE copy-on-write is not offered: EINVAL);
 *   - PROT_WRITE needs a descriptor open O_RDWR (EACCES), as for MAP_SHARED mmap;
 *   - the mapping is not inherited by fork() children (MADV_DONTFORK): a child touching it
 *     gets SIGSEGV, never silent zeros;
 *   - access to a page wholly past end of file raises SIGBUS, as mmap does; so does a read
 *     whose backend I/O failed (the reason is logged), never a zero page.
 * umsync() returns 0 only after the dirty blocks are written and fdatasync'ed.
 */
#ifndef UMAP_UMAP_H_
#define UMAP_UMAP_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum umap_policy {
  UMAP_POLICY_ATOMIC = 0,  /* default: failure-atomic umsync (needs a journal) */
  UMAP_POLICY_RELAXED = 1, /* mmap-like: evicted dirty blocks written back on their own */
} umap_policy;

typedef enum umap_journal_mode {
  UMAP_JOURNAL_DATA = 0,   /* payloads journaled: durable and atomic at commit */
  UMAP_JOURNAL_INTENT = 1, /* CRC only (relaxed only): recovery detects, cannot repair */
  UMAP_JOURNAL_OFF = 2,    /* UNSAFE, benchmarks only: no crash protection at all */
} umap_journal_mode;

/* Configuration of a runtime. Fill with umap_config_init() (which applies the UMAP_*
 * environment defaults documented in docs/configuration.md), then override fields. */
typedef struct umap_config {
  size_t cache_bytes;        /* bound on resident cached data, all mappings together */
  size_t block_size;         /* power of two >= page size */
  unsigned handler_threads;  /* userfaultfd fault handlers */
  unsigned writeback_threads;/* background write-back workers */
  const char* journal_dir;   /* NULL: no journal (write-back straight to the file) */
  umap_policy policy;
  umap_journal_mode journal_mode;
} umap_config;

typedef struct umap_stats {
  uint64_t faults_missing;   /* MISSING faults resolved */
  uint64_t faults_wp;        /* write-protect faults resolved (first write to a block) */
  uint64_t blocks_read;      /* blocks read from the backend */
  uint64_t blocks_written;   /* blocks written back to the backend */
  uint64_t evictions;        /* blocks evicted from the cache */
  uint64_t dirty_evictions;  /* evicted blocks that needed write-back */
  uint64_t cache_bytes_used; /* resident cached bytes now */
  uint64_t cache_bytes_peak; /* highest resident cached bytes seen */
  uint64_t cache_bytes_limit;
  uint64_t io_errors;        /* backend errors seen (each logged) */
  uint64_t sigbus_raised;    /* faults answered with SIGBUS (EOF or I/O error) */
} umap_stats;

typedef struct umap_runtime umap_runtime;

/* Fills *config with defaults, then with UMAP_* environment values (the one place they
 * are read). Returns 0, or -1 with errno EINVAL when an environment value is malformed. */
int umap_config_init(umap_config* config);

/* Creates a runtime with its own cache, handler threads and (optional) journal.
 * Returns NULL with errno on failure (EINVAL bad config, ENOSYS no userfaultfd, ...). */
umap_runtime* umap_runtime_create(const umap_config* config);
/* Unmaps (with write-back) every mapping still open, stops the threads, frees everything.
 * Returns 0 or -1 with errno of the first write-back failure. */
int umap_runtime_destroy(umap_runtime* runtime);

/* mmap()-like. umap() uses the process's default runtime, created on first use from
 * umap_config_init(); umap_ex() uses the given one. */
void* umap(void* addr, size_t length, int prot, int flags, int fd, off_t offset);
void* umap_ex(umap_runtime* runtime, void* addr, size_t length, int prot, int flags, int fd,
              off_t offset);

/* Writes back dirty blocks (like umsync of the whole mapping), then removes the mapping.
 * addr/length must name exactly one whole mapping (EINVAL otherwise). On a write-back error
 * returns -1 with that errno and the mapping stays in place, so nothing is lost. */
int uunmap(void* addr, size_t length);

/* Writes back the dirty blocks of [addr, addr+length) and fdatasyncs the file; returns 0
 * only when they are durable. flags: MS_SYNC (or 0); MS_ASYNC is accepted and synchronous;
 * MS_INVALIDATE is EINVAL. */
int umsync(void* addr, size_t length, int flags);

/* Counters of the runtime serving addr (or of runtime when addr is NULL). */
int umap_get_stats(umap_runtime* runtime, umap_stats* out);
umap_runtime* umap_default_runtime(void);

#ifdef __cplusplus
}
#endif

#endif /* UMAP_UMAP_H_ */
