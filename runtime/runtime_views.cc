// The narrow view of a Runtime that its rooms get: what the cache sizer may use
// (SizerHost) and what the stats publisher may read (StatsSource). Each call forwards to
// the runtime; nothing here adds behaviour.
#include "runtime/fault/mapping.h"
#include "runtime/runtime.h"

namespace umap::runtime {

uint32_t Runtime::RoomView::block_size() const { return rt_->geo_.block_size; }
void Runtime::RoomView::WhileMappingsPinned(absl::FunctionRef<void()> fn) {
  rt_->WhileMappingsPinned(fn);
}
void Runtime::RoomView::ForEachMapping(absl::FunctionRef<void(Mapping&)> fn) {
  rt_->ForEachMapping(fn);
}

BlockPool& Runtime::RoomView::pool() { return rt_->pool(); }
Mapping* Runtime::RoomView::MappingAt(uint32_t slot) const { return rt_->MappingAt(slot); }
uint32_t Runtime::RoomView::ShrinkPool(uint32_t max_blocks) { return rt_->ShrinkPool(max_blocks); }
int Runtime::RoomView::EvictBatchSize(bool bulk) const { return rt_->EvictBatchSize(bulk); }
void Runtime::RoomView::UpdateReadCap() { rt_->UpdateReadCap(); }
int Runtime::RoomView::pidfd() const { return rt_->pidfd(); }
uint64_t Runtime::RoomView::UnrealizedBufferBytes() { return rt_->io().UnrealizedBufferBytes(); }

const RuntimeOptions& Runtime::RoomView::options() const { return rt_->options(); }
UffdAccess Runtime::RoomView::uffd_access() { return rt_->uffd().access(); }
uint64_t Runtime::RoomView::NowMicros() { return rt_->env()->NowMicros(); }
umap_stats Runtime::RoomView::Stats() { return rt_->Stats(); }
uint32_t Runtime::RoomView::pool_limit() { return rt_->pool().limit(); }
CacheSizer* Runtime::RoomView::sizer() { return rt_->sizer(); }
io::InFlight Runtime::RoomView::InFlightNow() { return rt_->io().InFlightNow(); }
bool Runtime::RoomView::TryJournalStats(journal::Journal::Stats* out, bool* open,
                                         std::string* dir) {
  return rt_->TryJournalStats(out, open, dir);
}

}  // namespace umap::runtime
