// Test-only hook into the C API: give umap_ex()/umsync()/uunmap() a runtime built through
// the internal C++ API, so that a test or the chaos worker can choose what umap_config has
// no field for (a fault-injecting Env: RuntimeOptions::env). Never used by shipped code.
#ifndef UMAP_RUNTIME_UMAP_C_INTERNAL_H_
#define UMAP_RUNTIME_UMAP_C_INTERNAL_H_

#include <memory>

#include "runtime/runtime.h"
#include "umap/umap_types.h"

namespace umap::c_api {

// Wraps `rt` as a umap_runtime and registers it like umap_runtime_create does; release it
// with umap_runtime_destroy. Returns null (errno ENOMEM, EINVAL for a null rt) on failure.
umap_runtime* TEST_AdoptRuntime(std::unique_ptr<runtime::Runtime> rt);

}  // namespace umap::c_api

#endif  // UMAP_RUNTIME_UMAP_C_INTERNAL_H_
