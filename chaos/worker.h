// Worker: one run of umap-chaos-worker as the driver sees it: the process (start, freeze,
// kill, reap) and what it reported over its pipe (chaos/worker_main.cc lists the lines).
//
// Thread safety: none; one driver thread owns a Worker. The destructor SIGKILLs and reaps a
// worker that was not reaped yet, so no run outlives its epoch.
#ifndef UMAP_CHAOS_WORKER_H_
#define UMAP_CHAOS_WORKER_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chaos/oracle.h"
#include "chaos/system.h"

namespace chaos {

class Worker {
 public:
  // Starts PREFIX... `binary` --report-fd 3 ARGS with `env` added, output appended to `log`.
  // The prefix must exec the binary (nsenter does), so that the pid is the worker's.
  static absl::StatusOr<std::unique_ptr<Worker>> Start(const std::string& binary,
                                                       const std::vector<std::string>& args,
                                                       const std::vector<std::string>& env,
                                                       const std::string& log,
                                                       const std::vector<std::string>& prefix = {});
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Reads report lines until pred() holds, EOF, or timeout_ms. Returns pred().
  bool PumpUntil(const std::function<bool()>& pred, int timeout_ms);
  // Reads report lines for ms milliseconds (or until EOF).
  void Sleep(int ms);
  // Waits (up to timeout_ms) for the first acknowledged umsync; returns whether it came.
  bool WaitForFirstAck(int timeout_ms);
  // Waits (up to timeout_ms) for an acknowledged umsync of a round after `round`.
  bool WaitForAckAfter(uint64_t round, int timeout_ms);
  // Freezes it (SIGSTOP) and waits, up to timeout_ms, until every thread has stopped
  // (FreezeProcess): a system call in flight completes first, and after the return no thread
  // runs user code any more. kDeadlineExceeded when a thread did not stop in time.
  absl::Status Stop(int timeout_ms);
  void Cont();
  // SIGKILL, remembered as the driver's (killed_by_us).
  void Kill();
  // Drains the pipe to EOF, then reaps (bound timeout_ms; a hung worker is SIGKILLed).
  // An unkillable one (Exit::unkillable: stuck in the kernel on its storage) is not reaped:
  // call Reap again once the storage let it go.
  Exit Reap(int timeout_ms);

  EpochEvents& events() { return events_; }
  const EpochEvents& events() const { return events_; }
  // "V": the block versions the worker read through its new mapping (-1 torn or foreign,
  // -2 all zeros).
  const std::optional<std::vector<int64_t>>& base() const { return base_; }
  bool eof() const { return eof_; }
  bool killed_by_us() const { return killed_by_us_; }
  // "M": memory after each umsync.
  struct Memory {
    uint64_t samples = 0, first_rss_kib = 0, first_round = 0, max_rss_kib = 0, max_round = 0;
    uint64_t max_cache_bytes = 0;
  };
  const Memory& memory() const { return memory_; }
  // "F": injected failures fired so far (data file, journal).
  uint64_t data_fired() const { return data_fired_; }
  uint64_t journal_fired() const { return journal_fired_; }
  // "H": the round during which the journal's fault rules ended.
  const std::optional<uint64_t>& healed_round() const { return healed_round_; }
  // "Z": the worker cut the journal's power; the bytes of failed syncs it zeroed.
  const std::optional<uint64_t>& journal_zeroed() const { return journal_zeroed_; }

 private:
  Worker(pid_t pid, int report_fd) : pid_(pid), report_fd_(report_fd) {}
  void Parse(const std::string& line);
  void ParseMemory(uint64_t round, uint64_t rss_kib, uint64_t cache_bytes);

  const pid_t pid_;
  const int report_fd_;
  std::string partial_line_;
  bool eof_ = false, reaped_ = false, killed_by_us_ = false;
  Exit exit_;
  EpochEvents events_;
  Memory memory_;
  uint64_t data_fired_ = 0, journal_fired_ = 0;
  std::optional<uint64_t> healed_round_, journal_zeroed_;
  std::optional<std::vector<int64_t>> base_;
};

}  // namespace chaos

#endif  // UMAP_CHAOS_WORKER_H_
