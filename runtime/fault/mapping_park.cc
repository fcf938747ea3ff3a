// Mapping: the parts of lazy sizing that touch a block's entry (docs/design.md "Cache
// sizing"): re-misses and sampled accesses on the fault path, and parking.
#include <cstring>

#include "base/log.h"
#include "base/posix_error.h"
#include "runtime/fault/mapping.h"
#include "runtime/fault/mapping_host.h"
#include "runtime/sizing/cache_sizer.h"

namespace umap::runtime {
namespace {

using Table = CacheEntryTable;

}  // namespace

void Mapping::NoteMiss(uint64_t block, Table::Entry pk) {
  if (pk.present() || pk.poisoned()) return;  // resolved meanwhile: a stale fault
  const bool hit = pk.parked();
  // A block an application had before misses again: its reuse distance exceeds the cache.
  // (A queued fill is a stream's read-ahead or another thread's miss, counted there.)
  if (!hit && !pk.filling()) {
    if (pk.seen()) {
      remisses_.fetch_add(1, std::memory_order_relaxed);
      if (CacheSizer* s = rt_->sizer()) s->OnReMiss();
    } else if (CacheSizer* s = rt_->sizer()) {
      s->OnFirstMiss();
    }
  }
  if (tracker_ != nullptr && tracker_->Sampled(block)) {
    tracker_->Record(block, hit ? ReuseTracker::Kind::kHit : ReuseTracker::Kind::kMiss,
                     ReuseTracker::Now());
  }
}

uint64_t Mapping::InstallParked(uint64_t block, Table::Entry e, bool write, int* err) {
  const bool dirty = write && writable_;
  BufferArena& parks = rt_->sizer()->parks();
  *err = InstallBlock(block, parks.at(e.park_index()), block_size_, dirty);
  if (*err != 0) return 0;
  parks.Release(e.park_index());
  return Table::WithoutPark(e.v) | Table::kPresent | Table::kSeen | (dirty ? Table::kDirty : 0);
}

void Mapping::ServeParked(uint64_t block, Table::Entry e, bool write, pid_t tid) {
  int err = 0;
  const uint64_t v = InstallParked(block, e, write, &err);
  const uint32_t cache_block = e.cache_block();
  if (err != 0) {
    // The block leaves the cache (it is clean: the file has its data) and the access gets
    // SIGBUS, as any miss whose UFFDIO_COPY fails.
    BlockPool& pool = rt_->pool();
    if (pool.Claim(cache_block)) pool.Release(cache_block);
    rt_->sizer()->parks().Release(e.park_index());
    resident_.fetch_sub(1, std::memory_order_relaxed);
    RaiseSigbus(block, Table::WithoutPark(e.v) & ~Table::kCbMask, tid,
                PosixError(err, "UFFDIO_COPY of a parked block"));
    return;
  }
  // Still counted resident; dirty counted before the unlock (PublishFilled).
  if (v & Table::kDirty) dirty_.fetch_add(1, std::memory_order_relaxed);
  table_.Unlock(block, v);
  rt_->pool().Touch(cache_block);
  rt_->refs().Touch(tid, cache_block);
  sampled_hits_.fetch_add(1, std::memory_order_relaxed);
  rt_->counters().faults_missing.fetch_add(1, std::memory_order_relaxed);
}

bool Mapping::PreparePark(uint64_t block, uint32_t park, EvictionBatch* batch) {
  // Whole blocks only (the last block of a file may end inside a page).
  if (block >= table_.size() || ValidBytes(block) != block_size_) return false;
  Table::Entry e;
  if (!table_.TryLock(block, &e)) return false;
  // Clean (a clean block of a writable mapping is write-protected, so nothing changes it
  // between the copy and the discard), not on its way to the file (a shadow, or captured by
  // a umsync whose outcome is not known: kSyncing), and not referenced by a thread that is
  // working on it. The other clean blocks of a umsync's range are parked as anywhere: a
  // program that umsyncs often is in a umsync most of the time.
  if (!e.present() || e.dirty() || e.shadow() || e.syncing() ||
      rt_->pool().state(e.cache_block()) != CbState::kSemiActive) {
    table_.Unlock(block, e.v);
    return false;
  }
  char* addr = BlockAddr(block);
  std::memcpy(rt_->sizer()->parks().at(park), addr, block_size_);
  EvictionBatch::Victim& v = batch->victims[batch->count];
  v = {this, block, e.v, Table::WithPark(e.v, park), IndexStack::kEmpty, -1, false, park};
  batch->ranges[batch->count] = {addr, block_size_};
  ++batch->count;
  return true;
}

void Mapping::FinishPark(const EvictionBatch::Victim& v) {
  if (v.discarded) {
    table_.Unlock(v.block, v.unlock_value);
    return;
  }
  // Its pages are still mapped: it stays resident as it was.
  UMAP_LOG(kWarn, "MADV_DONTNEED failed while parking block ", v.block, " of ", file_->name(),
           "; it stays resident");
  rt_->sizer()->parks().Release(v.park);
  table_.Unlock(v.block, v.locked_value);
}

bool Mapping::EvictParked(uint64_t block, uint32_t park) {
  if (block >= table_.size()) return false;
  Table::Entry e;
  if (!table_.TryLock(block, &e)) return false;
  BlockPool& pool = rt_->pool();
  // Claim waits only for the pool's own eviction of this block, which cannot take the
  // entry's lock (held here) and so gives the block back at once.
  if (!e.parked() || e.park_index() != park || !pool.Claim(e.cache_block())) {
    table_.Unlock(block, e.v);
    return false;
  }
  pool.Release(e.cache_block());
  rt_->sizer()->parks().Release(park);
  table_.Unlock(block, Table::WithoutPark(e.v) & ~Table::kCbMask);
  resident_.fetch_sub(1, std::memory_order_relaxed);
  rt_->counters().evictions.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace umap::runtime
