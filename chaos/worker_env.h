// The part of umap-chaos-worker that sees namespace umap (the internal runtime and FaultEnv).
// worker_main.cc includes umap/umap.h for the public C API, and C++ cannot have both the
// function umap() and namespace umap in one translation unit, so the two are split here.
#ifndef UMAP_CHAOS_WORKER_ENV_H_
#define UMAP_CHAOS_WORKER_ENV_H_

#include <cstdint>
#include <string>

#include "umap/umap_types.h"

namespace chaos_worker {

struct RuntimeSpec {
  std::string journal_dir;
  bool relaxed = false;
  bool defer_file_sync = false;  // RuntimeOptions::defer_file_sync
  uint64_t umsync_chunk_bytes = 0;  // RuntimeOptions::umsync_chunk_bytes; 0: the default
  uint64_t cache_bytes = 0;
  uint64_t block_size = 4096;
  std::string fault = "none";  // none, eio, torn, timeout
  uint64_t fault_seed = 1;
  uint64_t fault_one_in = 20;
  std::string file_name;  // faults hit only files whose path contains this
  // Faults of the journal's storage (faultinject::FaultFs as RuntimeOptions::journal_fs):
  // none; eio (IOError on 1 in journal_one_in WAL appends and syncs, and on every flush or
  // compaction write that draws it); enospc (NoSpace on 1 in journal_one_in appends and
  // syncs of every journal file; sticky: once fired, every later call fails until healed).
  std::string journal_fault = "none";
  uint64_t journal_one_in = 20;
  bool journal_sticky = false;
  // Arm the journal's faults when the runtime is created (they then hit the journal's open
  // and the map-time replay); otherwise ArmJournalFaults() arms them later.
  bool journal_fault_at_open = false;
  // Journal faults hit the WAL only (its appends, syncs and creations, all made by the
  // committing thread), not the tables RocksDB's background threads write: the faults
  // that fire are then a function of the seed (umap-chaos --replayable).
  bool journal_wal_only = false;
};

// Builds the runtime over a FaultEnv (umap_config has no Env field, so through the internal
// C++ API: runtime::Runtime::Create with RuntimeOptions::env) and registers it with the C
// API (c_api::TEST_AdoptRuntime). Null with *error set on failure. One per process.
umap_runtime* CreateRuntime(const RuntimeSpec& spec, std::string* error);
// The next sync of the data file blocks for `ms`, then fails with ETIMEDOUT (timeout_error)
// or proceeds.
bool ArmSyncStall(uint64_t ms, bool timeout_error, std::string* error);
// Freezes the FaultEnv and rolls the data file back to what survives a power cut of its
// storage (unsynced writes torn at sector granularity).
void PowerCutDataFile(uint64_t seed);

// From a thread of its own: once a data-file call is stalled (the armed sync stall),
// freezes the journal's storage (nothing more reaches it: a kill at that instant), cuts
// the data file's power if asked (PowerCutDataFile), and SIGKILLs the process. A death
// inside the hang, at an instant the run's own events decide.
void DieInStall(uint64_t seed, bool power_cut);
// The same for the journal's files: frozen (writes in flight finish first), every file cut
// back to its last synced size or torn at a sector of its unsynced tail (garble: the sector
// after the cut holds random bytes), the bytes of syncs that lost them zeroed, files no
// directory fsync covered deleted.
void PowerCutJournal(uint64_t seed, bool garble);
// Journal bytes that failed syncs lost (FsFault::LosesData) and the power cut then zeroed.
uint64_t JournalBytesZeroed();
// Arms the journal faults of the spec given to CreateRuntime (the disk fills up, or starts
// failing, while the job runs). False with *error set if a rule was refused.
bool ArmJournalFaults(std::string* error);
// Ends every journal fault rule ("space came back", "the disk works again").
void HealJournal();
// Injected failures so far: data file (FaultEnv) and journal (FaultFs).
uint64_t DataFaultsFired();
uint64_t JournalFaultsFired();

}  // namespace chaos_worker

#endif  // UMAP_CHAOS_WORKER_ENV_H_
