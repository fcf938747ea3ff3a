/* Umap C types: configuration, policies, statistics. Split from umap.h so that C++ code in
 * namespace umap can use them: a C++ scope cannot hold both the function umap() and the
 * namespace umap, so only translation units that need the C functions include umap.h. */
#ifndef UMAP_UMAP_TYPES_H_
#define UMAP_UMAP_TYPES_H_

#include <stddef.h>
#include <stdint.h>

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
  const char* journal_dir;   /* NULL: /var/tmp/umap-journal-$UID/<pid>-<n> (docs/configuration.md) */
  umap_policy policy;
  umap_journal_mode journal_mode;
  size_t journal_staged_quota; /* atomic policy: bound on dirty bytes spilled to the journal
                                  before a umsync (default 1 GiB) */
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

#ifdef __cplusplus
}
#endif

#endif /* UMAP_UMAP_TYPES_H_ */
