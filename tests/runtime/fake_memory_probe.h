// A MemoryProbe whose figures and pressure events the test sets (lazy sizing tests).
#ifndef UMAP_TESTS_RUNTIME_FAKE_MEMORY_PROBE_H_
#define UMAP_TESTS_RUNTIME_FAKE_MEMORY_PROBE_H_

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/synchronization/mutex.h"
#include "runtime/sizing/memory_probe.h"

namespace umap::testing {

class FakeMemoryProbe final : public runtime::MemoryProbe {
 public:
  // A machine of `limit` bytes with `used` in use, no cgroup limit.
  FakeMemoryProbe(uint64_t limit, uint64_t used)
      : efd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    Set(limit, used);
  }
  ~FakeMemoryProbe() override { ::close(efd_); }

  void Set(uint64_t limit, uint64_t used) {
    absl::MutexLock l(&mu_);
    sample_.limit = limit;
    sample_.used = used;
    sample_.available = limit > used ? limit - used : 0;
  }
  // The figures become a memory cgroup's, whose id (the runtimes' cgroup board key) is `id`.
  void InCgroup(const std::string& id) {
    absl::MutexLock l(&mu_);
    sample_.cgroup_limited = true;
    cgroup_id_ = id;
  }
  // The machine's MemAvailable (Set makes it the room left under `limit`).
  void SetAvailable(uint64_t available) {
    absl::MutexLock l(&mu_);
    sample_.available = available;
  }
  // The trigger is the machine's, not the cgroup's (MemoryProbe::pressure_is_machine_wide).
  void MachineWide(bool on) { machine_wide_.store(on); }
  // One pressure event, as a PSI trigger would report.
  void Pressure() {
    uint64_t one = 1;
    (void)!::write(efd_, &one, sizeof one);
  }
  int samples() const {
    absl::MutexLock l(&mu_);
    return samples_;
  }

  absl::StatusOr<runtime::MemorySample> Sample() override {
    absl::MutexLock l(&mu_);
    ++samples_;
    return sample_;
  }
  int pressure_fd() const override { return efd_; }
  bool TakePressure() override {
    uint64_t n = 0;
    return ::read(efd_, &n, sizeof n) == sizeof n && n > 0;
  }
  bool pressure_is_machine_wide() const override { return machine_wide_.load(); }
  std::string Describe() const override { return "fake memory probe"; }
  std::string cgroup_id() const override {
    absl::MutexLock l(&mu_);
    return cgroup_id_;
  }

 private:
  const int efd_;
  std::atomic<bool> machine_wide_{false};
  mutable absl::Mutex mu_;
  runtime::MemorySample sample_ ABSL_GUARDED_BY(mu_);
  int samples_ ABSL_GUARDED_BY(mu_) = 0;
  std::string cgroup_id_ ABSL_GUARDED_BY(mu_);
};

}  // namespace umap::testing

#endif  // UMAP_TESTS_RUNTIME_FAKE_MEMORY_PROBE_H_
