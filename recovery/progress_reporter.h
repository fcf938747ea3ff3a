// ProgressReporter: turns recovery's counters into RecoverOptions::progress calls, at most one
// per progress_interval_micros (plus forced ones at phase ends), with the rate since the phase
// began and the time left at that rate.
//
// Thread safety: one thread (the one that called Recover).
#ifndef UMAP_RECOVERY_PROGRESS_REPORTER_H_
#define UMAP_RECOVERY_PROGRESS_REPORTER_H_

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/strings/string_view.h"
#include "recovery/recovery.h"
#include "umap/env.h"

namespace umap::recovery {

class ProgressReporter {
 public:
  ProgressReporter(const RecoverOptions& options, Env* env, uint64_t start_micros);

  void Update(Progress::Phase phase, uint64_t done, uint64_t total, absl::string_view path,
              bool force = false);

 private:
  const std::function<void(const Progress&)> fn_;
  const uint64_t interval_;
  Env* const env_;
  const uint64_t start_;
  uint64_t last_ = 0;
  // The phase the rate is measured over (kSync counts as kReplay), when and where it began.
  std::optional<Progress::Phase> phase_;
  uint64_t phase_start_ = 0, phase_done_ = 0;
};

}  // namespace umap::recovery

#endif  // UMAP_RECOVERY_PROGRESS_REPORTER_H_
