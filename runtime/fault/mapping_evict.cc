// Mapping: eviction (taking blocks out of the cache: clean, dirty to the sink, shadows
// while a write-back is under way) and emptying a mapping (ReleaseAll, StageDirty, Evacuate).
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

bool Mapping::PrepareEvict(uint64_t block, uint32_t cache_block, EvictionBatch* batch) {
  Table::Entry e;
  if (!table_.TryLock(block, &e)) return false;
  if (e.parked() && e.cache_block() == cache_block) {
    // Clean, and its pages are already gone: only the park buffer is given back.
    EvictionBatch::Victim& victim = batch->victims[batch->count];
    victim = {
        this, block, e.v,           Table::WithoutPark(e.v) & ~Table::kCbMask, IndexStack::kEmpty,
        -1,   false, e.park_index()};
    batch->ranges[batch->count] = {BlockAddr(block), 0};
    ++batch->count;
    return true;
  }
  // In a umsync's range, a block it captured (kSyncing) stays until the umsync's outcome is
  // known, and a dirty one stays out of eviction's write-back, which would race the umsync's
  // own; a clean block there is evicted as anywhere (its bytes are in the file, or in the
  // sink when kStaged). Refusing the whole range would leave a mapping that is synced often
  // (every thread a umsync per hundred writes) nothing to evict most of the time.
  if (!e.present() || e.cache_block() != cache_block || e.syncing() ||
      (e.dirty() && InSync(block))) {
    table_.Unlock(block, e.v);
    return false;
  }
  char* addr = BlockAddr(block);
  const uint64_t gone = e.v & ~(Table::kPresent | Table::kDirty | Table::kCbMask);
  EvictionBatch::Victim& victim = batch->victims[batch->count];
  victim = {this, block, e.v, gone, IndexStack::kEmpty, -1, false};
  if (e.dirty()) {
    // One write-back of a block in flight at a time: wait for the older one to land.
    if (e.shadow()) {
      table_.Unlock(block, e.v);
      return false;
    }
    ShadowPool& shadows = rt_->shadows();
    const uint32_t s = shadows.TryAcquire();
    if (s == IndexStack::kEmpty) {
      table_.Unlock(block, e.v);
      return false;
    }
    const size_t valid = ValidBytes(block);
    // Capture: protect first so a concurrent write faults (and waits for the entry lock)
    // instead of landing between the copy and the discard, where it would be lost.
    int err = rt_->uffd().WriteProtect(addr, RoundUp(valid, rt_->page_size()), true);
    if (err != 0) {
      shadows.Release(s);
      table_.Unlock(block, e.v);
      UMAP_LOG(kError, "UFFDIO_WRITEPROTECT(set) failed at ", AddrHex(addr), ": errno ", err,
               "; block ", block, " of ", file_->name(), " stays resident and dirty");
      return false;
    }
    ShadowPool::Shadow& sh = shadows.at(s);
    std::memcpy(sh.data, addr, valid);
    sh.mapping = this;
    sh.block = block;
    sh.len = static_cast<uint32_t>(valid);
    victim.shadow = s;
    victim.unlock_value = Table::WithShadow(gone, s);
  }
  // Clean pages of a writable mapping are write-protected, so no write can slip in before
  // the discard; the entry stays locked until FinishEvict.
  batch->ranges[batch->count] = {addr, block_size_};
  ++batch->count;
  return true;
}

