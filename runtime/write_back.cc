#include "runtime/write_back.h"

#include <cstring>
#include <string>

#include "base/status_macros.h"

namespace umap::runtime {

absl::Status DirectWriteBack::Evicted(absl::Span<const BlockImage> images) {
  for (const BlockImage& image : images) {
    RETURN_IF_ERROR(file_->WriteAt(image.block * block_size_, image.data));
  }
  return absl::OkStatus();
}

absl::Status DirectWriteBack::Sync(absl::Span<const BlockImage> images, uint64_t, uint64_t) {
  // Images of a sync batch are consecutive in one buffer when their blocks are adjacent
  // (the capture appends them in order), so a run is one pwrite.
  size_t i = 0;
  while (i < images.size()) {
    size_t j = i + 1;
    const char* start = images[i].data.data();
    size_t len = images[i].data.size();
    while (j < images.size() && images[j].block == images[j - 1].block + 1 &&
           images[j].data.data() == start + len && images[j - 1].data.size() == block_size_) {
      len += images[j].data.size();
      ++j;
    }
    RETURN_IF_ERROR(file_->WriteAt(images[i].block * block_size_, absl::MakeConstSpan(start, len)));
    i = j;
  }
  return file_->Sync();
}

}  // namespace umap::runtime
