// FileReplay: replays one file's plan (recovery/replay_plan.h) into the file. The images come
// from an ImagePrefetcher in plan order, a buffer at a time; each buffer goes to the file
// through the WriteEngine (base/write_engine.h: adjacent images as one write, several writes
// in flight, each with a deadline), and every checkpoint_bytes the file is fdatasync'ed and
// the transactions whose newest images are all written are marked applied. Writes that are
// whole 4 KiB pages go through the file's O_DIRECT handle when it has one (no copy into the
// page cache, no write-back at the fdatasync: a disk's own sequential write), the rest
// (a short last block, blocks smaller than a page) through the page cache. In the check
// modes (dry run, verify) the images are read and checked and nothing is written.
//
// Errors are recorded in the reports of the file's mappings (Refuse) and returned:
//   a write or fdatasync error: kIoError, nothing marked since the last checkpoint;
//   a damaged image (kDataLoss from the reader): kRefused, Problem::kCorruptRecord, after a
//     checkpoint of the rounds before its round (nothing of its round is written);
//   MarkApplied failing: kIoError, Problem::kJournal.
//
// Thread safety: one FileReplay per file; replays of different files may run at once
// (they share the ReplayCounters, the journal and the engine, all thread-safe).
#ifndef UMAP_RECOVERY_FILE_REPLAY_H_
#define UMAP_RECOVERY_FILE_REPLAY_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "base/direct_writer.h"
#include "base/write_engine.h"
#include "journal/journal.h"
#include "recovery/file_group.h"
#include "recovery/image_prefetcher.h"
#include "recovery/recovery.h"

namespace umap::recovery {

// Progress and time of all the files being replayed, read by the progress reporter.
struct ReplayCounters {
  std::atomic<uint64_t> bytes_done{0};  // images written (or, checking, read and checked)
  std::atomic<int> syncing{0};          // files in a checkpoint's fdatasync now
  std::atomic<uint64_t> read_us{0}, write_us{0}, sync_us{0}, mark_us{0};
};

class FileReplay {
 public:
  struct Context {
    journal::Journal* journal = nullptr;
    WriteEngine* engine = nullptr;  // kReplay
    Env* env = nullptr;
    const RecoverOptions* options = nullptr;
    size_t batch_bytes = 0;         // each of the prefetcher's buffers
    ReplayCounters* counters = nullptr;
  };

  // REQUIRES: g->plan finished, g->file open. Both must outlive the FileReplay.
  FileReplay(const Context& context, FileGroup* g);
  absl::Status Run();

 private:
  bool writing() const { return context_.options->mode == Mode::kReplay; }
  absl::Status Write(const ImageBatch& b);
  // Writes `pieces` (sorted, not overlapping) through direct_: whole pages with O_DIRECT
  // where the file system takes it, the rest through the page cache.
  absl::Status WritePieces(std::vector<WritePiece> pieces);
  // fdatasync (when anything was written since the last one), read-back, then MarkApplied
  // of the transactions whose newest images lie in plan transactions [0, txns_done).
  absl::Status Checkpoint(uint64_t txns_done);
  absl::Status ReadBack();
  absl::Status Mark(uint64_t txns_done);
  // Stops at a read error of the prefetcher: checkpoints what was written, then records it.
  absl::Status StopAt(const absl::Status& error, uint64_t error_txn, uint64_t txns_done);
  MappingReport& ReportOf(uint64_t txn) {
    return *g_->members[g_->plan.txns()[txn].member]->report;
  }

  const Context context_;
  FileGroup* const g_;
  std::vector<uint64_t> by_cover_;  // plan transactions, in the order they become markable
  size_t marked_ = 0;               // by_cover_[0, marked_) are marked applied
  std::unique_ptr<DirectWriter> direct_;  // g_->file's writer (when writing)
  bool unsynced_ = false;           // written since the last fdatasync
  std::vector<ImageBatch::Piece> written_;  // since the last fdatasync (verify_after_replay)
};

}  // namespace umap::recovery

#endif  // UMAP_RECOVERY_FILE_REPLAY_H_
