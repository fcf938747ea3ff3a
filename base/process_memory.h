// This process's memory as the kernel counts it.
#ifndef UMAP_BASE_PROCESS_MEMORY_H_
#define UMAP_BASE_PROCESS_MEMORY_H_

#include <cstdint>

namespace umap {

// The peak resident set of this process since it started or since the last reset
// (/proc/self/status VmHWM), in bytes; 0 if unreadable. Unlike getrusage's ru_maxrss, it
// counts this program's memory only: a process started by fork or posix_spawn inherits
// into ru_maxrss the peak of its parent's memory at the exec.
uint64_t PeakRssBytes();

}  // namespace umap

#endif  // UMAP_BASE_PROCESS_MEMORY_H_
