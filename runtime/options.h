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

struct RuntimeOptions {
  size_t cache_bytes = size_t{1} << 30;
  size_t block_size = 4096;
  unsigned handler_threads = 2;
  unsigned writeback_threads = 1;
  std::string journal_dir;  // empty: no journal
  umap_policy policy = UMAP_POLICY_ATOMIC;
  umap_journal_mode journal_mode = UMAP_JOURNAL_DATA;
  size_t journal_staged_quota = size_t{1} << 30;
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
  // Publication period of the stats segment umap-stat reads (runtime/stats_segment.h);
  // 0: no segment.
  unsigned stats_period_ms = 250;
  // Coherence of mappings made without an explicit mode (umap(), umap_ex(), the preload
  // library); AUTO: by the mapping's prot (runtime/coherence.h).
  umap_coherence coherence = UMAP_COHERENCE_AUTO;
  Env* env = nullptr;  // null: Env::Default()
  // Carries every byte of the journal (journal::JournalOptions::fs), including the reopens
  // after a write error. Null: rocksdb::FileSystem::Default(). Fault injection passes a
  // faultinject::FaultFs here; there is no umap_config field for it.
  std::shared_ptr<rocksdb::FileSystem> journal_fs;

  static RuntimeOptions FromConfig(const umap_config& c);
};

// Validates and derives the pool geometry. kInvalidArgument names the offending field.
struct Geometry {
  size_t block_size;
  uint32_t cache_blocks;   // resident cache blocks
  uint32_t shadow_blocks;  // shadow buffers for eviction write-back (part of cache_bytes)
};
absl::StatusOr<Geometry> ComputeGeometry(const RuntimeOptions& options);

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_OPTIONS_H_
