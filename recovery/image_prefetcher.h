// ImagePrefetcher: the one read-ahead of recovery. It streams, in plan order (LSN order,
// block order), the images a file's replay writes, the newest data-mode version of each
// block range, out of the journal (journal/pending_reader.h: ordered passes, every image
// checked against its CRC as it is read) into a few fixed buffers. The replay writes one
// buffer while the next ones fill, so reading the backlog overlaps writing it, and memory
// stays at `buffers` x `batch_bytes` whatever the size of a transaction.
//
// The plan is cut up front into segments of at most one buffer (the image lengths are in
// the headers): one segment per replay round (recovery/replay_plan.h), or, for an oversize
// round, as many as its images need; the first segment of an oversize round reads and
// checks the whole round before it fills its buffer. So when a batch reaches the replay,
// every image of its round has been checked, and a damaged one is reported in a batch that
// holds nothing of that round. `readers` threads read alternate segments, each with a reader of its
// own, so that copying and checking the images is not bound to one core. Buffers go to
// segments in segment order and batches come out of Next() in segment order: the stream
// the caller sees is the plan order, whatever the number of readers.
//
// Thread safety: Next() and Done() from one consumer thread. The destructor stops the
// reading threads and waits for them.
#ifndef UMAP_RECOVERY_IMAGE_PREFETCHER_H_
#define UMAP_RECOVERY_IMAGE_PREFETCHER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <new>
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
  // Reading stopped at an image of plan transaction `error_txn`: the batch holds no image of
  // that transaction's round, and txns_done is the round's first transaction; kDataLoss for
  // a damaged record. No batch follows.
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
    size_t readers = 2;             // reading threads; buffers = readers + 1
    size_t readahead_bytes = 4 << 20;
    // Read and check an oversize round whole before the first of its batches (a replay
    // that writes; a check that writes nothing reads each image once).
    bool check_oversize_rounds = true;
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
  // Time the reading threads spent reading and copying (not waiting for a buffer), summed.
  uint64_t busy_micros() const { return busy_micros_.load(std::memory_order_relaxed); }

 private:
  // Where a segment starts in the plan (entry `entry` of transaction `txn`), what it holds,
  // and what the batch made of it reports.
  struct Segment {
    uint64_t txn = 0, entry = 0;
    uint64_t txns_done = 0;
    uint64_t round = 0;
    bool check_round = false;  // first segment of an oversize round
  };
  void CutSegments(size_t capacity);
  // Reads and checks every image the replay writes of `round`, with a reader of its own; on
  // an error, *bad_txn is the plan transaction whose image failed.
  absl::Status CheckRound(uint64_t round, uint64_t* bad_txn);
  void Read(size_t first_segment, journal::PendingReader* reader);
  // Fills `b` with segment `s`.
  void Fill(size_t s, journal::PendingReader& reader, ImageBatch* b);

  journal::Journal& journal_;
  const ReplayPlan& plan_;
  Env* const env_;
  const Options options_;
  std::vector<Segment> segments_;  // const once the threads run
  std::vector<std::unique_ptr<journal::PendingReader>> readers_;
  std::vector<std::unique_ptr<ImageBatch>> batches_;
  std::atomic<uint64_t> busy_micros_{0};

  absl::Mutex mu_;
  std::deque<ImageBatch*> free_ ABSL_GUARDED_BY(mu_);
  std::vector<ImageBatch*> ready_ ABSL_GUARDED_BY(mu_);  // by segment
  size_t next_buffer_ ABSL_GUARDED_BY(mu_) = 0;  // the segment that gets the next buffer
  size_t next_out_ ABSL_GUARDED_BY(mu_) = 0;     // the segment Next() returns next
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: started once everything above exists
};

}  // namespace umap::recovery

#endif  // UMAP_RECOVERY_IMAGE_PREFETCHER_H_
