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
typedef enum umap_io_engine {
  UMAP_IO_AUTO = 0,  /* io_uring if the kernel offers it, else posix */
  UMAP_IO_URING = 1,
  UMAP_IO_POSIX = 2, /* threads calling pread */
} umap_io_engine;

/* Who resolves page faults (docs/configuration.md, UMAP_FAULT_MODE). */
typedef enum umap_fault_mode {
  UMAP_FAULT_AUTO = 0,    /* signal */
  UMAP_FAULT_SIGNAL = 1,  /* the faulting thread, in Umap's SIGBUS handler: a miss costs what
                             the kernel's own fault costs; system calls given a non-resident
                             Umap buffer fail with EFAULT (umap_touch() first) */
  UMAP_FAULT_HANDLER = 2, /* handler threads reading userfaultfd messages: system calls on
                             Umap buffers are served too (unless user-mode-only) */
} umap_fault_mode;

/* How the process reached userfaultfd (umap_stats.uffd_access). */
typedef enum umap_uffd_access {
  UMAP_UFFD_SYSCALL = 0,        /* userfaultfd(2), kernel faults served */
  UMAP_UFFD_DEVICE = 1,         /* /dev/userfaultfd */
  UMAP_UFFD_USER_MODE_ONLY = 2, /* unprivileged: system calls on non-resident pages: EFAULT */
} umap_uffd_access;

/* How a mapping coexists with other writers of the same file: another process, or a process
 * on another node of a distributed file system (docs/consistency.md). Each process caches
 * its blocks on its own and writes them back only at umsync or eviction, so two writers of
 * the same block overwrite each other's block images: only one writer per block is safe. */
typedef enum umap_coherence {
  UMAP_COHERENCE_AUTO = 0,              /* the runtime's `coherence` (umap_config); when that
                                           is AUTO too: PROT_WRITE -> partitioned-write of
                                           the whole mapping, else read-only */
  UMAP_COHERENCE_READ_ONLY = 1,         /* never writes back; a write to the mapping raises
                                           SIGSEGV, the reason logged (also with PROT_WRITE) */
  UMAP_COHERENCE_PARTITIONED_WRITE = 2, /* the mapping takes open-file-description write
                                           locks (F_OFD_SETLK) on the byte ranges it writes:
                                           an overlapping writer anywhere fails with EBUSY */
  UMAP_COHERENCE_SHARED_WRITE = 3,      /* UNSAFE: no lock, nothing stops another writer;
                                           logged once per process */
} umap_coherence;

/* A byte range of a file: [offset, offset + length). */
typedef struct umap_range {
  uint64_t offset;
  uint64_t length;
} umap_range;

/* Per-mapping options of umap_ex2(). Zero-filled = every default. */
typedef struct umap_map_options {
  umap_coherence coherence;
  /* partitioned-write: the file byte ranges this mapping writes, inside the mapped range;
   * rounded out to whole blocks (write-back writes whole blocks), which are locked; the
   * rest of the mapping is read-only (a write there raises SIGSEGV, logged). NULL or 0
   * ranges: the whole mapping. Copied by umap_ex2(); ignored by the other modes. */
  const umap_range* write_ranges;
  size_t write_range_count;
} umap_map_options;

/* Reads of [4 KiB << k, 4 KiB << (k+1)) bytes are counted in io_size_hist[k]. */
#define UMAP_IO_SIZE_BUCKETS 12

