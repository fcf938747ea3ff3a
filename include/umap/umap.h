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
#include <sys/mman.h> /* PROT_*, MAP_*, MS_*: umap() takes mmap()'s arguments */
#include <sys/types.h>

#include "umap/umap_types.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * umap_config_init(); umap_ex() uses the given one. A writable mapping of a file for which
 * the journal still holds committed, unapplied transactions (an earlier run crashed)
 * replays them first; when that fails it returns MAP_FAILED and keeps them: errno ENOSPC
 * when the journal's or the file's disk is full (map again once there is space), EIO
 * otherwise (run umap-recover, which says why). The journal's own open fails the same way. */
void* umap(void* addr, size_t length, int prot, int flags, int fd, off_t offset);
void* umap_ex(umap_runtime* runtime, void* addr, size_t length, int prot, int flags, int fd,
              off_t offset);
/* umap_ex() with per-mapping options (NULL: the defaults): the coherence mode and, for
 * partitioned-write, the byte ranges the mapping writes (docs/consistency.md). Errors besides
 * umap_ex()'s: EBUSY when another open file description (another process, or a process on
 * another node of the file system) holds a lock overlapping the blocks this mapping would
 * write; the message logged names the holder where the file system or the holder's owner
 * record tells. ENOLCK when partitioned-write was asked of a file system without byte-range
 * locks. EINVAL for a write range outside the mapping, or partitioned-write without
 * PROT_WRITE. A mapping whose range another writer holds locks on maps, and logs that its
 * view of those bytes may be stale. */
void* umap_ex2(umap_runtime* runtime, void* addr, size_t length, int prot, int flags, int fd,
               off_t offset, const umap_map_options* options);

/* Writes back dirty blocks (like umsync of the whole mapping), then removes the mapping.
 * addr/length must name exactly one whole mapping (EINVAL otherwise). On a write-back error
 * returns -1 with that errno and the mapping stays in place, so nothing is lost. */
int uunmap(void* addr, size_t length);

/* Writes back the dirty blocks of [addr, addr+length) and fdatasyncs the file; returns 0
 * only when they are durable. flags: MS_SYNC (or 0); MS_ASYNC is accepted and synchronous;
 * MS_INVALIDATE is EINVAL. */
int umsync(void* addr, size_t length, int flags);

/* Signal fault mode (the default; docs/design.md "Faults"): Umap resolves a page fault in
 * the thread that took it, inside a SIGBUS handler that Umap installs when the first
 * runtime is created (chaining to the handler that was there before). A program that
 * installs its own SIGBUS handler afterwards must call umap_handle_signal() at the start of
 * it, with the handler's arguments (SA_SIGINFO), and return at once when it returns 1: the
 * fault was Umap's and the access will succeed when retried. 0: not Umap's (a real bus
 * error, or an I/O error Umap reported as SIGBUS). Async-signal-safe. `info` is the
 * handler's siginfo_t* (declared void* so that this header needs no POSIX feature macros).
 * Likewise for SIGSEGV while the process is quiesced (umap_quiesce below): an access to a
 * quiesced mapping waits inside the call until umap_resume(), then it returns 1. */
int umap_handle_signal(int sig, void* info /* siginfo_t* */, void* ucontext);

/* Makes [addr, addr+length) of a Umap mapping resident now, from user space, so that the
 * kernel can access it: in signal fault mode, and with unprivileged (user-mode-only)
 * userfaultfd, a system call given a non-resident Umap buffer fails with EFAULT instead of
 * faulting it in. `write` nonzero touches it for writing (marks it dirty; use it before a
 * read(2) into the buffer). Blocks may be evicted again under memory pressure before the
 * call uses them, so retry on EFAULT. Returns 0, or -1 with errno (ENOMEM: not a Umap
 * range). Addresses outside Umap mappings are rejected, never touched. */
int umap_touch(void* addr, size_t length, int write);

/* Checkpoints with CRIU (docs/operations.md "Checkpoint a job with CRIU"; the design:
 * docs/design.md "Quiesce and resume"). CRIU cannot dump a process that holds a userfaultfd
 * or an io_uring. umap_quiesce() makes the process dumpable: every runtime writes back each
 * dirty block through its journal — relaxed policy: committed and applied, as umsync does;
 * atomic policy: staged in the journal, uncommitted, so that the file still holds exactly
 * the last umsync (the restored process commits them with its next umsync; if the
 * checkpoint is never restored, recovery discards them) — applies every committed
 * transaction, closes its journal, userfaultfd and io_uring rings and stops its threads. Each
 * mapping stays as an inaccessible address range (PROT_NONE, no pages): a thread that
 * touches one waits inside Umap's SIGSEGV handler until umap_resume(), so it never reads
 * zeros or stale bytes; umap(), umsync(), uunmap() and runtime creation wait likewise.
 * Returns 0 (also when already quiesced), or -1 with errno: a write-back error (ENOSPC,
 * EIO, ...) or EBUSY (kernel io_uring threads would not go away): then every runtime runs on
 * as before and nothing is lost; ESTALE: a runtime is fenced (below).
 *
 * umap_resume() reopens each journal and checks that it is exactly as the quiesce left it
 * and that each mapped file is the same file with the same size; then it re-creates the
 * userfaultfd, rings and threads, registers the mappings again and wakes the waiting
 * threads (the data is read again from the files). Returns 0 (also when running), or -1
 * with errno: EBUSY (the journal is locked by another process, whose pid the log names),
 * ENOENT (the journal's directory is gone) or another error: still quiesced, call again;
 * ESTALE: another process wrote the journal or a file since the checkpoint (a job restarted
 * from the journal, or an older checkpoint restored): that runtime is fenced for good. It
 * never writes to its files or journal again, threads touching its mappings get SIGSEGV,
 * umap()/umsync() fail with ESTALE, and uunmap() only releases the range. The log says why.
 *
 * A program started with UMAP_CHECKPOINT=1 (umap_config.checkpoint_control) is quiesced and
 * resumed from outside, by `umap-ctl` as a criu --action-script. */
int umap_quiesce(void);
int umap_resume(void);

/* Counters of the runtime serving addr (or of runtime when addr is NULL). */
int umap_get_stats(umap_runtime* runtime, umap_stats* out);
/* Figures of the mapping that contains addr. -1 with ENOMEM when addr is in no mapping. */
int umap_get_mapping_stats(const void* addr, umap_mapping_stats* out);
umap_runtime* umap_default_runtime(void);

#ifdef __cplusplus
}
#endif

#endif /* UMAP_UMAP_H_ */