void Mapping::FinishEvict(const EvictionBatch::Victim& victim) {
  Counters& c = rt_->counters();
  ShadowPool& shadows = rt_->shadows();
  if (victim.park != IndexStack::kEmpty && victim.discarded) {
    rt_->sizer()->parks().Release(victim.park);  // a parked victim: nothing was mapped
  }
  if (!victim.discarded) {
    // The pages are still mapped: the block stays resident as it was (dirty and writable
    // again if it was dirty), and its CB is not freed.
    char* addr = BlockAddr(victim.block);
    UMAP_LOG(kError, "MADV_DONTNEED failed at ", AddrHex(addr), " (block ", victim.block, " of ",
             file_->name(), "); it stays resident");
    if (victim.shadow == IndexStack::kEmpty) {
      table_.Unlock(victim.block, victim.locked_value);
      return;
    }
    if (rt_->uffd().WriteProtect(addr, RoundUp(ValidBytes(victim.block), rt_->page_size()),
                                 false) == 0) {
      shadows.Release(victim.shadow);
      table_.Unlock(victim.block, victim.locked_value);  // dirty and writable, as before
      return;
    }
    // Still protected: a dirty entry would make its writer fault for ever. The captured image
    // goes on to the file instead, and the block is clean (and protected) meanwhile.
    UMAP_LOG(kError, "UFFDIO_WRITEPROTECT(clear) failed after a failed eviction at ", AddrHex(addr),
             "; its captured image is written back");
    shadows_pending_.fetch_add(1, std::memory_order_relaxed);
    table_.Unlock(victim.block,
                  Table::WithShadow(victim.locked_value & ~Table::kDirty, victim.shadow));
    dirty_.fetch_sub(1, std::memory_order_relaxed);
    shadows.Enqueue(victim.shadow);
    return;
  }
  if (victim.shadow != IndexStack::kEmpty) {
    shadows_pending_.fetch_add(1, std::memory_order_relaxed);
    table_.Unlock(victim.block, victim.unlock_value);
    dirty_.fetch_sub(1, std::memory_order_relaxed);
    shadows.Enqueue(victim.shadow);
    c.dirty_evictions.fetch_add(1, std::memory_order_relaxed);
  } else {
    table_.Unlock(victim.block, victim.unlock_value);
  }
  resident_.fetch_sub(1, std::memory_order_relaxed);
  c.evictions.fetch_add(1, std::memory_order_relaxed);
}

bool Mapping::WriteShadows(absl::Span<const uint32_t> ids) {
  if (!ForeignRefusal().ok()) return false;  // kept in memory, never written (conflict)
  OwnWrite own(this);
  ShadowPool& shadows = rt_->shadows();
  std::vector<uint32_t> order(ids.begin(), ids.end());
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return shadows.at(a).block < shadows.at(b).block; });
  std::vector<BlockImage> images;
  images.reserve(order.size());
  for (uint32_t s : order) {
    const ShadowPool::Shadow& sh = shadows.at(s);
    images.push_back({first_file_block() + sh.block, absl::MakeConstSpan(sh.data, sh.len)});
  }
  WriteBackResult r = write_back_->Evicted(images);
  if (!r.ok()) {
    int err = ErrnoFromStatus(r.status);
    rt_->counters().io_errors.fetch_add(1, std::memory_order_relaxed);
    rt_->NoteWriteBackError(err);
    if (!r.kept) {
      for (uint32_t s : order) {
        if (shadows.at(s).error.exchange(err, std::memory_order_relaxed) == 0 && s == order[0]) {
          UMAP_LOG_EVERY(kError, 10, "write-back of ", order.size(), " evicted blocks of ",
                         file_->name(), " failed (kept in memory, retrying): ",
                         r.status.ToString());
        }
        shadows.at(s).attempts.fetch_add(1, std::memory_order_release);
      }
      return false;
    }
    // Committed, only the apply failed: the journal holds the images and the next umsync
    // applies them; the shadows are no longer needed and must not be journaled again.
    UMAP_LOG_EVERY(kError, 10, "write-back of ", order.size(), " evicted blocks of ",
                   file_->name(),
                   " is journaled but could not be applied yet (the next umsync retries): ",
                   r.status.ToString());
  }
  for (uint32_t s : order) {
    ShadowPool::Shadow& sh = shadows.at(s);
    Table::Entry e = table_.Lock(sh.block);
    uint64_t v = e.v;
    if (e.shadow() && e.shadow_index() == s) {
      v = Table::WithoutShadow(v);
      // The sink holds the image (staged, or committed and not yet applied): a miss asks it.
      if (write_back_->keeps_evicted() || !r.ok() || !r.applied) v |= Table::kStaged;
    }
    table_.Unlock(sh.block, v);
    shadows_pending_.fetch_sub(1, std::memory_order_relaxed);
    shadows.Release(s);
  }
  if (!r.ok()) return true;
  rt_->counters().blocks_written.fetch_add(order.size(), std::memory_order_relaxed);
  return true;
}