typedef struct umap_config {
  size_t cache_bytes;        /* hard cap on cached data, all mappings together; 0: unset, the
                                memory budget (cgroup limit or MemAvailable) decides */
  size_t block_size;         /* power of two >= page size */
  unsigned handler_threads;  /* userfaultfd fault handlers */
  unsigned writeback_threads;/* background write-back workers */
  const char* journal_dir;   /* NULL: /var/tmp/umap-journal-$UID/<pid>-<n> (docs/configuration.md) */
  umap_policy policy;
  umap_journal_mode journal_mode;
  size_t journal_staged_quota; /* atomic policy: bound on dirty bytes spilled to the journal
                                  before a umsync (default 1 GiB) */
  /* I/O channels (docs/configuration.md): misses are merged and read by these. */
  umap_io_engine io_engine;  /* auto (io_uring where available), uring or posix */
  unsigned io_channels;      /* I/O channels (io_uring rings) */
  unsigned io_depth;         /* merged reads in flight per channel */
  size_t io_max_bytes;       /* largest merged read (a multiple of block_size) */
  unsigned io_timeout_ms;    /* deadline of one read attempt */
  unsigned io_retries;       /* retries after a timeout before the fault gets SIGBUS */
  int io_direct;             /* 1: read (and, on a local file system, write back) with
                                O_DIRECT where the file system allows it */
  size_t prefetch_bytes;     /* largest read-ahead window of a sequential stream (0: off) */
  umap_fault_mode fault_mode;/* who resolves page faults (default: signal) */
  unsigned stats_period_ms;  /* period of the stats segment umap-stat reads (0: none) */
  int lazy_sizing;           /* 1 (default): the cache starts small, grows on re-misses up to
                                cache_bytes and the memory budget, shrinks under memory
                                pressure; 0: a fixed cache of cache_bytes */
  int checkpoint_control;    /* 1: serve the process's checkpoint control socket, through
                                which umap-ctl quiesces and resumes it around a CRIU dump and
                                restore (UMAP_CHECKPOINT; docs/operations.md) */
  umap_coherence coherence;  /* of mappings made without options (umap(), umap_ex(), the
                                preload library): AUTO, or a mode for all of them */
  int defer_file_sync;       /* 1: with a data journal, umsync returns once the journal holds
                                its transaction; a background thread per mapping writes it to
                                the file and fdatasyncs later (docs/durability.md,
                                UMAP_DEFER_FILE_SYNC) */
  size_t umsync_chunk_bytes; /* most dirty bytes a umsync holds in memory at once; a larger
                                umsync goes in chunks (default 1 MiB; UMAP_UMSYNC_CHUNK_BYTES;
                                docs/configuration.md) */
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
  /* I/O channels */
  uint64_t io_reads;         /* merged reads completed */
  uint64_t io_bytes;         /* bytes they read */
  uint64_t io_queue_wait_us; /* summed wait of reads between queueing and issue */
  uint64_t io_timeouts;      /* read attempts that passed their deadline */
  uint64_t io_retries;       /* reads retried after a timeout */
  uint64_t io_read_failures; /* merged reads that failed for good */
  uint64_t io_writes;        /* merged write-back writes */
  uint64_t io_write_bytes;
  uint64_t io_write_timeouts;/* writes that passed their deadline (umsync got ETIMEDOUT) */
  uint64_t prefetched_blocks;/* blocks queued by sequential read-ahead */
  uint64_t umsyncs_shared;   /* umsyncs answered by a concurrent umsync that covered them */
  uint64_t io_size_hist[UMAP_IO_SIZE_BUCKETS];
  int io_engine;             /* the engine in use: UMAP_IO_URING or UMAP_IO_POSIX */
  int fault_mode;            /* UMAP_FAULT_SIGNAL or UMAP_FAULT_HANDLER */
  int uffd_access;           /* a umap_uffd_access value */
  uint64_t io_inline_reads;  /* of io_reads: read by the faulting thread itself (signal mode) */
  /* Cache sizing (docs/design.md "Cache sizing"). cache_bytes_limit above is the hard cap. */
  int lazy_sizing;           /* 1 when the cache sizes itself */
  uint64_t cache_capacity_bytes; /* the capacity now (lazy sizing moves it) */
  uint64_t cache_virtual_bytes;  /* virtual capacity: the smallest capacity predicted to miss
                                    about as often as the current one (0: not known) */
  uint64_t cache_ceiling_bytes;  /* the most the cache may grow to now: hard cap, memory
                                    budget and pressure together */
  uint64_t memory_limit_bytes;   /* the limit the budget comes from: the memory cgroup's, or
                                    MemTotal when there is none */
  uint64_t memory_used_bytes;    /* used against it (cgroup: charged minus inactive file) */
  uint64_t cache_remisses;       /* misses of blocks an access had brought in before */
  uint64_t cache_grows;          /* times a re-miss grew the capacity */
  uint64_t cache_shrunk_blocks;  /* blocks evicted to bring the cache down to a lower limit */
  uint64_t memory_pressure_events; /* pressure events acted on */
  uint64_t sampled_hits;         /* accesses to parked sample blocks (the tracker's hits) */
} umap_stats;

/* Per-mapping figures (umap_get_mapping_stats): bytes each file received, for fairness. */
typedef struct umap_mapping_stats {
  uint64_t bytes_read;       /* bytes read from the file for this mapping */
  uint64_t reads;            /* merged reads */
  uint64_t prefetched_blocks;
  int direct_io;             /* 1 when reads bypass the page cache (O_DIRECT) */
  /* Cache sizing: this mapping's part of the cache. */
  uint64_t capacity_bytes;   /* resident now */
  uint64_t virtual_bytes;    /* its virtual capacity (0: not known, or lazy sizing off) */
  uint64_t max_bytes;        /* the most it may hold now: its share of the cache */
  uint64_t remisses;         /* misses of blocks it had before */
  uint64_t working_set_bytes;/* estimated working set: 99% of its reuses are within this */
} umap_mapping_stats;

typedef struct umap_runtime umap_runtime;

#ifdef __cplusplus
}
#endif

#endif /* UMAP_UMAP_TYPES_H_ */
