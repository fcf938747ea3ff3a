// Mapping: changes of its file made outside its cache (a write(2), ftruncate or fallocate
// of the same process, which the LD_PRELOAD shim reports: docs/preload.md, "One copy").
// The kernel's page cache is one copy of the file for every way into it; Umap's cache is a
// second one, so the shim makes sure the file holds the cache's unsynced changes before it
// changes the file (Runtime::PrepareFileChange), and the cache drops its copies of what
// changed afterwards (here).
#include <sys/mman.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "runtime/fault/mapping.h"
#include "runtime/fault/mapping_host.h"

namespace umap::runtime {

using Table = CacheEntryTable;

namespace {

absl::Hex AddrHex(const void* p) {
  return absl::Hex(reinterpret_cast<uintptr_t>(p), absl::kZeroPad16);
}

}  // namespace

uint64_t Mapping::DropCopies(uint64_t first, uint64_t end, bool drop_dirty) {
  uint64_t kept = 0;
  end = std::min<uint64_t>(end, table_.size());
  for (uint64_t b = first; b < end; ++b) {
    if (!DropCopy(b, drop_dirty)) ++kept;
  }
  return kept;
}

bool Mapping::DropCopy(uint64_t block, bool drop_dirty) {
  Table::Entry e;
  for (;;) {
    e = table_.Lock(block);
    // A fill in flight may have read the file before it changed: let it land, then drop it.
    // An evicted version still on its way to the file would write old bytes over the
    // change: the caller's PrepareFileChange waited for those of the range; one evicted
    // since (a store racing the write) lands first.
    if (!e.filling() && !e.shadow()) break;
    table_.Unlock(block, e.v);
    if (e.filling()) {
      WaitWhileFilling(block);
    } else {
      WaitForShadows(block, block + 1).IgnoreError();  // a failing write-back keeps the block
      if (table_.Load(block).shadow()) return false;
    }
  }
  const uint64_t keep = e.v & (Table::kStaged | Table::kSeen);
  BlockPool& pool = rt_->pool();
  if (e.present()) {
    if ((e.dirty() && !drop_dirty) || e.syncing()) {
      // Stored to since the caller's umsync (a store racing the write), or held by a umsync
      // in progress: the program's own race; the block keeps its bytes.
      table_.Unlock(block, e.v);
      return false;
    }
    if (int err = DiscardPages(BlockAddr(block), block_size_)) {
      UMAP_LOG(kError, "MADV_DONTNEED failed at ", AddrHex(BlockAddr(block)), " (block ", block,
               " of ", file_->name(), "): errno ", err, "; it keeps the bytes it had");
      table_.Unlock(block, e.v);
      return false;
    }
    if (pool.Claim(e.cache_block())) pool.Release(e.cache_block());
    resident_.fetch_sub(1, std::memory_order_relaxed);
    if (e.dirty()) dirty_.fetch_sub(1, std::memory_order_relaxed);
    table_.Unlock(block, keep);
    return true;
  }
  if (e.parked()) {
    if (pool.Claim(e.cache_block())) pool.Release(e.cache_block());
    rt_->sizer()->parks().Release(e.park_index());
    resident_.fetch_sub(1, std::memory_order_relaxed);
  } else if (e.stashed()) {
    pool.Release(e.cache_block());
    stash_free_.Push(e.stash_index());
  } else if (e.poisoned() && DiscardPages(BlockAddr(block), block_size_) != 0) {
    // The poison markers stay: the block keeps raising SIGBUS.
    table_.Unlock(block, e.v);
    return false;
  }
  table_.Unlock(block, keep);
  return true;
}

uint64_t Mapping::FileChanged(uint64_t first, uint64_t end, uint64_t file_size) {
  const uint64_t old = file_size_.exchange(file_size, std::memory_order_acq_rel);
  uint64_t kept = DropCopies(first, end, /*drop_dirty=*/false);
  if (file_size != old) {
    // The blocks from the one that held the old end of file, or holds the new one, on:
    // their valid bytes changed, and so did which pages raise SIGBUS. Past a new, smaller
    // end the cache's bytes go, dirty or not, as the kernel drops a truncated page cache.
    const uint64_t lo = std::min(old, file_size);
    const uint64_t from = lo <= file_offset_ ? 0 : (lo - file_offset_) / block_size_;
    const uint64_t shrunk_from =
        file_size <= file_offset_ ? 0 : (file_size - file_offset_ + block_size_ - 1) / block_size_;
    for (uint64_t b = from; b < table_.size(); ++b) {
      if (!DropCopy(b, /*drop_dirty=*/b >= shrunk_from && file_size < old)) ++kept;
    }
  }
  return kept;
}

void Mapping::NoteOwnWrite() {
  last_own_write_us_.store(rt_->env()->NowMicros(), std::memory_order_relaxed);
}

Mapping::Foreign Mapping::ForeignChange(uint64_t file_size) {
  if (file_size < this->file_size()) {
    FileChanged(0, 0, file_size);
    return Foreign::kOwn;
  }
  const uint64_t now = rt_->env()->NowMicros();
  const uint64_t last = last_own_write_us_.load(std::memory_order_relaxed);
  if (own_writes_.load(std::memory_order_acquire) > 0 ||
      now - last < static_cast<uint64_t>(kOwnWriteWindowUs)) {
    return Foreign::kOwn;
  }
  bool unwritten = dirty_blocks() > 0 || shadows_pending_.load(std::memory_order_acquire) > 0;
  for (uint64_t b = 0; b < table_.size() && !unwritten; ++b) {
    unwritten = table_.Load(b).staged();  // an evicted image the sink keeps (atomic policy)
  }
  if (!unwritten) {
    FileChanged(0, table_.size(), file_size);
    return Foreign::kDropped;
  }
  {
    absl::MutexLock l(&foreign_mu_);
    if (!foreign_refused_.load(std::memory_order_relaxed)) {
      foreign_status_ = PosixError(
          EBUSY, absl::StrCat("umap: another process changed ", file_->name(),
                              " while this mapping held unwritten changes: writing its "
                              "blocks back would overwrite the other's bytes in them, so it "
                              "writes nothing more (its changes stay in memory, unwritten)"));
      UMAP_LOG(kError, foreign_status_.message());
      foreign_refused_.store(true, std::memory_order_release);
    }
  }
  return Foreign::kRefused;
}

}  // namespace umap::runtime
