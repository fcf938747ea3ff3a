// DirectWriter: block images into a data file without passing through the page cache.
//
// A buffered write copies the image into the page cache, where it counts against the
// writer's memory cgroup until the kernel writes it back, and on ext4 (as on most local file
// systems) each buffered write holds the inode's lock exclusively, which stalls every
// O_DIRECT read of the same file meanwhile: a mapping's misses wait behind its own
// write-backs. An O_DIRECT overwrite of allocated blocks takes that lock shared.
//
// DirectWriter sends each piece whose offset and length are whole pages through a second,
// O_DIRECT description of the file (File::OpenDirectWriter). A piece whose memory is not
// page-aligned is copied into an aligned bounce buffer first. The other pieces (the partial
// block at the end of a file) go through the file itself, that is the page cache. A file
// that has no direct writer, or whose file system refuses a direct write (EINVAL), gets
// every piece through the page cache from then on; pieces already written directly are
// harmlessly written again. An fdatasync of either description makes both kinds durable.
//
// Thread safety: Write may run in any number of threads at once.
#ifndef UMAP_BASE_DIRECT_WRITER_H_
#define UMAP_BASE_DIRECT_WRITER_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <new>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "base/write_engine.h"
#include "umap/env.h"

namespace umap {

// An allocator whose blocks start on a page boundary, so that a buffer of images (each a
// whole number of pages) can be written with O_DIRECT as it is.
template <typename T>
struct PageAlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{4096};
  PageAlignedAllocator() = default;
  template <typename U>
  PageAlignedAllocator(const PageAlignedAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t n) { ::operator delete(p, n * sizeof(T), kAlign); }
  template <typename U>
  bool operator==(const PageAlignedAllocator<U>&) const { return true; }
};

class DirectWriter {
 public:
  // Writes pieces (sorted by offset, none overlapping) to the file it is given: the file
  // itself or the direct description. Runs more than once per DirectWriter::Write call.
  using WriteFn = absl::FunctionRef<absl::Status(File*, absl::Span<const WritePiece>)>;

  static constexpr size_t kAlign = 4096;
  // Bytes copied into one bounce buffer at most; a larger unaligned remainder takes rounds.
  static constexpr size_t kBounceBytes = size_t{4} << 20;

  // `file` must outlive this. Opens its direct description now; when it has none, every
  // write goes through `file`.
  explicit DirectWriter(File* file);
  ~DirectWriter();

  // Writes every piece, each exactly once through one of the two descriptions (twice after
  // a refused direct write). The first error is returned (as from `write`); later pieces
  // are not written then.
  absl::Status Write(absl::Span<const WritePiece> pieces, WriteFn write);

  // True while pieces can still go through O_DIRECT.
  bool direct() const { return use_direct_.load(std::memory_order_relaxed); }
  File* file() const { return file_; }

 private:
  absl::Status WriteDirect(absl::Span<const WritePiece> pieces, WriteFn write);
  // A bounce buffer: mapped for a call, or the one kept from an earlier call.
  struct Bounce {
    void* mem = nullptr;
    size_t cap = 0;
  };
  absl::StatusOr<Bounce> TakeBounce(size_t cap);
  void ReturnBounce(Bounce b);
  // The largest bounce buffer kept between calls. A mapping's writer (a deferred apply
  // round, a umsync) takes one per call: mapping and unmapping it each time cost a TLB
  // shootdown of every CPU running the process's other threads (the syncing threads).
  static constexpr size_t kKeptBounceBytes = size_t{1} << 20;

  File* const file_;
  std::unique_ptr<File> direct_;
  std::atomic<bool> use_direct_{false};
  absl::Mutex bounce_mu_;
  Bounce kept_ ABSL_GUARDED_BY(bounce_mu_);  // at most kKeptBounceBytes; none at first
};

}  // namespace umap

#endif  // UMAP_BASE_DIRECT_WRITER_H_
