// ReadBlocks: reads file blocks for the checks that compare what a file holds with the
// journal's CRCs (intent classification, verify, read-back after replay), in runs of
// adjacent blocks of at most 1 MiB, so that a check costs few system calls.
#ifndef UMAP_RECOVERY_BLOCK_READER_H_
#define UMAP_RECOVERY_BLOCK_READER_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "umap/env.h"

namespace umap::recovery {

struct BlockSpan {
  uint64_t offset = 0;
  uint32_t length = 0;
};

// Calls fn(i, bytes) for every blocks[i], in order, with the bytes the file holds there
// (fewer than length where the file ends early). REQUIRES: blocks sorted by offset (ranges
// that overlap are read separately). Returns the first read error; blocks after it are not
// reported.
absl::Status ReadBlocks(File* file, absl::Span<const BlockSpan> blocks,
                        absl::FunctionRef<void(size_t i, absl::string_view bytes)> fn);

}  // namespace umap::recovery

#endif  // UMAP_RECOVERY_BLOCK_READER_H_
