// MemoryProbe: what the machine and the process's memory cgroup say about memory, for the
// cache's budget (memory_budget.h) and its pressure response (cache_sizer.h).
//
// The runtime uses SystemMemoryProbe (cgroup v1 or v2, /proc/meminfo, PSI); tests pass a
// probe of their own through RuntimeOptions::memory_probe to play limits and pressure.
// Sample, pressure_fd and TakePressure are called from the cache sizer's thread only;
// Describe and cgroup_id from any thread. pressure_fd() must stay valid while the probe
// lives, or until Disarm. Disarm and Rearm run while no other thread uses the probe (the
// sizer's thread and the stats publisher stopped: a quiesce, a resume).
#ifndef UMAP_RUNTIME_SIZING_MEMORY_PROBE_H_
#define UMAP_RUNTIME_SIZING_MEMORY_PROBE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace umap::runtime {

struct MemorySample {
  // What the process's memory cgroup may use (the smallest limit on the way to the root:
  // v1 hierarchical_memory_limit, v2 min of memory.max and memory.high), or MemTotal when
  // no cgroup limit applies.
  uint64_t limit = 0;
  bool cgroup_limited = false;
  // In use against that limit: the cgroup's charge minus its inactive file cache (which
  // reclaim takes first), or MemTotal - MemAvailable without a cgroup limit.
  uint64_t used = 0;
  uint64_t available = 0;    // MemAvailable, machine-wide
  uint64_t process_rss = 0;  // this process's resident memory
};

class MemoryProbe {
 public:
  virtual ~MemoryProbe() = default;
  virtual absl::StatusOr<MemorySample> Sample() = 0;
  // A descriptor that polls readable (POLLIN or POLLPRI) when memory pressure crosses the
  // probe's trigger, or -1 when there is none (the budget's usage threshold still works).
  virtual int pressure_fd() const = 0;
  // After pressure_fd() polled readable: consumes the event; true when it was pressure.
  virtual bool TakePressure() = 0;
  // The trigger watches the whole machine (PSI on /proc/pressure/memory), not the
  // process's own cgroup: the fallback when the cgroup's own trigger cannot be armed (an
  // ordinary user cannot register cgroup v1's memory.pressure_level). It then also fires
  // when other cgroups reclaim at their own limits.
  virtual bool pressure_is_machine_wide() const { return false; }
  // Where the figures come from, for the log and umap-stat.
  virtual std::string Describe() const = 0;
  // Names the limited memory cgroup (processes with the same id share its limit); "" when
  // no cgroup limit applies.
  virtual std::string cgroup_id() const = 0;
  // A checkpoint (Runtime::Quiesce): closes the pressure trigger, which a restored process
  // would find unarmed (a PSI trigger or a cgroup v1 event registration is kernel state that
  // CRIU does not carry). pressure_fd() is -1 until Rearm.
  virtual void Disarm() {}
  // After a checkpoint: finds the memory cgroup again (a restored process may live in
  // another) and arms the pressure trigger again if the probe had one.
  virtual void Rearm() {}
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_SIZING_MEMORY_PROBE_H_
