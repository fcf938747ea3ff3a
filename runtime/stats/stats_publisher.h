// StatsPublisher: a thread that copies a runtime's figures into its StatsSegment every
// period, for umap-stat (docs/operations.md, "Watching a running job").
//
// It never waits for the runtime: the counters are atomics, mappings are read inside
// Runtime::WhileMappingsPinned (no lock that a umsync or a hung file system could hold),
// the I/O in flight comes from IoManager::InFlightNow (lock-free), and the journal's
// figures are taken only when its locks are free (otherwise the last ones stay, with their
// age). So a job stuck on a hung DFS keeps publishing, and the oldest request's file and
// age show the stall while it lasts.
//
// Thread safety: Start/destruction from the runtime's owner; PublishNow from any thread.
#ifndef UMAP_RUNTIME_STATS_STATS_PUBLISHER_H_
#define UMAP_RUNTIME_STATS_STATS_PUBLISHER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/stats/stats_segment.h"
#include "runtime/stats/stats_source.h"

namespace umap::runtime {


class StatsPublisher {
 public:
  // Creates the segment (StatsSegment::Create) and starts publishing every period_ms.
  // REQUIRES: rt outlives the publisher; rt's I/O manager exists.
  static absl::StatusOr<std::unique_ptr<StatsPublisher>> Start(
      StatsSource* rt, unsigned period_ms, const std::string& dir = StatsSegment::kDefaultDir);
  // Stops the thread and removes the segment.
  ~StatsPublisher();

  // One publication now (tests; the thread does the same every period).
  void PublishNow();
  // Asks the thread to publish at once instead of at the end of its period (a mapping came
  // or went). Does not wait.
  void Kick();
  const std::string& path() const { return segment_->path(); }

 private:
  StatsPublisher(StatsSource* rt, unsigned period_ms, std::unique_ptr<StatsSegment> segment)
      : rt_(rt), period_ms_(period_ms), segment_(std::move(segment)) {}
  void Loop();
  void FillRuntime(StatsLayout* l);
  void FillJournal(StatsLayout* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(publish_mu_);

  StatsSource* const rt_;  // the owner, through the view the publisher needs
  const unsigned period_ms_;
  const std::unique_ptr<StatsSegment> segment_;
  std::thread thread_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex publish_mu_;  // one publication at a time (thread and PublishNow)
  uint64_t journal_read_mono_us_ ABSL_GUARDED_BY(publish_mu_) = 0;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_STATS_STATS_PUBLISHER_H_
