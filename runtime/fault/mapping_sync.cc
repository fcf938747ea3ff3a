// Mapping: umsync (capturing dirty blocks, handing them to the sink a chunk at a time,
// settling the answer).
#include "runtime/fault/mapping.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/round.h"
#include "base/status_macros.h"
#include "runtime/fault/mapping_host.h"
#include "runtime/fault/mapping_internal.h"
#include "runtime/writeback/capture_spans.h"

namespace umap::runtime {

using Table = CacheEntryTable;
using mapping_internal::AddrHex;
using mapping_internal::IsFilled;

absl::Status Mapping::Sync(uint64_t first, uint64_t end) {
  if (!writable_) return absl::OkStatus();
  // Group commit across threads: umsyncs of one mapping run one at a time, so a caller that
  // waited may find that a umsync which *started* after it arrived, over a range covering
  // its own, has succeeded meanwhile. Everything the caller wrote before calling was then
  // captured by that umsync (its writes happen before its ticket, the ticket before that
  // umsync's start), so it returns that umsync's success instead of a second journal commit
  // and fdatasync. Eight threads syncing one mapping then share syncs instead of queueing.
  const uint64_t ticket = sync_tickets_.fetch_add(1, std::memory_order_acq_rel) + 1;
  absl::MutexLock lock(&sync_mu_);
  end = std::min<uint64_t>(end, table_.size());
  if (first >= end) return absl::OkStatus();
  if (covered_ticket_ >= ticket && covered_first_ <= first && covered_end_ >= end) {
    rt_->counters().shared_syncs.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  if (absl::Status refused = ForeignRefusal(); !refused.ok()) return refused;
  const uint64_t started = sync_tickets_.load(std::memory_order_acquire);
  sync_started_us_.store(rt_->env()->NowMicros(), std::memory_order_relaxed);
  OwnWrite own(this);
  // The capture buffer holds at most umsync_chunk_bytes whatever the range's size. Atomic
  // policy: the whole range is one transaction (SyncStaging). Otherwise the range is synced
  // in chunks of that many bytes of blocks.
  const size_t chunk_bytes = ChunkBytes();
  absl::Status status;
  if (write_back_->keeps_evicted()) {
    status = SyncStaging(first, end, chunk_bytes);
  } else {
    const uint64_t chunk = chunk_bytes / block_size_;
    for (uint64_t c = first; c < end && status.ok(); c += chunk) {
      status = SyncChunk(c, std::min(end, c + chunk), /*last=*/c + chunk >= end);
    }
  }
  sync_end_.store(0, std::memory_order_release);
  sync_first_.store(0, std::memory_order_release);
  sync_started_us_.store(0, std::memory_order_relaxed);
  umsyncs_.fetch_add(1, std::memory_order_relaxed);
  if (status.ok()) {
    covered_ticket_ = started;
    covered_first_ = first;
    covered_end_ = end;
  }
  return status;
}

absl::Status Mapping::CaptureDirty(uint64_t first, uint64_t end, Capture* cap, size_t max_bytes,
                                   uint64_t* next) {
  if (next != nullptr) *next = end;
  // Size the buffer once from a first look at the dirty bits (blocks dirtied meanwhile
  // still fit: the vector grows), instead of doubling it block by block.
  // (The count stops at a full capture: a umsync of many chunks does not rescan the rest
  // of its range for each.)
  const uint64_t most = max_bytes / block_size_ + 1;
  uint64_t expect = 0;
  for (uint64_t b = first; b < end && expect < most; ++b) expect += table_.Load(b).dirty();
  cap->Reserve(expect * block_size_);
  cap->blocks.reserve(expect);
  // Dirty blocks are locked in ascending order (as fills lock theirs), up to kMaxBatch at a
  // time within kMaxSpan blocks, and write-protected with one ioctl over their span: one
  // TLB flush for the batch instead of one per block (scattered writes dirty scattered
  // blocks; 16 writer threads spent 8% of the CPU in these flushes). The span's other
  // blocks are clean (protected already), missing (nothing to protect), or were dirtied
  // after the scan passed them: protected again, their next write faults once and
  // HandleWriteProtect lifts the protection.
  // But the kernel visits every page table entry of the span: a batch also ends before a
  // gap of more than kMaxGapPages pages between two dirty blocks. Random 4 KiB writes over a
  // 1 GiB mapping with a umsync of it every 100 writes (4 threads, 183 MiB cache) spent 20%
  // of all CPU time walking spans in change_pte_range; ending batches at 256-page gaps left
  // 1% there and added 6% of TLB flushes (CPU per write 121 -> 97 µs, medians of 5; docs/
  // performance.md "Writes with many syncing threads").
  using capture::kMaxBatch;
  using capture::kMaxGapPages;
  using capture::kMaxSpan;
  const uint64_t max_gap = std::max<uint64_t>(1, kMaxGapPages * rt_->page_size() / block_size_);
  uint64_t batch_blocks[kMaxBatch], batch_entries[kMaxBatch];
  int n = 0;
  size_t taken = 0;  // image bytes captured by this call
  const size_t page = rt_->page_size();
  auto flush = [&]() -> absl::Status {
    if (n == 0) return absl::OkStatus();
    const uint64_t lo = batch_blocks[0], hi = batch_blocks[n - 1];
    const size_t len = (hi - lo) * block_size_ + RoundUp(ValidBytes(hi), page);
    int err = rt_->uffd().WriteProtect(BlockAddr(lo), len, true);
    if (err != 0) {
      for (int i = 0; i < n; ++i) table_.Unlock(batch_blocks[i], batch_entries[i]);
      n = 0;
      return PosixError(err, "UFFDIO_WRITEPROTECT(set) while capturing for umsync");
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t b = batch_blocks[i];
      const size_t valid = ValidBytes(b);
      cap->Reserve(valid);
      const size_t off = cap->used;
      std::memcpy(cap->buf.data() + off, BlockAddr(b), valid);
      cap->used += valid;
      // Clean now, but held (kSyncing) until SettleCapture: evicting the block before the
      // umsync's outcome is known would lose it if the write-back fails.
      table_.Unlock(b, (batch_entries[i] & ~Table::kDirty) | Table::kSyncing);
      dirty_.fetch_sub(1, std::memory_order_relaxed);
      cap->blocks.push_back({b, off, valid});
    }
    n = 0;
    return absl::OkStatus();
  };
  for (uint64_t b = first; b < end; ++b) {
    // Skip clean blocks without locking them. A locked entry may be a fill or first-write
    // fault whose thread was already woken (UFFDIO_COPY / WRITEPROTECT wake before the entry
    // is published) and has written, even returned to call this umsync: wait for it.
    Table::Entry peek = table_.Load(b);
    if (!peek.dirty() && !peek.locked()) continue;
    if (n > 0 &&
        (n == kMaxBatch || b - batch_blocks[0] >= kMaxSpan || b - batch_blocks[n - 1] > max_gap)) {
      RETURN_IF_ERROR(flush());
    }
    Table::Entry e = table_.Lock(b);
    if (!(e.present() && e.dirty())) {
      table_.Unlock(b, e.v);
      continue;
    }
    if (next != nullptr && taken > 0 && taken + ValidBytes(b) > max_bytes) {
      // Full: this block is the next call's first.
      table_.Unlock(b, e.v);
      *next = b;
      break;
    }
    taken += ValidBytes(b);
    batch_blocks[n] = b;
    batch_entries[n++] = e.v;
  }
  RETURN_IF_ERROR(flush());
  return absl::OkStatus();
}

void Mapping::SettleCapture(const Capture& cap, uint64_t first, uint64_t end,
                            const WriteBackResult& r) {
  if (r.ok() && r.applied) {
    rt_->counters().blocks_written.fetch_add(cap.blocks.size(), std::memory_order_relaxed);
    // Every image the sink held for the range (staged, or committed and then applied) is in
    // the file now.
    for (uint64_t b = first; b < end; ++b) {
      if (!table_.Load(b).staged()) continue;
      Table::Entry e = table_.Lock(b);
      table_.Unlock(b, e.v & ~Table::kStaged);
    }
    ReleaseCaptured(cap, 0);
    return;
  }
  if (r.kept) {
    // Committed, and the apply failed or is left to the sink's background writer: the
    // images are safe in the journal and reach the file later. The blocks stay clean (a
    // retry must not journal them again), and a miss after their eviction asks the sink,
    // never the stale file. (The range's other held blocks keep their mark: their images
    // are in the same unapplied transaction.)
    if (r.ok()) {
      rt_->counters().blocks_written.fetch_add(cap.blocks.size(), std::memory_order_relaxed);
    }
    ReleaseCaptured(cap, Table::kStaged);
    return;
  }
  // Nothing is lost: the captured blocks become dirty again (and writable, keeping
  // dirty <=> unprotected) so that a later umsync writes them.
  for (const Captured& c : cap.blocks) {
    Table::Entry e = table_.Lock(c.block);
    const uint64_t v = e.v & ~Table::kSyncing;
    if (e.present() && !e.dirty() &&
        rt_->uffd().WriteProtect(BlockAddr(c.block), RoundUp(c.len, rt_->page_size()), false) ==
            0) {
      table_.Unlock(c.block, v | Table::kDirty);
      dirty_.fetch_add(1, std::memory_order_relaxed);
    } else {
      table_.Unlock(c.block, v);
    }
  }
}

void Mapping::ReleaseCaptured(const Capture& cap, uint64_t add) {
  for (const Captured& c : cap.blocks) {
    Table::Entry e = table_.Lock(c.block);
    table_.Unlock(c.block, (e.v & ~Table::kSyncing) | add);
  }
}

std::vector<BlockImage> Mapping::ImagesOf(const Capture& cap) const {
  std::vector<BlockImage> images;
  images.reserve(cap.blocks.size());
  for (const Captured& c : cap.blocks) {
    images.push_back(
        {first_file_block() + c.block, absl::MakeConstSpan(cap.buf.data() + c.offset, c.len)});
  }
  return images;
}

namespace {
// What a umsync of more than one chunk makes the journal hold besides its chunk, measured
// (docs/durability.md, "What a umsync holds in memory"): RocksDB's memtables, those its
// iterators pin, their read-ahead buffers, the table builders of the records it writes,
// and malloc arenas that keep some of it after it is freed. A 39 MiB atomic umsync with a
// 4 MiB cache: heap peak 25 MiB, of it about 19 MiB more than with the journal off. The
// chunk itself, staged, committed and read back, is counted four times on top.
constexpr uint64_t kLargeUmsyncJournalBytes = uint64_t{20} << 20;
}  // namespace

absl::Status Mapping::StageCaptured(Capture& cap) {
  WriteBackResult r = write_back_->Evicted(ImagesOf(cap));
  if (!r.ok()) {
    SettleCapture(cap, 0, table_.size(), r);  // dirty again: nothing lost
    return r.status;
  }
  ReleaseCaptured(cap, Table::kStaged);
  cap.Reset();
  return absl::OkStatus();
}

size_t Mapping::ChunkBytes() const {
  return std::max<size_t>(rt_->options().umsync_chunk_bytes, block_size_);
}

absl::Status Mapping::SyncStaging(uint64_t first, uint64_t end, size_t chunk_bytes) {
  sync_first_.store(first, std::memory_order_release);
  sync_end_.store(end, std::memory_order_release);
  Capture& cap = capture_;
  absl::Cleanup reset = [&cap] { cap.Reset(); };
  // Reserved once the umsync turns out larger than a chunk, until it ends
  // (Runtime::ReserveOutsideCache): the cache shrinks as the staged chunks become
  // evictable, and the journal's traffic fits where the cache was.
  uint64_t reserved = 0;
  absl::Cleanup release = [&] {
    if (reserved != 0) rt_->ReleaseOutsideCache(reserved);
  };
  for (uint64_t b = first;;) {
    uint64_t next = end;
    WriteBackResult r{CaptureDirty(b, end, &cap, chunk_bytes, &next)};
    if (r.ok()) r.status = WaitForShadows(b, next);
    if (r.ok() && next < end && reserved == 0) {
      reserved = kLargeUmsyncJournalBytes + 4 * uint64_t{chunk_bytes};
      rt_->ReserveOutsideCache(reserved);
    }
    if (r.ok() && next < end) {
      // A full chunk with more to come: staged like an evicted block (uncommitted; the
      // blocks become clean and evictable, a miss reads the staged image), for the commit
      // below to take with the rest of the range.
      // On failure this chunk's blocks are dirty again; the chunks staged before stay
      // staged, as evicted blocks do: a later umsync commits them all.
      const uint32_t staged = static_cast<uint32_t>(cap.blocks.size());
      RETURN_IF_ERROR(StageCaptured(cap));
      // The chunk's blocks are clean now: a fixed cache makes its room here (lazy sizing's
      // thread does so by itself).
      rt_->MakeRoom(staged);
      b = next;
      continue;
    }
    if (r.ok())
      r = write_back_->Sync(ImagesOf(cap), first_file_block() + first, first_file_block() + end);
    SettleCapture(cap, first, end, r);
    return r.status;
  }
}

absl::Status Mapping::SyncChunk(uint64_t first, uint64_t end, bool last) {
  sync_first_.store(first, std::memory_order_release);
  sync_end_.store(end, std::memory_order_release);
  Capture& cap = capture_;
  absl::Cleanup reset = [&cap] { cap.Reset(); };
  WriteBackResult r{CaptureDirty(first, end, &cap)};
  if (r.ok()) r.status = WaitForShadows(first, end);
  // A middle chunk with nothing captured needs no write and no fdatasync; the last chunk
  // always reaches the sink, whose fdatasync also covers earlier eviction write-backs.
  if (r.ok() && cap.blocks.empty() && !last && !write_back_->keeps_evicted()) {
    return absl::OkStatus();
  }
  if (r.ok()) {
    r = write_back_->Sync(ImagesOf(cap), first_file_block() + first, first_file_block() + end);
  }
  SettleCapture(cap, first, end, r);
  return r.status;
}

}  // namespace umap::runtime
