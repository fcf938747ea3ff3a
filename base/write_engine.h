// WriteEngine: the one path by which block images reach a data file, for the runtime's
// write-backs (umsync applies, eviction write-backs) and for recovery's replay alike.
//
// Pieces adjacent in the file merge into one vectored write of at most `max_io_bytes`; with
// io_uring up to `depth` of those are in flight at once (a DFS charges per request, so a
// write-back of scattered blocks must not be a row of round trips). Without io_uring or a
// descriptor each piece is one File::WriteAt, one at a time. Every write has a
// deadline of `timeout_us`: on expiry it is cancelled and, if it cannot be cancelled (a hung
// FUSE request), still waited for, because its buffer belongs to the caller. Short writes are
// completed synchronously; EINTR is retried by File::WriteAt.
//
// Thread safety: Write may be called from any number of threads at once; each call takes a
// ring of its own from a small pool.
#ifndef UMAP_BASE_WRITE_ENGINE_H_
#define UMAP_BASE_WRITE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "umap/env.h"

struct io_uring;

namespace umap {

// One piece of a write-back: `len` bytes from `data` go to byte `offset` of the file.
struct WritePiece {
  uint64_t offset;
  const char* data;
  size_t len;
};

struct WriteEngineOptions {
  bool use_uring = true;            // false: synchronous File::WriteAt only
  unsigned depth = 16;              // merged writes in flight per call (io_uring)
  size_t max_io_bytes = 512 << 10;  // largest merged write
  uint64_t timeout_us = 30'000'000;
};

struct WriteCounters {
  std::atomic<uint64_t> writes{0}, write_bytes{0}, write_timeouts{0};
};

class WriteEngine {
 public:
  // `env` supplies the clock; not owned, must outlive the engine.
  WriteEngine(const WriteEngineOptions& options, Env* env);
  ~WriteEngine();
  WriteEngine(const WriteEngine&) = delete;
  WriteEngine& operator=(const WriteEngine&) = delete;

  // Writes every piece to `file` and returns when all are done. No fdatasync.
  // `before_each` runs before each merged write is issued (crash points).
  // Errors: the first write error (its errno and the file offset in the message); ETIMEDOUT
  // when a write passed its deadline. Either way the caller must treat every piece as not
  // written (the journal keeps them): later pieces are not issued after an error.
  // REQUIRES: pieces sorted by offset, none overlapping, so no two writes of one block are
  // ever in flight together.
  // Concurrent only on io_uring, for files with a descriptor (fd() >= 0); otherwise one
  // merged write at a time. Either way the n-th `before_each` of a call runs when exactly
  // the n-1 earlier writes were issued: done (one at a time), or handed to the kernel and
  // possibly still in flight (concurrent; while crash points are armed each write is
  // submitted before the next `before_each`), so a crash point there kills the process
  // during concurrent writes.
  absl::Status Write(File* file, absl::Span<const WritePiece> pieces,
                     absl::FunctionRef<void()> before_each);

  const WriteEngineOptions& options() const { return options_; }
  WriteCounters& counters() { return counters_; }

 private:
  struct Ring;
  struct Call;
  std::unique_ptr<Ring> TakeRing();
  void ReturnRing(std::unique_ptr<Ring> ring);
  absl::Status WriteOneByOne(Call& call, absl::FunctionRef<void()> before_each);
  absl::Status WriteConcurrently(Call& call, Ring& ring, absl::FunctionRef<void()> before_each);
  // Hands the prepared writes to the kernel; a failed submit is the call's error.
  void SubmitPrepared(Call& call, io_uring* ring);
  void CancelExpired(Call& call, io_uring* ring);
  void Reap(Call& call, io_uring* ring);

  const WriteEngineOptions options_;
  Env* const env_;
  WriteCounters counters_;
  absl::Mutex rings_mu_;
  std::vector<std::unique_ptr<Ring>> rings_ ABSL_GUARDED_BY(rings_mu_);
};

}  // namespace umap

#endif  // UMAP_BASE_WRITE_ENGINE_H_
