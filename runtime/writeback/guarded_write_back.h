// GuardedWriteBack: a mapping's sink that writes only while its coherence allows: before
// every write-back (an eviction's, a umsync's) it asks Coherence::CheckHeld whether the
// partitioned-write locks still stand. When they do not, nothing is written or journaled:
// the call fails with that error and the caller keeps the blocks dirty (nothing is lost from
// memory), as with any failed write-back. A lost lock often has a larger cause, which the
// error then names instead: the node was cut off and its journal was taken over by the
// node the job restarted on (journal fenced: ESTALE, journal/journal_fence.h).
#ifndef UMAP_RUNTIME_WRITEBACK_GUARDED_WRITE_BACK_H_
#define UMAP_RUNTIME_WRITEBACK_GUARDED_WRITE_BACK_H_

#include <cerrno>
#include <memory>
#include <utility>

#include "base/posix_error.h"
#include "runtime/writeback/coherence.h"
#include "runtime/writeback/journal_write_back.h"
#include "runtime/writeback/write_back.h"

namespace umap::runtime {

class GuardedWriteBack final : public WriteBack {
 public:
  // `guard` must outlive this sink (both belong to the same mapping); `journal` (null when
  // the sink has none) too (the runtime's).
  GuardedWriteBack(std::unique_ptr<WriteBack> inner, Coherence* guard, JournalHandle* journal)
      : inner_(std::move(inner)), guard_(guard), journal_(journal) {}

  WriteBackResult Evicted(absl::Span<const BlockImage> images) override {
    if (absl::Status s = Check(); !s.ok()) return {s, false};
    return inner_->Evicted(images);
  }
  bool keeps_evicted() const override { return inner_->keeps_evicted(); }
  absl::StatusOr<bool> ReadEvicted(uint64_t block, absl::Span<char> dst) override {
    return inner_->ReadEvicted(block, dst);
  }
  WriteBackResult Sync(absl::Span<const BlockImage> images, uint64_t first,
                       uint64_t end) override {
    if (absl::Status s = Check(); !s.ok()) return {s, false};
    return inner_->Sync(images, first, end);
  }
  absl::Status Close() override { return inner_->Close(); }
  absl::Status Drain() override { return inner_->Drain(); }
  absl::Status Settle() override { return inner_->Settle(); }
  void StopBackground() override { inner_->StopBackground(); }
  // The writes are the inner sink's: it must see every I/O manager (a resume starts a new
  // one).
  void UseDirectWrites(File* file) override { inner_->UseDirectWrites(file); }
  void set_io(io::IoManager* io) override {
    WriteBack::set_io(io);
    inner_->set_io(io);
  }
  WriteBack* inner() { return inner_.get(); }
  // The inner sink goes first: its background writer may call Check until it stops.
  ~GuardedWriteBack() override { inner_.reset(); }

  // OK while the locks stand; else why not (the journal's takeover when that is the cause).
  absl::Status Check() {
    absl::Status s = guard_->CheckHeld();
    if (s.ok() || journal_ == nullptr) return s;
    // Asked only once the locks are gone, so it costs nothing while they stand.
    absl::Status owner = journal_->Run([](journal::Journal& j) { return j.CheckOwner(); });
    return ErrnoFromStatus(owner) == ESTALE ? owner : s;
  }

 private:
  std::unique_ptr<WriteBack> inner_;
  Coherence* const guard_;
  JournalHandle* const journal_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_WRITEBACK_GUARDED_WRITE_BACK_H_
