// The reference a replay is measured against: the job fio runs as
//   fio --rw=write --bs=1M --direct=1 --ioengine=io_uring --iodepth=16 --end_fsync=1
// on an existing file: `size` bytes written sequentially over it with O_DIRECT in 1 MiB
// writes, 16 in flight, then one fdatasync.
#ifndef UMAP_TOOLS_DIRECT_WRITE_REFERENCE_H_
#define UMAP_TOOLS_DIRECT_WRITE_REFERENCE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace umap::tools {

// The wall time in microseconds. REQUIRES: size a multiple of 4096.
absl::StatusOr<uint64_t> DirectWriteReference(const std::string& path, uint64_t size);

}  // namespace umap::tools

#endif  // UMAP_TOOLS_DIRECT_WRITE_REFERENCE_H_
