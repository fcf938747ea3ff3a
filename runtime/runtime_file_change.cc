// Runtime: the program changes a mapped file through the file API (runtime.h, "the
// program changes a mapped file itself").
#include <algorithm>

#include "base/posix_error.h"
#include "base/status_macros.h"
#include "runtime/mapping.h"
#include "runtime/runtime.h"

namespace umap::runtime {

absl::Status Runtime::PrepareFileChange(void* addr, size_t length, bool for_read) {
  Operation op(this);
  RETURN_IF_ERROR(op.status());
  absl::ReaderMutexLock l(&mu_);
  ASSIGN_OR_RETURN(Mapping * m, Lookup(addr, std::max<size_t>(length, 1), /*exact=*/false));
  if (!m->writable()) return absl::OkStatus();
  const uint64_t a = reinterpret_cast<uint64_t>(addr) - reinterpret_cast<uint64_t>(m->base());
  const uint64_t first = a / geo_.block_size;
  const uint64_t end = (a + length + geo_.block_size - 1) / geo_.block_size;
  if (end > first) RETURN_IF_ERROR(m->Sync(first, end));
  // Deferred file sync: committed images may not be in the file yet.
  return for_read ? m->write_back()->Drain() : m->write_back()->Settle();
}

absl::StatusOr<uint64_t> Runtime::FileChanged(void* addr, size_t length, uint64_t file_size) {
  Operation op(this);
  RETURN_IF_ERROR(op.status());
  absl::ReaderMutexLock l(&mu_);
  ASSIGN_OR_RETURN(Mapping * m, Lookup(addr, std::max<size_t>(length, 1), /*exact=*/false));
  const uint64_t a = reinterpret_cast<uint64_t>(addr) - reinterpret_cast<uint64_t>(m->base());
  const uint64_t first = a / geo_.block_size;
  const uint64_t end = length == 0 ? first : (a + length + geo_.block_size - 1) / geo_.block_size;
  return m->FileChanged(first, end, file_size);
}

}  // namespace umap::runtime
