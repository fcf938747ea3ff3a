// SystemMemoryProbe: the MemoryProbe of a real process (docs/configuration.md "Memory
// budget").
//
// The memory cgroup is found from /proc/self/cgroup and /proc/self/mountinfo: cgroup v1
// when the memory controller is mounted as a v1 hierarchy (a "memory" line in
// /proc/self/cgroup), else cgroup v2 when the unified hierarchy has the memory controller.
//   limit   v1: memory.stat hierarchical_memory_limit (the smallest limit of the ancestors),
//           else memory.limit_in_bytes; v2: the smallest memory.max or memory.high from the
//           cgroup up to the mount point. A limit at or above MemTotal is no limit.
//   used    v1: memory.usage_in_bytes - total_inactive_file; v2: memory.current -
//           inactive_file. Without a limit: MemTotal - MemAvailable.
// Pressure, the first that can be had: v2 the cgroup's memory.pressure PSI trigger; v1 a
// memory.pressure_level "medium" event through cgroup.event_control (needs write access
// to it: root, or a delegated cgroup); else the machine's /proc/pressure/memory PSI trigger.
// PSI triggers are "some 150000 2000000" (150 ms of stall in a 2 s window): unprivileged
// processes, and root without CAP_SYS_RESOURCE, may only use windows that are multiples of
// 2 s. When none works, pressure_fd() is -1 and the budget's usage threshold remains.
//
// These are not data files, so they are read with plain POSIX calls, not through Env.
#ifndef UMAP_RUNTIME_SIZING_SYSTEM_MEMORY_PROBE_H_
#define UMAP_RUNTIME_SIZING_SYSTEM_MEMORY_PROBE_H_

#include <atomic>
#include <memory>
#include <string>

#include "runtime/sizing/memory_probe.h"

namespace umap::runtime {

class SystemMemoryProbe final : public MemoryProbe {
 public:
  enum class Cgroup { kNone, kV1, kV2 };
  // `root` prefixes every path read (tests: a fake tree); `pressure`: set up a pressure
  // trigger. Never fails: what cannot be found is left out and said by Describe().
  static std::unique_ptr<SystemMemoryProbe> Create(const std::string& root = "",
                                                   bool pressure = true);
  ~SystemMemoryProbe() override;

  absl::StatusOr<MemorySample> Sample() override;
  int pressure_fd() const override { return pressure_fd_; }
  bool TakePressure() override;
  bool pressure_is_machine_wide() const override { return machine_wide_; }
  std::string Describe() const override;
  std::string cgroup_id() const override {
    return limited_.load(std::memory_order_relaxed) ? dir_ : std::string();
  }
  void Disarm() override;
  void Rearm() override;

  Cgroup cgroup() const { return kind_; }
  const std::string& cgroup_dir() const { return dir_; }

 private:
  SystemMemoryProbe() = default;
  void Discover();
  void SetUpPressure();
  bool TryPsi(const std::string& path);
  bool TryPressureLevel();
  // The cgroup's limit (UINT64_MAX when none).
  uint64_t CgroupLimit() const;
  uint64_t CgroupUsed() const;

  // Closes the pressure trigger's descriptors.
  void ClosePressure();

  std::string root_;
  bool pressure_ = false;  // a pressure trigger was asked for (Create)
  Cgroup kind_ = Cgroup::kNone;
  std::string dir_;    // the cgroup's directory (with root_)
  std::string mount_;  // its hierarchy's mount point (with root_)
  std::atomic<bool> limited_{false};  // the last Sample found a limit
  int pressure_fd_ = -1;
  int level_fd_ = -1;  // v1 memory.pressure_level, kept open while registered
  bool pressure_is_eventfd_ = false;
  bool machine_wide_ = false;  // the trigger is the machine's PSI (the fallback)
  std::string pressure_source_ = "none";
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_SIZING_SYSTEM_MEMORY_PROBE_H_
