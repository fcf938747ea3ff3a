// CacheSizer: lazy sizing of one runtime's cache (docs/design.md "Cache sizing").
//
// The cache starts small (`start_blocks`) and grows only on re-misses: a miss on a block
// that an application access brought into the cache before (its reuse distance exceeds the
// capacity). A re-miss while the pool is full raises the pool's limit by one step, up to
// the ceiling: max(min_step_blocks, limit / 8), or, when the last epoch's working sets
// (summed over the mappings) lie beyond that, the way to them, at most doubling the limit.
// A re-miss while the pool still has room grows it too, by one step, but never past the
// distinct blocks the applications have missed so far plus one step (nor past the last
// epoch's working sets): the eviction it proves happened means the cache is behind, and
// waiting for the pool to fill again would evict more of the set it is growing toward.
// First misses never grow it, so a scan of any length stays at the start.
//
// A thread (one per runtime, every 10 ms, or at once on a pressure event):
//   - drains the mappings' reuse trackers (reuse_tracker.h) and parks up to 16 sampled
//     resident blocks per tick (their pages are dropped and their data kept in one of 256
//     park buffers, so their next access faults once and is seen: a sampled hit; the blocks
//     whose rate is the oldest news go first; a block
//     still parked after 1 s is evicted, clean, so that the buffer watches another and
//     the block's next access, a miss, still measures its reuse from the parking);
//   - every 500 ms ends an epoch: each mapping's miss curve (reuse_tracker.h), virtual
//     capacity (the smallest capacity whose predicted misses per second stay within 10% of
//     the current ones plus 0.5% of all accesses) and working set are recomputed; with several
//     mappings the limit is split among them by marginal gain (capacity_split.h): a
//     mapping over its share gives up blocks first when the pool evicts;
//   - every 100 ms samples memory (memory_probe.h), updates the budget (memory_budget.h),
//     and, in a cgroup with a limit, publishes on the cgroup's board (cgroup_board.h) and
//     takes its fair share of the cgroup's room;
//   - runs the SizingPolicy (sizing_policy.h) with the pressure events (the probe's trigger,
//     or the usage threshold), and evicts down to a lowered limit: dirty blocks leave
//     through the write-back sink like any eviction (the journal first), never dropped.
//
// Checkpoints (docs/design.md "Cache sizing", "Across a checkpoint"): Runtime::Quiesce
// stops the thread with Stop, which also leaves the board and disarms the pressure trigger,
// and gives parked blocks back with the rest of the cache (Mapping::Evacuate); the runtime
// starts it again with Start.
//
// Thread safety: OnReMiss from any fault handler (no allocation, no lock, no system call);
// the rest is the sizer's thread and readers of the figures; Start, Stop and
// DropParkBuffers from the runtime's control paths (creation, quiesce, resume, destruction).
#ifndef UMAP_RUNTIME_SIZING_CACHE_SIZER_H_
#define UMAP_RUNTIME_SIZING_CACHE_SIZER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cache/buffer_arena.h"
#include "runtime/sizing/cgroup_board.h"
#include "runtime/sizing/memory_budget.h"
#include "runtime/sizing/memory_probe.h"
#include "runtime/sizing/sizer_host.h"
#include "runtime/sizing/sizing_policy.h"

namespace umap::runtime {

class Mapping;

class CacheSizer {
 public:
  struct Options {
    uint32_t start_blocks = 2048;
    uint32_t min_step_blocks = 256;
    uint32_t tick_ms = 10;
    uint32_t probe_ms = 100;
    uint32_t epoch_ms = 500;
    uint32_t parks_per_tick = 16;
    uint32_t park_buffers = 256;
    uint32_t park_max_ms = 1000;
    uint32_t shrink_per_tick = 4096;  // blocks evicted per tick at most when shrinking
    double tolerance = 0.10;          // virtual capacity: misses within 10% ...
    double floor_fraction = 0.005;    // ... plus 0.5% of the accesses
    bool use_board = true;
    std::string board_dir = "/dev/shm";
  };
  struct Figures {
    uint32_t limit = 0, ceiling = 0, virtual_blocks = 0;
    uint64_t grows = 0, blocked = 0, shrunk_blocks = 0, pressure_events = 0;
    uint64_t parks = 0, expired_parks = 0;
    uint32_t board_runtimes = 0;
  };

  // Samples memory once (so the first limit respects the budget) and sets the pool's limit
  // to min(start, ceiling); the thread starts with Start().
  static absl::StatusOr<std::unique_ptr<CacheSizer>> Create(SizerHost* rt,
                                                            std::shared_ptr<MemoryProbe> probe,
                                                            const Options& o);
  ~CacheSizer();  // stops the thread
  CacheSizer(const CacheSizer&) = delete;
  CacheSizer& operator=(const CacheSizer&) = delete;
  // Starts the thread ("umap-sizer") unless it runs; after a Stop, first arms the probe
  // again (MemoryProbe::Rearm) and samples memory at once. Start and Stop alternate across
  // a checkpoint (Runtime::Quiesce stops, StartMachinery starts).
  void Start();
  // Stops the thread and waits for it (nothing is parked, expired or evicted by the sizer
  // afterwards), leaves the cgroup board and disarms the probe's pressure trigger: nothing
  // of the sizer is left in the kernel but plain memory and an idle eventfd. Idempotent.
  // The park buffers stay, for the mappings that still hold some.
  void Stop();
  // After every mapping gave its parked blocks back (Mapping::Evacuate): drops the pages
  // of the park buffers, so that a checkpoint's image holds no copy of file data. Does
  // nothing while a buffer is in use. REQUIRES: the thread stopped.
  void DropParkBuffers();

