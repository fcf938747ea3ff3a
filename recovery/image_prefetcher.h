// ImagePrefetcher: the one read-ahead of recovery. On a thread of its own it streams, in plan
// order (LSN order, block order), the images a file's replay writes, the newest data-mode
// version of each block range, out of the journal (journal/pending_reader.h: one ordered
// pass, every image checked against its CRC as it is read) into a few fixed buffers. The
// replay writes one buffer while the next fills, so reading the backlog overlaps writing it,
// and memory stays at `batches` x `batch_bytes` whatever the size of a transaction.
//
// Thread safety: Next() and Done() from one consumer thread. The destructor stops the
// reading thread and waits for it.
#ifndef UMAP_RECOVERY_IMAGE_PREFETCHER_H_
#define UMAP_RECOVERY_IMAGE_PREFETCHER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "journal/journal.h"
#include "recovery/replay_plan.h"
#include "umap/env.h"

namespace umap::recovery {

// A run of images, back to back in one buffer, in plan order.
struct ImageBatch {
  struct Piece {
    uint64_t offset = 0;  // in the file
    uint64_t at = 0;      // in the buffer
    uint64_t txn = 0;     // plan transaction
    uint32_t length = 0;
    uint32_t crc = 0;
  };
  std::vector<Piece> pieces;
  uint64_t bytes = 0;      // image bytes in the buffer
  // Every image of plan transactions [0, txns_done) is in this batch or an earlier one.
  uint64_t txns_done = 0;
  bool last = false;  // no batch follows
  // Reading stopped at an image of plan transaction `error_txn`: the batch holds the images
  // before it; kDataLoss for a damaged record.
  absl::Status error;
  uint64_t error_txn = 0;

  const char* data(const Piece& p) const { return buffer.get() + p.at; }

  static constexpr size_t kAlign = 4096;
  struct Free {
    void operator()(char* p) const { ::operator delete(p, std::align_val_t{kAlign}); }
  };
  std::unique_ptr<char, Free> buffer;  // kAlign-aligned
  size_t capacity = 0;
};

class ImagePrefetcher {
 public:
  struct Options {
    size_t batch_bytes = 16 << 20;  // each buffer; raised to the plan's largest image
    size_t batches = 3;             // buffers: reading runs up to batches - 1 ahead
    size_t readahead_bytes = 4 << 20;
  };

  // Starts reading. `journal`, `plan` and `env` must outlive the prefetcher.
  ImagePrefetcher(journal::Journal& journal, const ReplayPlan& plan, Env* env,
                  const Options& options);
  ~ImagePrefetcher();
  ImagePrefetcher(const ImagePrefetcher&) = delete;
  ImagePrefetcher& operator=(const ImagePrefetcher&) = delete;

  // The next batch, waiting for it: never null; the last one has `last` set.
  ImageBatch* Next();
  // Gives a batch from Next() back; its buffer is filled again.
  void Done(ImageBatch* batch);
  // Time the reading thread spent reading and copying (not waiting for a free buffer).
  uint64_t busy_micros() const { return busy_micros_.load(std::memory_order_relaxed); }

 private:
  void Loop();
  // Fills `b` from the current position; returns false when the stream has ended.
  bool Fill(journal::PendingReader& reader, ImageBatch* b);

  const ReplayPlan& plan_;
  Env* const env_;
  const Options options_;
  std::unique_ptr<journal::PendingReader> reader_;
  std::vector<std::unique_ptr<ImageBatch>> batches_;
  std::atomic<uint64_t> busy_micros_{0};
  // Reading thread only: the next entry to stream.
  uint64_t txn_ = 0, entry_ = 0;

  absl::Mutex mu_;
  std::deque<ImageBatch*> free_ ABSL_GUARDED_BY(mu_);
  std::deque<ImageBatch*> ready_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace umap::recovery

#endif  // UMAP_RECOVERY_IMAGE_PREFETCHER_H_
