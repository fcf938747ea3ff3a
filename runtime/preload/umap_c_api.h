// The C API (include/umap/umap.h) as C++ code inside namespace umap can call it.
//
// umap.h cannot be included where namespace umap exists: one scope cannot hold both the
// function umap() and the namespace umap. runtime/umap_c.cc therefore defines the C
// functions inside namespace umap::c_api with C linkage; these declarations name the same
// functions in the same namespace (C linkage: one function whatever the namespace), so the
// shim calls exactly what a C program calls.
#ifndef UMAP_RUNTIME_PRELOAD_UMAP_C_API_H_
#define UMAP_RUNTIME_PRELOAD_UMAP_C_API_H_

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "umap/umap_types.h"

namespace umap::c_api {
extern "C" {

int umap_config_init(umap_config* config);
umap_runtime* umap_runtime_create(const umap_config* config);
int umap_runtime_destroy(umap_runtime* runtime);
void* umap_ex(umap_runtime* runtime, void* addr, size_t length, int prot, int flags, int fd,
              off_t offset);
int uunmap(void* addr, size_t length);
int umsync(void* addr, size_t length, int flags);
int umap_get_stats(umap_runtime* runtime, umap_stats* out);
int umap_handle_signal(int sig, void* info /* siginfo_t* */, void* ucontext);
int umap_quiesce(void);
int umap_resume(void);

}  // extern "C"

// Beyond the C API, for the shim only (runtime/umap_c.cc; Runtime::PrepareFileChange,
// Runtime::FileChanged, Runtime::HandOff): -1 with errno on failure. FileChanged returns
// how many blocks kept their bytes.
int PrepareFileChange(void* addr, size_t length, bool for_read);
int64_t FileChanged(void* addr, size_t length, uint64_t file_size);
// Runtime::ForeignChange: 0 own, 1 dropped, 2 refused.
int ForeignChange(void* addr, uint64_t file_size);
// Runtime::HandOff of the Umap mapping that starts at addr (map length `length`).
int HandOff(void* addr, size_t length);

}  // namespace umap::c_api

#endif  // UMAP_RUNTIME_PRELOAD_UMAP_C_API_H_
