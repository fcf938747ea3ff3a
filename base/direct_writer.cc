#include "base/direct_writer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/status_macros.h"

namespace umap {

namespace {

bool WholePages(const WritePiece& p) {
  return p.len > 0 && p.offset % DirectWriter::kAlign == 0 && p.len % DirectWriter::kAlign == 0;
}

size_t RoundUp(size_t n) { return (n + DirectWriter::kAlign - 1) / DirectWriter::kAlign * DirectWriter::kAlign; }

bool AlignedMemory(const WritePiece& p) {
  return reinterpret_cast<uintptr_t>(p.data) % DirectWriter::kAlign == 0;
}

}  // namespace

DirectWriter::DirectWriter(File* file) : file_(file) {
  absl::StatusOr<std::unique_ptr<File>> direct = file->OpenDirectWriter();
  if (!direct.ok()) return;  // no direct I/O for this file: everything buffered
  direct_ = *std::move(direct);
  use_direct_.store(true, std::memory_order_relaxed);
}

DirectWriter::~DirectWriter() {
  if (kept_.mem != nullptr) ::munmap(kept_.mem, kept_.cap);
}

absl::StatusOr<DirectWriter::Bounce> DirectWriter::TakeBounce(size_t cap) {
  {
    absl::MutexLock l(&bounce_mu_);
    if (kept_.mem != nullptr && kept_.cap >= cap) return std::exchange(kept_, Bounce{});
  }
  // From mmap, not malloc: a freed buffer this size would stay in the malloc arena of
  // whichever thread wrote, one per syncing thread.
  void* mem = ::mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    return PosixError(errno, absl::StrCat("mmap of a ", cap,
                                          "-byte bounce buffer for O_DIRECT "
                                          "writes to ",
                                          file_->name()));
  }
  return Bounce{mem, cap};
}

void DirectWriter::ReturnBounce(Bounce b) {
  if (b.cap <= kKeptBounceBytes) {
    absl::MutexLock l(&bounce_mu_);
    if (kept_.cap < b.cap) std::swap(kept_, b);  // keep the larger one
  }
  if (b.mem != nullptr) ::munmap(b.mem, b.cap);
}

absl::Status DirectWriter::Write(absl::Span<const WritePiece> pieces, WriteFn write) {
  if (pieces.empty()) return absl::OkStatus();
  if (!direct()) return write(file_, pieces);
  std::vector<WritePiece> whole, partial;
  whole.reserve(pieces.size());
  for (const WritePiece& p : pieces) (WholePages(p) ? whole : partial).push_back(p);
  absl::Status s = WriteDirect(whole, write);
  if (ErrnoFromStatus(s) == EINVAL) {
    // The file system takes no direct writes of this shape: everything through the page
    // cache, now and from now on (rewriting what did land is harmless: same bytes).
    if (use_direct_.exchange(false, std::memory_order_relaxed)) {
      UMAP_LOG(kInfo, file_->name(), ": direct writes refused (", s.message(),
               "); writing through the page cache");
    }
    return write(file_, pieces);
  }
  RETURN_IF_ERROR(s);
  return partial.empty() ? absl::OkStatus() : write(file_, partial);
}

absl::Status DirectWriter::WriteDirect(absl::Span<const WritePiece> pieces, WriteFn write) {
  if (pieces.empty()) return absl::OkStatus();
  size_t unaligned = 0;
  for (const WritePiece& p : pieces) unaligned += AlignedMemory(p) ? 0 : p.len;
  if (unaligned == 0) return write(direct_.get(), pieces);
  // Pieces from memory that is not page-aligned are copied into a bounce buffer, a
  // bounded amount at a time; each round writes the pieces before it in file order.
  size_t largest = 0;
  for (const WritePiece& p : pieces) largest = std::max(largest, AlignedMemory(p) ? 0 : p.len);
  const size_t cap = RoundUp(std::max(largest, std::min(unaligned, kBounceBytes)));
  ASSIGN_OR_RETURN(Bounce b, TakeBounce(cap));
  absl::Cleanup give_back = [this, b] { ReturnBounce(b); };
  char* const bounce = static_cast<char*>(b.mem);
  std::vector<WritePiece> round;
  round.reserve(pieces.size());
  size_t used = 0;
  for (const WritePiece& p : pieces) {
    if (!AlignedMemory(p)) {
      if (used + p.len > cap) {
        RETURN_IF_ERROR(write(direct_.get(), round));
        round.clear();
        used = 0;
      }
      std::memcpy(bounce + used, p.data, p.len);
      round.push_back({p.offset, bounce + used, p.len});
      used += p.len;
    } else {
      round.push_back(p);
    }
  }
  return write(direct_.get(), round);
}

}  // namespace umap
