// Internal hooks into the C API's process-wide state. TEST_AdoptRuntime: give
// umap_ex()/umsync()/uunmap() a runtime built through the internal C++ API, so that a test
// or the chaos worker can choose what umap_config has no field for (a fault-injecting Env:
// RuntimeOptions::env); never used by shipped code.
#ifndef UMAP_RUNTIME_UMAP_C_INTERNAL_H_
#define UMAP_RUNTIME_UMAP_C_INTERNAL_H_

#include <memory>

#include "runtime/runtime.h"
#include "umap/umap_types.h"

namespace umap::c_api {

// Wraps `rt` as a umap_runtime and registers it like umap_runtime_create does; release it
// with umap_runtime_destroy. Returns null (errno ENOMEM, EINVAL for a null rt) on failure.
umap_runtime* TEST_AdoptRuntime(std::unique_ptr<runtime::Runtime> rt);

// fork(): the runtime's pthread_atfork handlers hold the C API's locks across the fork, so
// that the child finds them free; in the child the parent's runtimes are forgotten (their
// threads do not exist there), so that the C API never reaches them and a runtime of the
// child's own can be created.
// Checkpoints: called once every runtime quiesced (umap_quiesce), and before they resume
// (umap_resume): the LD_PRELOAD shim drops and takes again locks of its own, which CRIU
// would refuse to dump.
struct CheckpointHooks {
  void (*after_quiesce)() = nullptr;
  void (*before_resume)() = nullptr;
};
void SetCheckpointHooks(const CheckpointHooks& hooks);

void LockForFork();
void UnlockAfterFork(bool child);

}  // namespace umap::c_api

#endif  // UMAP_RUNTIME_UMAP_C_INTERNAL_H_
