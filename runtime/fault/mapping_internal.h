// What the Mapping's source files (mapping*.cc) share beside mapping.h: small helpers.
// Internal to them.
#ifndef UMAP_RUNTIME_FAULT_MAPPING_INTERNAL_H_
#define UMAP_RUNTIME_FAULT_MAPPING_INTERNAL_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "runtime/fault/cache_entry_table.h"

namespace umap::runtime::mapping_internal {

// An address as a log line prints it.
inline absl::Hex AddrHex(const void* p) {
  return absl::Hex(reinterpret_cast<uintptr_t>(p), absl::kZeroPad16);
}

inline bool IsFilled(CacheEntryTable::Entry e) { return e.present() || e.poisoned(); }

}  // namespace umap::runtime::mapping_internal

#endif  // UMAP_RUNTIME_FAULT_MAPPING_INTERNAL_H_
