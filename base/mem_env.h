// An in-memory Env for unit tests: files live in a map, nothing touches the disk.
// Sync is a no-op that counts calls. Thread-safe.
#ifndef UMAP_BASE_MEM_ENV_H_
#define UMAP_BASE_MEM_ENV_H_

#include <memory>
#include <string>

#include "umap/env.h"

namespace umap {

// Returns a new in-memory Env. The caller owns it; files die with it.
std::unique_ptr<Env> NewMemEnv();

// Test helpers on an Env returned by NewMemEnv.
absl::Status MemEnvWriteFile(Env* env, const std::string& path, absl::string_view contents);
absl::StatusOr<std::string> MemEnvReadFile(Env* env, const std::string& path);

}  // namespace umap

#endif  // UMAP_BASE_MEM_ENV_H_