  // Fault path: a re-miss (see above), and a block's first miss (counted, the early
  // growth's bound).
  void OnReMiss();
  void OnFirstMiss() { first_misses_.fetch_add(1, std::memory_order_relaxed); }
  // Runtime::EvictBatch: a mapping holding no more than its share declines to be a victim
  // in the clock's first sweep while another mapping holds more than its share.
  bool quotas_active() const { return quotas_active_.load(std::memory_order_relaxed); }

  // Memory about to be held outside the cache for a while (a large umsync's journal
  // traffic): counted against the cache's allowance from the sizer's next tick (which
  // samples memory again) until Release, so that the cache shrinks to make room.
  void Reserve(uint64_t bytes) {
    budget_.Reserve(bytes);
    reprobe_.store(true, std::memory_order_relaxed);
  }
  void Release(uint64_t bytes) {
    budget_.Release(bytes);
    reprobe_.store(true, std::memory_order_relaxed);
  }

  BufferArena& parks() { return parks_; }
  MemoryBudget& budget() { return budget_; }
  const MemoryProbe& probe() const { return *probe_; }
  uint32_t floor_blocks() const { return floor_blocks_; }
  Figures figures() const;

 private:
  CacheSizer(SizerHost* rt, std::shared_ptr<MemoryProbe> probe, const Options& o,
             uint32_t floor_blocks);
  void Loop();
  // One round; returns whether there is work left (the next round comes sooner).
  bool Tick(uint64_t now_us, bool pressure_event);
  // Drains every tracker and parks sampled blocks.
  bool DrainAndPark(uint32_t now_ms);
  // Evicts the blocks parked longer than park_max_ms.
  void ExpireParks(uint32_t now_ms);
  // Virtual capacities, working sets, and the split among mappings.
  void EndEpoch();
  void ProbeMemory(uint64_t now_us);
  // A machine-wide trigger (MemoryProbe::pressure_is_machine_wide) while this process has a
  // memory cgroup limit of its own, and the machine has at least the room that limit still
  // allows: another cgroup's reclaim, not this process's pressure (its own limit is watched
  // by usage, MemoryBudget::near_limit). Said once, at info level.
  bool ForeignPressure();
  // A growth step: max(min_step_blocks, limit / 8); step() stretches it toward the last
  // epoch's working sets.
  uint32_t base_step(uint32_t limit) const;
  uint32_t step(uint32_t limit) const;

  SizerHost* const rt_;  // the owner, through the view the sizer needs
  const std::shared_ptr<MemoryProbe> probe_;
  const Options options_;
  const uint32_t floor_blocks_;
  SizingPolicy policy_;
  MemorySample last_sample_;  // of the last ProbeMemory (sizer's thread)
  bool foreign_pressure_logged_ = false;
  MemoryBudget budget_;
  BufferArena parks_;
  std::unique_ptr<CgroupBoard> board_;

  std::atomic<uint32_t> ceiling_{0};
  std::atomic<uint32_t> allowance_blocks_{0};
  std::atomic<uint32_t> virtual_blocks_{0};
  std::atomic<uint32_t> wanted_blocks_{0};  // the mappings' working sets, summed (epoch)
  std::atomic<bool> quotas_active_{false};
  std::atomic<uint64_t> grows_{0}, blocked_{0}, shrunk_{0}, parks_done_{0}, expired_parks_{0};
  std::atomic<uint64_t> first_misses_{0};  // distinct blocks the applications missed
  std::atomic<uint32_t> board_runtimes_{0};
  std::atomic<uint64_t> policy_pressure_events_{0};

  // The sizer's thread only.
  struct ParkRecord {
    uint32_t slot = 0;  // the mapping's slot in the runtime
    uint32_t ms = 0;    // 0: free
    uint64_t block = 0;
  };
  std::vector<ParkRecord> park_records_;
  uint32_t next_mapping_ = 0;  // round robin of parking
  uint64_t blocked_seen_ = 0;
  uint64_t last_probe_us_ = 0, last_epoch_us_ = 0;
  std::atomic<bool> reprobe_{false};  // Reserve/Release: sample memory at the next tick
  bool probe_error_logged_ = false;

  int stop_fd_ = -1;
  int pressure_fd_ = -1;   // set before the thread starts; the thread's afterwards
  bool disarmed_ = false;  // Stop disarmed the probe; Start arms it again
  std::thread thread_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_SIZING_CACHE_SIZER_H_
