// Runtime: the program changes a mapped file through the file API (runtime.h, "the
// program changes a mapped file itself").
#include <sys/mman.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "runtime/fault/fault_signal.h"
#include "runtime/fault/mapping.h"
#include "runtime/runtime.h"

namespace umap::runtime {

absl::Status Runtime::PrepareFileChange(void* addr, size_t length, bool for_read) {
  Operation op(this);
  RETURN_IF_ERROR(op.status());
  absl::ReaderMutexLock l(&mu_);
  ASSIGN_OR_RETURN(Mapping * m, Lookup(addr, std::max<size_t>(length, 1), /*exact=*/false));
  // A mapping that refuses its write-backs since another process changed the file
  // (Mapping::ForeignChange) has nothing it may write: the program's call goes on with the
  // file as it is.
  if (!m->writable() || !m->ForeignRefusal().ok()) return absl::OkStatus();
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

namespace umap::runtime {

absl::StatusOr<int> Runtime::ForeignChange(void* addr, uint64_t file_size) {
  Operation op(this);
  RETURN_IF_ERROR(op.status());
  absl::ReaderMutexLock l(&mu_);
  ASSIGN_OR_RETURN(Mapping * m, Lookup(addr, 1, /*exact=*/false));
  return static_cast<int>(m->ForeignChange(file_size));
}

absl::Status Runtime::HandOff(void* addr, size_t length) {
  Operation op(this);
  RETURN_IF_ERROR(op.status());
  Mapping* m;
  {
    absl::ReaderMutexLock l(&mu_);
    ASSIGN_OR_RETURN(m, Lookup(addr, length, /*exact=*/true));
  }
  const int fd = m->file()->fd();
  if (fd < 0) {
    return PosixError(EINVAL, absl::StrCat("umap: ", m->file()->name(),
                                           " has no descriptor the kernel could map"));
  }
  // From here faults on the mapping wait; those already being resolved finish first.
  m->set_handing_off(true);
  WaitForHandlers();
  // Every store into the file: after the capture every page is write-protected, so a store
  // now faults and waits; nothing can change the cache between this and the replacement.
  absl::Status s = m->Sync(0, m->blocks());
  if (s.ok() && m->writable()) s = m->write_back()->Settle();
  const int prot = m->writable() ? PROT_READ | PROT_WRITE : PROT_READ;
  if (s.ok() && ::mmap(m->base(), m->region_length(), prot, MAP_SHARED | MAP_FIXED, fd,
                       static_cast<off_t>(m->file_offset())) == MAP_FAILED) {
    s = PosixError(errno, absl::StrCat("umap: mapping ", m->file()->name(),
                                       " with the kernel in place of Umap"));
  }
  if (!s.ok()) {
    m->set_handing_off(false);
    WakeParkedThreads();
    if (!signal_mode()) uffd_->Wake(m->base(), m->region_length());
    return s;
  }
  {
    absl::MutexLock l(&mu_);
    const uint32_t i = handed_off_next_.fetch_add(1, std::memory_order_relaxed) % kHandedOff;
    handed_off_end_[i].store(0, std::memory_order_release);
    handed_off_base_[i].store(reinterpret_cast<uint64_t>(m->base()), std::memory_order_release);
    handed_off_end_[i].store(reinterpret_cast<uint64_t>(m->base()) + m->region_length(),
                             std::memory_order_release);
    slots_[m->slot()].store(nullptr, std::memory_order_release);
  }
  // The waiting threads retry on the kernel's mapping (signal mode: parked; handler mode:
  // blocked in the kernel on a range that is not Umap's any more).
  WakeParkedThreads();
  if (!signal_mode()) uffd_->Wake(m->base(), m->region_length());
  // Everything is in the file; what the journal keeps of the mapping goes with it.
  if (absl::Status c = m->writable() ? m->CloseWriteBack() : absl::OkStatus(); !c.ok()) {
    UMAP_LOG(kWarn, "handing ", m->file()->name(),
             " to the kernel: journal record not removed: ", c.ToString());
  }
  Destroy(m, /*keep_range=*/true);
  return absl::OkStatus();
}

}  // namespace umap::runtime
