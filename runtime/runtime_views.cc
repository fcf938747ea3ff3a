// The narrow views of a Runtime that its rooms get: what the cache sizer may use
// (SizerHost) and what the stats publisher may read (StatsSource). Each call forwards to
// the runtime; nothing here adds behaviour.
#include "runtime/fault/mapping.h"
#include "runtime/runtime.h"

namespace umap::runtime {

BlockPool& Runtime::SizerView::pool() { return rt_->pool(); }
uint32_t Runtime::SizerView::block_size() const { return rt_->geo_.block_size; }
void Runtime::SizerView::WhileMappingsPinned(absl::FunctionRef<void()> fn) {
  rt_->WhileMappingsPinned(fn);
}
void Runtime::SizerView::ForEachMapping(absl::FunctionRef<void(Mapping&)> fn) {
  rt_->ForEachMapping(fn);
}
Mapping* Runtime::SizerView::MappingAt(uint32_t slot) const { return rt_->MappingAt(slot); }
uint32_t Runtime::SizerView::ShrinkPool(uint32_t max_blocks) { return rt_->ShrinkPool(max_blocks); }
int Runtime::SizerView::EvictBatchSize(bool bulk) const { return rt_->EvictBatchSize(bulk); }
void Runtime::SizerView::UpdateReadCap() { rt_->UpdateReadCap(); }
int Runtime::SizerView::pidfd() const { return rt_->pidfd(); }
uint64_t Runtime::SizerView::UnrealizedBufferBytes() { return rt_->io().UnrealizedBufferBytes(); }

const RuntimeOptions& Runtime::StatsView::options() const { return rt_->options(); }
uint32_t Runtime::StatsView::block_size() const { return rt_->geo_.block_size; }
UffdAccess Runtime::StatsView::uffd_access() { return rt_->uffd().access(); }
uint64_t Runtime::StatsView::NowMicros() { return rt_->env()->NowMicros(); }
void Runtime::StatsView::WhileMappingsPinned(absl::FunctionRef<void()> fn) {
  rt_->WhileMappingsPinned(fn);
}
void Runtime::StatsView::ForEachMapping(absl::FunctionRef<void(Mapping&)> fn) {
  rt_->ForEachMapping(fn);
}
umap_stats Runtime::StatsView::Stats() { return rt_->Stats(); }
uint32_t Runtime::StatsView::pool_limit() { return rt_->pool().limit(); }
CacheSizer* Runtime::StatsView::sizer() { return rt_->sizer(); }
io::InFlight Runtime::StatsView::InFlightNow() { return rt_->io().InFlightNow(); }
bool Runtime::StatsView::TryJournalStats(journal::Journal::Stats* out, bool* open,
                                         std::string* dir) {
  return rt_->TryJournalStats(out, open, dir);
}

}  // namespace umap::runtime
