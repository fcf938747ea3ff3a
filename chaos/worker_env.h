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
  uint64_t cache_bytes = 0;
  uint64_t block_size = 4096;
  std::string fault = "none";  // none, eio, torn, timeout
  uint64_t fault_seed = 1;
  uint64_t fault_one_in = 20;
  std::string file_name;       // faults hit only files whose path contains this
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

}  // namespace chaos_worker

#endif  // UMAP_CHAOS_WORKER_ENV_H_
