#include "runtime/writeback/journal_write_back.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/crash_point.h"
#include "base/log.h"
#include "base/mutation.h"
#include "base/posix_error.h"
#include "base/status_macros.h"

namespace umap::runtime {

absl::StatusOr<std::unique_ptr<JournalWriteBack>> JournalWriteBack::Create(
    JournalHandle* journal, File* file, uint32_t block_size, journal::Policy policy,
    journal::Contents contents, bool defer_file_sync) {
  ASSIGN_OR_RETURN(FileIdentity id, file->Identify());
  if (id.birth == FileBirth::kUnknown) {
    // No birth time on this file system: an id of the file's own, so that a file created
    // later at the same inode number is not taken for it. Where none can be set (no
    // extended attributes, a read-only attribute space) the device and inode must do.
    if (absl::Status s = file->StampIdentity(); s.ok()) {
      ASSIGN_OR_RETURN(id, file->Identify());
    } else {
      UMAP_LOG(kInfo, "journal: ", file->name(), " has no birth time and no id (", s.message(),
               "): recovery tells it from a file created later at its inode number by "
               "device, inode and size only");
    }
  }
  ASSIGN_OR_RETURN(uint64_t mapping_id, journal->Run([&](journal::Journal& j) {
    return j.RegisterMapping(id, block_size, policy, contents);
  }));
  return std::unique_ptr<JournalWriteBack>(
      new JournalWriteBack(journal, file, block_size, policy, mapping_id,
                           defer_file_sync && contents == journal::Contents::kData));
}

JournalWriteBack::JournalWriteBack(JournalHandle* journal, File* file, uint32_t block_size,
                                   journal::Policy policy, uint64_t mapping_id,
                                   bool defer_file_sync)
    : journal_(journal),
      file_(file),
      block_size_(block_size),
      policy_(policy),
      mapping_id_(mapping_id),
      defer_file_sync_(defer_file_sync) {}

void JournalWriteBack::StartApplier() {
  if (defer_file_sync_ && !applier_.joinable()) {
    applier_ = std::thread([this] { ApplierLoop(); });
  }
}

void JournalWriteBack::StopBackground() {
  std::thread applier;
  {
    absl::MutexLock l(&apply_mu_);
    if (!applier_.joinable()) return;
    stop_ = true;
    apply_cv_.SignalAll();
    applier = std::move(applier_);
  }
  applier.join();
  absl::MutexLock l(&apply_mu_);
  stop_ = false;
}

JournalWriteBack::~JournalWriteBack() {
  // Whatever the applier did not write stays committed in the journal: the next map of the
  // file (or umap-recover) replays it.
  StopBackground();
}

WriteBackResult JournalWriteBack::Evicted(absl::Span<const BlockImage> images) {
  if (policy_ == journal::Policy::kAtomic) {
    absl::MutexLock l(&apply_mu_);
    for (const BlockImage& image : images) {
      absl::string_view data(image.data.data(), image.data.size());
      absl::Status s = journal_->Run(
          [&](journal::Journal& j) {
            unsettled_.fetch_add(1, std::memory_order_relaxed);
            return j.Stage(mapping_id_, image.block, data);
          });
      if (!s.ok()) return {std::move(s)};
    }
    return {};
  }
  // Relaxed: the evicted blocks are committed as one transaction (each block is independent;
  // committing them together only makes them atomic together) and applied at once (or by
  // the applier, with defer_file_sync). They become durable through the journal and are
  // marked applied after a later file sync.
  return CommitAndApply(images, 0, 0, /*sync_file=*/false);
}

namespace {
// Applied-but-unsynced bytes a relaxed mapping may hold in memory before the write-back
// thread fdatasyncs the file and lets the journal drop the records.
constexpr uint64_t kMaxAppliedUnsyncedBytes = 8ull << 20;
// The applier's (defer_file_sync) bound: it syncs more often, since it holds these in memory
// beside its backlog, and the journal holds them too until the sync (measured: 8 MiB let a
// chaos worker writing a 256 KiB mapping grow past its 32 MiB bound).
constexpr uint64_t kApplierUnsyncedBytes = 1ull << 20;

// Image bytes of the transaction (to write to the file; held in memory unless
// images_in_journal).
uint64_t Bytes(const journal::Transaction& t) {
  uint64_t n = 0;
  for (const auto& b : t.blocks) n += b.length;
  return n;
}

// The transaction's blocks as images to write (views of its payloads).
std::vector<BlockImage> ImagesOf(const journal::Transaction& t) {
  std::vector<BlockImage> images;
  images.reserve(t.blocks.size());
  for (const auto& b : t.blocks) {
    images.push_back({b.block, absl::MakeConstSpan(b.data.data(), b.data.size())});
  }
  return images;
}

// The newest image of each block of `txns` (ascending LSNs), in block order, for a batch
// that is written, synced and marked applied as a whole: an older image of a block that a
// newer transaction of the batch rewrites need not reach the file. Until the batch's
// fdatasync and marks, the journal holds every transaction, and a crash meanwhile is
// repaired by replaying them all in LSN order, as after a crash in the middle of writing
// them one by one; the file is never read for these blocks meanwhile (ReadEvicted serves
// them). False when a transaction holds its images only in the journal (then they are
// written one transaction after the other).
bool NewestImages(const std::map<uint64_t, journal::Transaction>& txns,
                  std::vector<BlockImage>* out) {
  out->clear();
  for (const auto& [lsn, t] : txns) {
    if (t.images_in_journal) return false;
    for (const auto& b : t.blocks) {
      out->push_back({b.block, absl::MakeConstSpan(b.data.data(), b.data.size())});
    }
  }
  // Stable: within one block, ascending LSN; the last of each block is its newest.
  std::stable_sort(out->begin(), out->end(),
                   [](const BlockImage& a, const BlockImage& b) { return a.block < b.block; });
  size_t kept = 0;
  for (size_t i = 0; i < out->size(); ++i) {
    if (i + 1 < out->size() && (*out)[i + 1].block == (*out)[i].block) continue;
    (*out)[kept++] = (*out)[i];
  }
  out->resize(kept);
  return true;
}

// Bytes of images a transaction held only in the journal (images_in_journal) is applied
// in: read back, written, the buffer reused. Each round's writes are waited for before the next
// read: with O_DIRECT writes, 1 MiB rounds (256 scattered 4 KiB blocks) made the final
// umsync of 4 writers' random writes 16% slower (8.4k against 10k ops/s), 4 MiB rounds
// 5-10% (docs/performance.md, "O_DIRECT write-back"). The buffer is page-aligned so that
// the images are written from it as they are.
constexpr size_t kReadBackBytes = size_t{4} << 20;
// The payload reader's read-ahead when applying such a transaction (PendingReaderOptions).
constexpr size_t kApplyReadaheadBytes = size_t{128} << 10;

// Runs before each write of an apply is issued (base/crash_point.h; nothing in a release).
void MidWriteCrashPoint() { UMAP_CRASH_POINT("apply.mid_write"); }
}  // namespace

absl::StatusOr<bool> JournalWriteBack::WriteNewestImages(
    const std::map<uint64_t, journal::Transaction>& txns, bool one_at_a_time) {
  std::vector<BlockImage> newest;
  if (txns.size() < 2 || !NewestImages(txns, &newest)) return false;
  // A block rewritten by several transactions is written once (O_DIRECT writes every
  // version it is given; the page cache used to absorb the older ones).
  RETURN_IF_ERROR(WriteImages(file_, block_size_, newest, MidWriteCrashPoint, one_at_a_time));
  return true;
}

absl::StatusOr<bool> JournalWriteBack::CopyNewest(
    const std::map<uint64_t, journal::Transaction>& txns, uint64_t block, absl::Span<char> dst) {
  for (auto it = txns.rbegin(); it != txns.rend(); ++it) {
    const std::vector<journal::CommittedBlock>& blocks = it->second.blocks;
    auto b = std::lower_bound(
        blocks.begin(), blocks.end(), block,
        [](const journal::CommittedBlock& c, uint64_t x) { return c.block < x; });
    if (b == blocks.end() || b->block != block) continue;
    if (it->second.images_in_journal) {
      const uint64_t lsn = it->first;
      RETURN_IF_ERROR(journal_->Read(
          [&](journal::Journal& j) { return j.ReadImage(lsn, *b, dst); }));
      return true;
    }
    if (b->data.empty()) continue;  // intent mode: the journal holds no image
    std::memcpy(dst.data(), b->data.data(), std::min(b->data.size(), dst.size()));
    return true;
  }
  return false;
}

absl::Status JournalWriteBack::WriteTransaction(const journal::Transaction& t,
                                                bool one_at_a_time) {
  if (!t.images_in_journal) {
    return WriteImages(file_, block_size_, ImagesOf(t), MidWriteCrashPoint, one_at_a_time);
  }
  // The images are read back in block order, a buffer at a time, each buffer written
  // before the next is read. (The transaction's blocks are distinct, so the order of
  // writes within it is free, as for one held in memory.)
  return journal_->Read([&](journal::Journal& j) -> absl::Status {
    journal::PendingReaderOptions options;
    // One transaction, not a backlog: a small read-ahead, for one is held per table file
    // its payloads lie in (1 MiB: 10 MiB held while a 39 MiB umsync was applied).
    options.readahead_bytes = kApplyReadaheadBytes;
    std::unique_ptr<journal::PendingReader> reader = j.NewPendingReader(options);
    // At least one image: a block may be larger than kReadBackBytes.
    uint64_t largest = 0;
    for (const journal::CommittedBlock& b : t.blocks) {
      largest = std::max<uint64_t>(largest, b.length);
    }
    std::vector<char, PageAlignedAllocator<char>> buf(
        std::max(largest, std::min<uint64_t>(kReadBackBytes, Bytes(t))));
    std::vector<BlockImage> images;
    size_t used = 0;
    for (const journal::CommittedBlock& b : t.blocks) {
      if (used > 0 && used + b.length > buf.size()) {
        RETURN_IF_ERROR(
            WriteImages(file_, block_size_, images, MidWriteCrashPoint, one_at_a_time));
        images.clear();
        used = 0;
      }
      ASSIGN_OR_RETURN(absl::string_view image,
                       reader->ReadImage(t.lsn, journal::TxnBlock{b.block, b.length, b.crc}));
      std::memcpy(buf.data() + used, image.data(), image.size());
      images.push_back({b.block, absl::MakeConstSpan(buf.data() + used, image.size())});
      used += image.size();
    }
    return WriteImages(file_, block_size_, images, MidWriteCrashPoint, one_at_a_time);
  });
}

uint64_t JournalWriteBack::Backlog() const {
  uint64_t n = 0;
  for (const auto& [lsn, t] : unapplied_) n += Bytes(t);
  for (const auto& [lsn, t] : applying_) n += Bytes(t);
  return n;
}

absl::Status JournalWriteBack::AdoptSurvivors(bool for_read) {
  if (!commit_failed_) return absl::OkStatus();
  // Run() reopens a poisoned journal first, so what we list is what reached its disk. Only
  // this sink commits for this mapping, always under apply_mu_: a pending transaction of the
  // mapping newer than last_lsn_ can only be one whose Commit returned an error.
  bool adopted = false;
  auto adopt = [&](journal::Journal& j) -> absl::Status {
    if (for_read && journal_->reopens() == failed_instance_) return absl::OkStatus();
    adopted = true;
    for (uint64_t lsn : j.PendingLsns()) {
      if (lsn <= last_lsn_ || unapplied_.contains(lsn)) continue;
      // Its images stay in the journal (read back when it is applied, or missed on): a
      // survivor may be as large as a umsync larger than memory.
      absl::StatusOr<journal::Transaction> t =
          j.ReadTransaction(lsn, journal::Journal::Images::kLeaveInJournal);
      if (absl::IsNotFound(t.status())) continue;  // applied and deleted meanwhile
      if (!t.ok()) return t.status();
      if (t->mapping_id != mapping_id_) continue;
      UMAP_LOG(kWarn, "journal ", journal_->dir(), ": failed commit of mapping ", mapping_id_,
               " survived as transaction ", lsn, "; applying it");
      unapplied_.emplace(lsn, *std::move(t));
      last_lsn_ = lsn;
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(for_read ? journal_->Read(adopt) : journal_->Run(adopt));
  if (adopted) commit_failed_ = false;
  // Deferred: the applier writes what was adopted. A commit wakes it anyway; a read that
  // adopted must, or the survivors wait in the journal for the next umsync or the uunmap.
  if (for_read && defer_file_sync_ && !unapplied_.empty()) apply_cv_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<bool> JournalWriteBack::ReadEvicted(uint64_t block, absl::Span<char> dst) {
  absl::MutexLock l(&apply_mu_);
  // A surviving failed commit may have taken this block's staged image.
  RETURN_IF_ERROR(AdoptSurvivors(/*for_read=*/true));
  // Newest first: a staged image is newer than any committed one of the same block.
  auto staged =
      journal_->Read([&](journal::Journal& j) { return j.ReadStaged(mapping_id_, block); });
  if (!staged.ok()) return staged.status();
  if (staged->has_value()) {
    const std::string& img = **staged;
    std::memcpy(dst.data(), img.data(), std::min(img.size(), dst.size()));
    return true;
  }
  // Then the committed ones not yet written: unapplied_ is newer than the applier's batch.
  for (const auto* txns : {&unapplied_, &applying_, &syncing_}) {
    ASSIGN_OR_RETURN(bool found, CopyNewest(*txns, block, dst));
    if (found) return true;
  }
  return false;  // the file holds the newest version
}

WriteBackResult JournalWriteBack::Sync(absl::Span<const BlockImage> images, uint64_t first,
                                       uint64_t end) {
  return CommitAndApply(images, first, end, /*sync_file=*/!defer_file_sync_);
}

WriteBackResult JournalWriteBack::CommitAndApply(absl::Span<const BlockImage> images,
                                                 uint64_t first, uint64_t end, bool sync_file) {
  std::vector<journal::BlockWrite> writes;
  writes.reserve(images.size());
  for (const BlockImage& im : images) {
    writes.push_back({im.block, absl::string_view(im.data.data(), im.data.size())});
  }
  absl::MutexLock l(&apply_mu_);
  // Survivors of an earlier failed commit come first: they are older, and in the atomic
  // policy they hold staged images that this commit would no longer find.
  if (absl::Status s = AdoptSurvivors(/*for_read=*/false); !s.ok()) return {std::move(s)};
  UMAP_IF_MUTATION(kApplyBeforeCommit) {
    // Deliberately wrong (test-only, base/mutation.h): the file sees the blocks before the
    // journal holds them, so a kill from here to the commit leaves a partial, unjournaled
    // transaction in the file. Errors are dropped: the normal path below writes them again.
    for (const BlockImage& im : images) {
      UMAP_CRASH_POINT("apply.mid_write");
      file_->WriteAt(im.block * block_size_, absl::MakeConstSpan(im.data.data(), im.data.size()))
          .IgnoreError();
    }
  }
  StartApplier();  // with the first commit, and the first after a checkpoint stopped it
  UMAP_CRASH_POINT("journal.before_commit");
  // With nothing older waiting to reach the file, a synchronous apply writes straight from
  // the caller's images: the transaction takes no copy of them unless it outlives the call
  // (ApplyDirect). Otherwise it is applied after the older ones, from its own copy.
  const bool direct = sync_file && !defer_file_sync_ && unapplied_.empty() &&
                      applied_unsynced_.empty();
  const auto copies =
      direct ? journal::Journal::ImageCopies::kCallerKeeps : journal::Journal::ImageCopies::kCopy;
  uint64_t instance = 0;
  auto txn = journal_->Run([&](journal::Journal& j) {
    instance = journal_->reopens();
    unsettled_.fetch_add(1, std::memory_order_relaxed);
    return j.Commit(mapping_id_, writes, first, std::max(first, end), copies);
  });
  // A failed commit is indeterminate (present or absent after a crash, never partial); the
  // caller keeps the blocks dirty, so a retry commits them again. If it is present after the
  // reopen, AdoptSurvivors applies it before anything newer.
  if (!txn.ok()) {
    commit_failed_ = true;
    failed_instance_ = instance;
    return {txn.status()};
  }
  UMAP_CRASH_POINT("journal.after_commit");
  UMAP_IF_MUTATION(kGcBeforeSync) {
    // Deliberately wrong (test-only, base/mutation.h): the records go before the blocks
    // reached the file and its fdatasync, so a crash during the apply cannot be repaired.
    if (txn->lsn != journal::kNoLsn) {
      uint64_t lsn = txn->lsn;
      journal_->Run([&](journal::Journal& j) { return j.MarkApplied(lsn); }).IgnoreError();
    }
  }
  // (A transaction committed in several batches holds no image, nor uses the caller's: it
  // is read back from the journal by the general path, which copies nothing for it.)
  if (direct && txn->lsn != journal::kNoLsn && !txn->images_in_journal) {
    last_lsn_ = std::max(last_lsn_, txn->lsn);
    return {ApplyDirect(*std::move(txn), writes), /*kept=*/true};
  }
  uint64_t committed_bytes = 0;
  if (txn->lsn != journal::kNoLsn) {
    // Intent mode keeps no payload in the journal; the images come back from Commit.
    uint64_t lsn = txn->lsn;
    last_lsn_ = std::max(last_lsn_, lsn);
    committed_bytes = Bytes(*txn);
    unapplied_.emplace(lsn, *std::move(txn));
  }
  if (defer_file_sync_) {
    WakeApplier(committed_bytes);  // the applier writes it
    return AwaitBacklog();
  }
  // Committed: whatever becomes of the apply, the journal holds these images now, and an
  // apply that fails is retried by the next Sync (never journaled again).
  return {ApplyPending(sync_file), /*kept=*/true};
}

WriteBackResult JournalWriteBack::AwaitBacklog() {
  // Only a round that ended while this commit waited counts: an older failure may be gone
  // (the commit woke the applier, which retries at once).
  const uint64_t seen = apply_rounds_;
  // While the file fails (the applier's last round did), every umsync waits for the next
  // round and returns its error, as a synchronous apply would: the file then lags only the
  // umsyncs acknowledged before the failure showed, not all those of the time it fails.
  bool await_round = !apply_error_.ok();
  while (!stop_) {
    if (apply_rounds_ != seen) {
      // Durable in the journal, but the file is not taking writes (a full or failing disk):
      // say so instead of acknowledging more that only the journal holds.
      if (!apply_error_.ok()) return {apply_error_, /*kept=*/true};
      await_round = false;
    }
    if (!await_round && Backlog() <= kMaxBacklogBytes) break;
    apply_cv_.Wait(&apply_mu_);
  }
  return {absl::OkStatus(), /*kept=*/true, /*applied=*/false};
}

void JournalWriteBack::ApplierLoop() {
  ::pthread_setname_np(::pthread_self(), "umap-apply");
  absl::MutexLock l(&apply_mu_);
  for (;;) {
    // Idle with written-but-unsynced transactions: sync once no commit came for
    // kIdleSyncDelay, so that a steady stream of umsyncs shares one fdatasync per 1 MiB
    // (ApplyBatch) instead of paying one each. A failed round is retried even with nothing
    // left to write: its fdatasync may have succeeded and only the journal's mark failed.
    // Its error would otherwise stand for good, and a umsync that commits nothing waits
    // for a round that never comes.
    bool sync_now = false;
    while (!stop_ && unapplied_.empty() && apply_error_.ok()) {
      if (applied_unsynced_.empty()) {
        apply_cv_.Wait(&apply_mu_);
      } else if (apply_cv_.WaitWithTimeout(&apply_mu_, kIdleSyncDelay) && unapplied_.empty()) {
        sync_now = true;
        break;
      }
    }
    if (stop_) return;
    if (!unapplied_.empty() && apply_error_.ok()) GatherCommits();
    if (stop_) return;
    absl::Status s;
    if (!unapplied_.empty()) {
      s = ApplyBatch();
    } else if (sync_now || !applied_unsynced_.empty()) {
      s = SyncFileAndMark(/*release_lock=*/true);
    } else {
      s = MarkAppliedBatch(/*force=*/true);  // the retry of a round whose mark failed
    }
    if (!s.ok() && apply_error_.ok()) {
      UMAP_LOG(kError, "writing journaled transactions to ", file_->name(),
               " failed (they stay in the journal; retrying): ", s.ToString());
    }
    apply_error_ = s;
    ++apply_rounds_;
    apply_cv_.SignalAll();
    // After a failure, retry after 100 ms (or at the next commit, stop or Drain).
    if (!s.ok()) apply_cv_.WaitWithTimeout(&apply_mu_, absl::Milliseconds(100));
  }
}

void JournalWriteBack::WakeApplier(uint64_t committed_bytes) {
  if (gathering_ && apply_error_.ok()) {
    gathered_bytes_ += committed_bytes;
    if (gathered_bytes_ < kGatherBytes) return;  // it takes them at its deadline
  }
  apply_cv_.SignalAll();
}

void JournalWriteBack::GatherCommits() {
  const absl::Time deadline = absl::Now() + kGatherDelay;
  gathered_bytes_ = Backlog();
  gathering_ = true;
  while (!stop_ && apply_error_.ok() && gathered_bytes_ < kGatherBytes) {
    if (apply_cv_.WaitWithDeadline(&apply_mu_, deadline)) break;  // the delay is over
  }
  gathering_ = false;
}

absl::Status JournalWriteBack::ApplyBatch() {
  RETURN_IF_ERROR(CheckOwnerBeforeApply());
  if (apply_guard_) RETURN_IF_ERROR(apply_guard_());
  applying_ = std::move(unapplied_);
  unapplied_.clear();
  applier_busy_ = true;
  absl::Status s;
  // Commits (newer LSNs, into unapplied_) and ReadEvicted go on meanwhile; only this thread
  // touches applying_'s contents while applier_busy_, and nobody else writes the file.
  apply_mu_.Unlock();
  absl::StatusOr<bool> newest = WriteNewestImages(applying_, ApplierWritesOneAtATime());
  s = newest.status();
  if (s.ok() && !*newest) {
    for (const auto& [lsn, t] : applying_) {
      // In LSN order, one transaction after the other, as ApplyPending.
      s = WriteTransaction(t, ApplierWritesOneAtATime());
      if (!s.ok()) break;
    }
  }
  apply_mu_.Lock();
  if (!s.ok()) {
    // Written or not, all of it is applied again, in order, by the next round.
    unapplied_.merge(applying_);
    applying_.clear();
    RequeueUnsynced();
    applier_busy_ = false;
    return s;
  }
  for (const auto& [lsn, t] : applying_) applied_unsynced_bytes_ += Bytes(t);
  applied_unsynced_.merge(applying_);
  applying_.clear();
  applier_busy_ = false;
  if (applied_unsynced_bytes_ >= kApplierUnsyncedBytes) {
    s = SyncFileAndMark(/*release_lock=*/true);
  }
  return s;
}

void JournalWriteBack::RequeueUnsynced() {
  unapplied_.merge(applied_unsynced_);
  applied_unsynced_.clear();
  applied_unsynced_bytes_ = 0;
}

absl::Status JournalWriteBack::ApplyPending(bool sync_file) {
  if (!unapplied_.empty()) RETURN_IF_ERROR(CheckOwnerBeforeApply());
  absl::Status s = WritePending();
  if (!s.ok()) {
    RequeueUnsynced();
    return s;
  }
  if (!sync_file && applied_unsynced_bytes_ < kMaxAppliedUnsyncedBytes) return absl::OkStatus();
  if (applied_unsynced_.empty()) return SyncFile(file_);
  return SyncFileAndMark(/*release_lock=*/false);
}

absl::Status JournalWriteBack::WritePending() {
  ASSIGN_OR_RETURN(bool newest, WriteNewestImages(unapplied_, /*one_at_a_time=*/false));
  if (newest) {
    // All of them were written (each block once, in its newest version), or none is.
    for (const auto& [lsn, t] : unapplied_) applied_unsynced_bytes_ += Bytes(t);
    applied_unsynced_.merge(unapplied_);
    unapplied_.clear();
  }
  // Apply in LSN order; stop at the first failure so no block is applied out of order.
  for (auto it = unapplied_.begin(); it != unapplied_.end();) {
    // One transaction's writes may be in flight together (its blocks are distinct); the
    // next transaction starts only after they all returned, so two versions of one block
    // are never written out of LSN order.
    RETURN_IF_ERROR(WriteTransaction(it->second, /*one_at_a_time=*/false));
    applied_unsynced_bytes_ += Bytes(it->second);
    applied_unsynced_.insert(unapplied_.extract(it++));
  }
  return absl::OkStatus();
}

absl::Status JournalWriteBack::ApplyDirect(journal::Transaction txn,
                                           absl::Span<const journal::BlockWrite> given) {
  // What ApplyPending and SyncFileAndMark do for one transaction when nothing older is
  // pending, with the same crash points, from the caller's images where the transaction
  // holds none (the blocks it took from staging it holds). On a failure the transaction is
  // kept as they keep it, with its images copied in now: the caller's go when it returns.
  const uint64_t lsn = txn.lsn;
  std::vector<BlockImage> images;
  images.reserve(txn.blocks.size());
  size_t g = 0;  // `given` and txn.blocks are both in block order
  std::vector<const journal::BlockWrite*> sorted(given.size());
  for (size_t i = 0; i < given.size(); ++i) sorted[i] = &given[i];
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->block < b->block; });
  std::vector<absl::string_view> views(txn.blocks.size());
  for (size_t i = 0; i < txn.blocks.size(); ++i) {
    const journal::CommittedBlock& b = txn.blocks[i];
    while (g < sorted.size() && sorted[g]->block < b.block) ++g;
    views[i] = b.data.empty() && g < sorted.size() && sorted[g]->block == b.block
                   ? sorted[g]->data
                   : absl::string_view(b.data);
    images.push_back({b.block, absl::MakeConstSpan(views[i].data(), views[i].size())});
  }
  auto keep = [&] {
    for (size_t i = 0; i < txn.blocks.size(); ++i) {
      if (txn.blocks[i].data.empty()) txn.blocks[i].data.assign(views[i].data(), views[i].size());
    }
    unapplied_.emplace(lsn, std::move(txn));
  };
  absl::Status s = CheckOwnerBeforeApply();
  if (s.ok()) {
    s = WriteImages(file_, block_size_, images, MidWriteCrashPoint);
  }
  if (s.ok()) s = SyncFile(file_);
  if (!s.ok()) {
    keep();  // applied again, in order, by the next round
    return s;
  }
  UMAP_CRASH_POINT("apply.after_sync");
  NoteSynced(lsn, txn);
  return MarkAppliedBatch(/*force=*/false);
}

absl::Status JournalWriteBack::SyncFileAndMark(bool release_lock) {
  // syncing_ keeps them readable (ReadEvicted) while the lock is released: a failed
  // fdatasync may have dropped their pages.
  syncing_ = std::move(applied_unsynced_);
  applied_unsynced_.clear();
  applied_unsynced_bytes_ = 0;
  if (release_lock) {
    applier_busy_ = true;
    apply_mu_.Unlock();
  }
  absl::Status s = SyncFile(file_);
  if (s.ok()) UMAP_CRASH_POINT("apply.after_sync");
  if (release_lock) {
    apply_mu_.Lock();
    applier_busy_ = false;
  }
  if (!s.ok()) {
    // The pages written since the last good fdatasync may be gone: apply them again later.
    unapplied_.merge(syncing_);
    syncing_.clear();
    return s;
  }
  for (const auto& [lsn, t] : syncing_) NoteSynced(lsn, t);
  syncing_.clear();
  // The data is durable in the file; a failed mark only leaves records that a replay would
  // rewrite with the same bytes. They stay listed for the next batch.
  return MarkAppliedBatch(/*force=*/false);
}

absl::Status JournalWriteBack::CheckOwnerBeforeApply() {
  // A process whose journal another took over (a restart on another node while this one was
  // cut off) must not write its old transactions into the file: the new owner replayed them
  // and may have written newer blocks since. The commit of the newest one has just checked.
  return journal_->Run([](journal::Journal& j) { return j.CheckOwnerFresh(); });
}

void JournalWriteBack::NoteSynced(uint64_t lsn, const journal::Transaction& t) {
  to_mark_.push_back(lsn);
  to_mark_bytes_ += Bytes(t);
}

absl::Status JournalWriteBack::MarkAppliedBatch(bool force) {
  if (to_mark_.empty()) return absl::OkStatus();
  if (!force && to_mark_.size() < kMarkBatch && to_mark_bytes_ < kMarkBytes) {
    return absl::OkStatus();
  }
  std::vector<uint64_t> lsns = to_mark_;
  UMAP_IF_MUTATION(kGcBeforeSync) {
    // Already marked right after their commit: MarkApplied of a deleted LSN is kNotFound.
    journal_->Run([&](journal::Journal& j) {
      std::vector<uint64_t> pending = j.PendingLsns();
      std::erase_if(lsns, [&](uint64_t lsn) {
        return !std::binary_search(pending.begin(), pending.end(), lsn);
      });
      return absl::OkStatus();
    }).IgnoreError();
  }
  absl::Status s =
      journal_->Run([&](journal::Journal& j) { return j.MarkApplied(absl::MakeConstSpan(lsns)); });
  if (s.ok()) {
    to_mark_.clear();
    to_mark_bytes_ = 0;
  }
  return s;
}

absl::Status JournalWriteBack::Drain() {
  absl::MutexLock l(&apply_mu_);
  // The applier's round in progress ends first (it writes without the lock); the next
  // waits for the lock, and finds nothing to do.
  while (applier_busy_) apply_cv_.Wait(&apply_mu_);
  // Committed images not in the file yet (an apply that failed, relaxed evictions applied
  // without an fdatasync, the applier's backlog, a failed commit that reached the journal
  // after all) are applied and synced now, so that the journal holds no transaction of this
  // sink.
  RETURN_IF_ERROR(AdoptSurvivors(/*for_read=*/false));
  if (!unapplied_.empty() || !applied_unsynced_.empty()) {
    RETURN_IF_ERROR(ApplyPending(/*sync_file=*/true));
  }
  return MarkAppliedBatch(/*force=*/true);
}

absl::Status JournalWriteBack::Settle() {
  const uint64_t seen = unsettled_.load(std::memory_order_acquire);
  if (seen == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Drain());
  // MarkApplied writes without sync: make the marks durable before the program's own write
  // can reach the file, or a replay after a crash could put an applied image back over it.
  RETURN_IF_ERROR(journal_->Run([](journal::Journal& j) { return j.Sync(); }));
  unsettled_.fetch_sub(seen, std::memory_order_acq_rel);
  return absl::OkStatus();
}

absl::Status JournalWriteBack::Close() {
  {
    absl::MutexLock l(&apply_mu_);
    RETURN_IF_ERROR(MarkAppliedBatch(/*force=*/true));
  }
  return journal_->Run([&](journal::Journal& j) { return j.UnregisterMapping(mapping_id_); });
}

}  // namespace umap::runtime
