// StatsSource: what the stats publisher reads from the runtime it publishes: figures that
// can be had without blocking on anything a stuck file system or a umsync could hold.
// Runtime gives it a view of itself (Runtime::RoomView).
#ifndef UMAP_RUNTIME_STATS_STATS_SOURCE_H_
#define UMAP_RUNTIME_STATS_STATS_SOURCE_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "journal/journal.h"
#include "runtime/fault/uffd.h"
#include "runtime/io/io_manager.h"
#include "runtime/options.h"
#include "umap/umap_types.h"

namespace umap::runtime {

class CacheSizer;
class Mapping;

class StatsSource {
 public:
  virtual const RuntimeOptions& options() const = 0;
  virtual uint32_t block_size() const = 0;
  virtual UffdAccess uffd_access() = 0;
  virtual uint64_t NowMicros() = 0;
  // Runs fn while no mapping can be freed; the calls below only inside it.
  virtual void WhileMappingsPinned(absl::FunctionRef<void()> fn) = 0;
  virtual void ForEachMapping(absl::FunctionRef<void(Mapping&)> fn) = 0;
  virtual umap_stats Stats() = 0;
  virtual uint32_t pool_limit() = 0;
  // Lazy sizing's controller; null when lazy sizing is off.
  virtual CacheSizer* sizer() = 0;
  virtual io::InFlight InFlightNow() = 0;
  // The journal's figures and directory if they can be had without waiting; *open = a
  // journal is open.
  virtual bool TryJournalStats(journal::Journal::Stats* out, bool* open, std::string* dir) = 0;

 protected:
  ~StatsSource() = default;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_STATS_STATS_SOURCE_H_
