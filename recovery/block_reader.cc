#include "recovery/block_reader.h"

#include <algorithm>
#include <string>

#include "base/status_macros.h"

namespace umap::recovery {

absl::Status ReadBlocks(File* file, absl::Span<const BlockSpan> blocks,
                        absl::FunctionRef<void(size_t i, absl::string_view bytes)> fn) {
  constexpr uint64_t kMaxRead = 1 << 20;
  std::string buf;
  for (size_t first = 0; first < blocks.size();) {
    // The run: blocks that follow each other without a gap, up to kMaxRead.
    const uint64_t begin = blocks[first].offset;
    size_t end = first + 1;
    while (end < blocks.size() &&
           blocks[end].offset == blocks[end - 1].offset + blocks[end - 1].length &&
           blocks[end].offset + blocks[end].length - begin <= kMaxRead) {
      ++end;
    }
    buf.resize(blocks[end - 1].offset + blocks[end - 1].length - begin);
    ASSIGN_OR_RETURN(size_t got, file->ReadAt(begin, absl::MakeSpan(buf.data(), buf.size())));
    for (size_t i = first; i < end; ++i) {
      const uint64_t rel = blocks[i].offset - begin;
      const size_t n = rel >= got ? 0 : std::min<uint64_t>(blocks[i].length, got - rel);
      fn(i, absl::string_view(buf.data() + rel, n));
    }
    first = end;
  }
  return absl::OkStatus();
}

}  // namespace umap::recovery
