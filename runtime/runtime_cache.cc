// Runtime: the cache's blocks (acquiring one, shrinking and sizing the pool, room kept
// outside it) and the write-back thread that evicts in batches.
#include "runtime/runtime.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/fs_kind.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/private_dir.h"
#include "base/status_macros.h"
#include "recovery/recovery.h"
#include "runtime/fault/fault_signal.h"
#include "runtime/fault/mapping.h"
#include "runtime/sizing/system_memory_probe.h"
#include "runtime/umap_c_internal.h"
#include "runtime/writeback/guarded_write_back.h"
#include "runtime/writeback/journal_write_back.h"

namespace umap::runtime {

void Runtime::WriteBackLoop() {
  // Each round takes every queued shadow (up to a batch), groups them by mapping and hands
  // each group to its sink at once: one journal transaction (or staging batch) for many
  // evictions instead of one fsync each.
  ::pthread_setname_np(::pthread_self(), "umap-writeback");
  constexpr size_t kBatch = 64;
  std::vector<uint32_t> batch;
  std::vector<uint32_t> group;
  batch.reserve(kBatch);
  for (;;) {
    uint32_t s = shadows_.Dequeue(stop_);
    if (s == IndexStack::kEmpty) return;
    batch.clear();
    batch.push_back(s);
    while (batch.size() < kBatch && (s = shadows_.TryDequeue()) != IndexStack::kEmpty) {
      batch.push_back(s);
    }
    bool failed = false;
    while (!batch.empty()) {
      Mapping* m = shadows_.at(batch.front()).mapping;
      group.clear();
      // One block has at most one shadow in flight, so a group never holds a block twice.
      auto rest = std::partition(batch.begin(), batch.end(),
                                 [&](uint32_t i) { return shadows_.at(i).mapping != m; });
      group.assign(rest, batch.end());
      batch.erase(rest, batch.end());
      if (m->WriteShadows(group)) continue;
      failed = true;
      if (stop_.load(std::memory_order_acquire)) {
        UMAP_LOG(kError, "shutting down with ", group.size(), " evicted blocks of ",
                 m->file()->name(), " that could not be written back");
        continue;
      }
      for (uint32_t i : group) shadows_.Enqueue(i);
    }
    // After a failure, back off before the retry; the blocks stay readable from their
    // shadows and umsync reports the error meanwhile.
    if (failed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Runtime::EvictBatch(const uint32_t* cache_blocks, const uint64_t* owners, int n, bool* freed,
                         int pass, EvictionBatch& batch) {
  batch.count = 0;
  // Several mappings share the cache by marginal gain (cache_sizer.h): in the clock's first
  // sweep, a mapping within its share keeps its blocks while another is over its share.
  const bool quotas = pass == 0 && sizer_ != nullptr && sizer_->quotas_active();
  for (int i = 0; i < n; ++i) {
    freed[i] = false;
    Mapping* m = slots_[owners[i] >> 48].load(std::memory_order_acquire);
    // A mapping being unmapped frees its blocks in its own teardown.
    if (m == nullptr) continue;
    if (quotas && m->resident_blocks() <= m->quota()) continue;
    if (m->PrepareEvict(owners[i] & ((1ull << 48) - 1), cache_blocks[i], &batch)) {
      batch.victims[batch.count - 1].index = i;
    }
  }
  if (batch.count == 0) return;
  DiscardBatch(pidfd_, &batch);
  for (int k = 0; k < batch.count; ++k) {
    const EvictionBatch::Victim& v = batch.victims[k];
    v.mapping->FinishEvict(v);
    freed[v.index] = v.discarded;
  }
}

int Runtime::EvictBatchSize(bool bulk) const {
  // Evictions are batched so that one TLB flush covers many (eviction_batch.h). A batch's
  // victims leave before they must, and while the next misses take their blocks the cache
  // holds that much less: with a working set about the cache's size, batches of 1/8 of an
  // 8 MiB cache doubled the misses against 1/64. Read-ahead (bulk) takes blocks by the
  // window and re-reads nothing: its batches may be 1/8 of the cache, which lets a scan
  // through a small cache (lazy sizing keeps one at 8 MiB) flush a TLB per 256 evictions.
  return static_cast<int>(
      std::clamp<uint32_t>(pool_.limit() / (bulk ? 8 : 64), 1, EvictionScratch::kLargeBatch));
}

uint32_t Runtime::TryAcquireBlock(bool bulk) {
  // A free block needs no eviction buffers.
  const uint32_t free = pool_.TryTakeFree();
  if (free != BlockPool::kNone) return free;
  return eviction_scratch_.With([this, bulk](BlockPool::Victims* victims, EvictionBatch* batch) {
    return pool_.AcquireBatched([this, batch](const uint32_t* c, const uint64_t* o, int n, bool* f,
                                              int pass) { EvictBatch(c, o, n, f, pass, *batch); },
                                [this] { refs_.ReclaimDead(); }, victims, EvictBatchSize(bulk));
  });
}

uint32_t Runtime::ShrinkPool(uint32_t max_blocks) {
  return eviction_scratch_.With([&](BlockPool::Victims* victims, EvictionBatch* batch) {
    return pool_.Shrink([this, batch](const uint32_t* c, const uint64_t* o, int n, bool* f,
                                      int pass) { EvictBatch(c, o, n, f, pass, *batch); },
                        victims, EvictBatchSize(/*bulk=*/false), max_blocks);
  });
}

void Runtime::ReserveOutsideCache(uint64_t bytes) { AdjustOutsideCache(bytes, 0); }

void Runtime::ReleaseOutsideCache(uint64_t bytes) { AdjustOutsideCache(0, bytes); }

void Runtime::AdjustOutsideCache(uint64_t add, uint64_t remove) {
  if (sizer_ != nullptr) {
    if (add != 0) sizer_->Reserve(add);
    if (remove != 0) sizer_->Release(remove);
    return;
  }
  absl::MutexLock l(&outside_mu_);
  if (outside_reserved_ == 0) fixed_limit_ = pool_.limit();
  outside_reserved_ += add;
  outside_reserved_ -= std::min(outside_reserved_, remove);
  const uint64_t take = outside_reserved_ / geo_.block_size;
  pool_.set_limit(static_cast<uint32_t>(
      std::max<uint64_t>(SizingPolicy::kMinBlocks, fixed_limit_ > take ? fixed_limit_ - take : 0)));
  UpdateReadCap();
}

void Runtime::MakeRoom(uint32_t max_blocks) {
  if (sizer_ != nullptr || pool_.held() <= pool_.limit()) return;
  WhileMappingsPinned([&] { ShrinkPool(max_blocks); });
}

void Runtime::UpdateReadCap() {
  io_->SetReadCap(
      std::max<size_t>(io_->options().max_io_bytes, size_t{pool_.limit()} * geo_.block_size / 2));
}

absl::Status Runtime::StartSizing() {
  std::shared_ptr<MemoryProbe> probe = options_.memory_probe;
  if (!options_.lazy_sizing && options_.cache_bytes != 0) return absl::OkStatus();  // fixed
  // Without lazy sizing the budget is read once: no pressure trigger.
  if (probe == nullptr) probe = SystemMemoryProbe::Create("", options_.lazy_sizing);
  if (options_.lazy_sizing) {
    CacheSizer::Options o;
    o.start_blocks = geo_.start_blocks;
    o.min_step_blocks = static_cast<uint32_t>(std::max<size_t>(16, (1u << 20) / geo_.block_size));
    ASSIGN_OR_RETURN(sizer_, CacheSizer::Create(&view_, std::move(probe), o));
    return absl::OkStatus();
  }
  // Lazy sizing off, cache_bytes unset: a fixed cache of what the budget allows now.
  ASSIGN_OR_RETURN(MemorySample sample, probe->Sample());
  MemoryBudget budget;
  budget.Update(sample, 0, io_->UnrealizedBufferBytes());
  pool_.set_limit(static_cast<uint32_t>(std::min<uint64_t>(
      pool_.capacity(),
      std::max<uint64_t>(SizingPolicy::kMinBlocks, budget.allowance() / geo_.block_size))));
  UMAP_LOG(kInfo, "fixed cache of ", uint64_t{pool_.limit()} * geo_.block_size >> 20,
           " MiB from the memory budget (", probe->Describe(), ")");
  return absl::OkStatus();
}

}  // namespace umap::runtime