absl::Status Mapping::WaitForShadows(uint64_t first, uint64_t end) {
  // A shadow whose last write-back failed is not a verdict yet: the write-back thread retries
  // it every 100 ms, and the condition (a full disk, say) may be gone by now. Report the
  // error of an attempt made while this umsync waited, never a stale one; give up waiting
  // for a fresh attempt after a bounded time (a stuck write-back thread).
  constexpr auto kFreshAttemptBudget = std::chrono::seconds(2);
  for (uint64_t b = first; b < end && shadows_pending_.load(std::memory_order_acquire) > 0; ++b) {
    uint32_t watched = IndexStack::kEmpty;
    uint32_t attempts_seen = 0;
    std::chrono::steady_clock::time_point since;
    for (;;) {
      Table::Entry e = table_.Load(b);
      if (!e.shadow()) break;
      const uint32_t s = e.shadow_index();
      ShadowPool::Shadow& sh = rt_->shadows().at(s);
      const uint32_t attempts = sh.attempts.load(std::memory_order_acquire);
      if (s != watched) {
        watched = s;
        attempts_seen = attempts;
        since = std::chrono::steady_clock::now();
      }
      const int err = sh.error.load(std::memory_order_relaxed);
      if (err != 0 && (attempts != attempts_seen ||
                       std::chrono::steady_clock::now() - since > kFreshAttemptBudget)) {
        return PosixError(err, absl::StrCat("write-back of evicted block ", b, " of ",
                                            file_->name(), " is failing"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return absl::OkStatus();
}

void Mapping::ReleaseAll() {
  BlockPool& pool = rt_->pool();
  for (uint64_t b = 0; b < table_.size(); ++b) {
    Table::Entry e = table_.Load(b);
    if ((e.present() || e.parked()) && pool.Claim(e.cache_block())) pool.Release(e.cache_block());
    if (e.parked()) rt_->sizer()->parks().Release(e.park_index());
    if (e.stashed()) pool.Release(e.cache_block());  // a stashed block's cache block is held busy
  }
}

absl::Status Mapping::StageDirty() {
  absl::MutexLock lock(&sync_mu_);
  RETURN_IF_ERROR(WaitForShadows(0, table_.size()));
  Capture& cap = capture_;
  absl::Cleanup reset = [&cap] { cap.Reset(); };
  // A chunk at a time, as a umsync captures (SyncStaging).
  const size_t chunk_bytes = ChunkBytes();
  for (uint64_t b = 0, next = 0; b < table_.size(); b = next) {
    RETURN_IF_ERROR(CaptureDirty(b, table_.size(), &cap, chunk_bytes, &next));
    if (!cap.blocks.empty()) RETURN_IF_ERROR(StageCaptured(cap));
  }
  return absl::OkStatus();
}

int Mapping::Evacuate() {
  // Nothing runs in the mapping (no fault, no fill, no write-back), so entries cannot change
  // between this check and the loop below; the check comes first so that a refusal leaves
  // every block as it was.
  for (uint64_t b = 0; b < table_.size(); ++b) {
    const Table::Entry e = table_.Load(b);
    if (e.locked() || e.dirty() || e.shadow() || e.filling()) {
      // The quiesce wrote back and drained everything before; a block still holding
      // unwritten data here would be lost with its pages.
      UMAP_LOG(kError, "checkpoint: block ", b, " of ", file_->name(),
               " is still locked, dirty, in write-back or filling (entry 0x", absl::Hex(e.v),
               "); the mapping is left as it is");
      return EBUSY;
    }
  }
  BlockPool& pool = rt_->pool();
  for (uint64_t b = 0; b < table_.size(); ++b) {
    Table::Entry e = table_.Lock(b);
    if ((e.present() || e.parked()) && pool.Claim(e.cache_block())) pool.Release(e.cache_block());
    // A parked block is clean (parking takes clean blocks only, and its next access
    // installs it before any write): the file, or for a staged block the journal, holds
    // its data, so its park buffer's copy is dropped like the pages of a present block.
    if (e.parked()) rt_->sizer()->parks().Release(e.park_index());
    if (e.stashed()) {
      pool.Release(e.cache_block());
      stash_free_.Push(e.stash_index());
    }
    // A staged block's image is in the journal (atomic policy): a miss reads it from there.
    table_.Unlock(b, e.v & Table::kStaged);
  }
  resident_.store(0, std::memory_order_relaxed);
  dirty_.store(0, std::memory_order_relaxed);
  for (Stream& st : streams_) {
    st.next.store(~0ull, std::memory_order_relaxed);
    st.length.store(0, std::memory_order_relaxed);
    st.ahead.store(0, std::memory_order_relaxed);
    st.trigger.store(~0ull, std::memory_order_relaxed);
  }
  return DiscardPages(base_, region_length_);
}

}  // namespace umap::runtime
