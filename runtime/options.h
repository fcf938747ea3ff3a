// RuntimeOptions: the C++ form of umap_config (see include/umap/umap.h).
#ifndef UMAP_RUNTIME_OPTIONS_H_
#define UMAP_RUNTIME_OPTIONS_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "umap/env.h"
#include "umap/umap_types.h"

namespace rocksdb {
class FileSystem;
}

namespace umap::runtime {

class MemoryProbe;

struct RuntimeOptions {
  // The hard cap of the cache (resident blocks plus shadow buffers); 0: unset, the memory
  // budget decides (docs/configuration.md "Memory budget").
  size_t cache_bytes = 0;
  // Lazy sizing (docs/design.md "Cache sizing"): the cache starts at lazy_start_bytes and
  // grows on re-misses up to the hard cap and the budget. Off: a fixed cache of
  // cache_bytes (unset: the budget at creation).
  bool lazy_sizing = true;
  size_t lazy_start_bytes = size_t{8} << 20;
  size_t block_size = 4096;
  unsigned handler_threads = 2;
  unsigned writeback_threads = 1;
  std::string journal_dir;  // empty: no journal
  umap_policy policy = UMAP_POLICY_ATOMIC;
  umap_journal_mode journal_mode = UMAP_JOURNAL_DATA;
  // Data journal only: umsync returns once its transaction is committed (the journal's
  // fdatasync); the mapping's applier thread writes it to the file and fdatasyncs later
  // (JournalWriteBack), and the journal keeps it until that fdatasync (or uunmap's, a
  // checkpoint's) covers it. Crash-safe the same way (recovery replays it); the file alone,
  // read without recovery after a crash, may lack acknowledged umsyncs. docs/durability.md.
  bool defer_file_sync = false;
  size_t journal_staged_quota = size_t{1} << 30;
  // The most image bytes a umsync holds in memory at once, beside the cache. A umsync
  // captures its range's dirty blocks this much at a time: the relaxed policy commits and
  // applies each part; the atomic policy stages every part but the last in the journal (as
  // eviction stages a block) and commits them all with the last as one transaction, which
  // the journal writes in batches of this size (journal::JournalOptions::commit_batch_bytes)
  // and the apply reads back from it. Smaller: less memory, more journal writes for a large
  // umsync. At least one block.
  size_t umsync_chunk_bytes = size_t{1} << 20;
  umap_io_engine io_engine = UMAP_IO_AUTO;
  unsigned io_channels = 2;
  unsigned io_depth = 16;
  size_t io_max_bytes = 512 << 10;
  unsigned io_timeout_ms = 30000;
  unsigned io_retries = 3;
  bool io_direct = true;
  size_t prefetch_bytes = 2 << 20;
  // Who resolves faults: auto (= signal), signal (the faulting thread, via SIGBUS), handler
  // (handler threads reading userfaultfd messages). See runtime.h.
  umap_fault_mode fault_mode = UMAP_FAULT_AUTO;
  // Publication period of the stats segment umap-stat reads (runtime/stats/stats_segment.h);
  // 0: no segment.
  unsigned stats_period_ms = 250;
  // Coherence of mappings made without an explicit mode (umap(), umap_ex(), the preload
  // library); AUTO: by the mapping's prot (runtime/writeback/coherence.h).
  umap_coherence coherence = UMAP_COHERENCE_AUTO;
  Env* env = nullptr;  // null: Env::Default()
  // Carries every byte of the journal (journal::JournalOptions::fs), including the reopens
  // after a write error. Null: rocksdb::FileSystem::Default(). Fault injection passes a
  // faultinject::FaultFs here; there is no umap_config field for it.
  std::shared_ptr<rocksdb::FileSystem> journal_fs;
  // Where lazy sizing learns about memory (limits, usage, pressure). Null: the process's
  // memory cgroup and /proc (SystemMemoryProbe). Tests pass their own; there is no
  // umap_config field for it.
  std::shared_ptr<MemoryProbe> memory_probe;

  static RuntimeOptions FromConfig(const umap_config& c);
};

// Validates and derives the pool geometry. kInvalidArgument names the offending field.
struct Geometry {
  size_t block_size;
  // Resident cache blocks at most: the hard cap (cache_bytes, or all of RAM when unset;
  // the pool's limit keeps the cache below it).
  uint32_t cache_blocks;
  uint32_t shadow_blocks;  // shadow buffers for eviction write-back (part of cache_bytes)
  uint32_t start_blocks;   // lazy sizing's starting capacity
};
absl::StatusOr<Geometry> ComputeGeometry(const RuntimeOptions& options);

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_OPTIONS_H_
