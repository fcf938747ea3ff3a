#include "recovery/progress_reporter.h"

#include <string>

namespace umap::recovery {

ProgressReporter::ProgressReporter(const RecoverOptions& options, Env* env,
                                   uint64_t start_micros)
    : fn_(options.progress),
      interval_(options.progress_interval_micros),
      env_(env),
      start_(start_micros) {}

void ProgressReporter::Update(Progress::Phase phase, uint64_t done, uint64_t total,
                              absl::string_view path, bool force) {
  if (!fn_) return;
  const uint64_t now = env_->NowMicros();
  const Progress::Phase rate_phase =
      phase == Progress::Phase::kSync ? Progress::Phase::kReplay : phase;
  if (phase_ != rate_phase) {
    phase_ = rate_phase;
    phase_start_ = now;
    phase_done_ = done;
  }
  if (!force && now - last_ < interval_) return;
  last_ = now;
  Progress p;
  p.phase = phase;
  p.done = done;
  p.total = total;
  p.elapsed_micros = now - start_;
  p.path = std::string(path);
  // A rate needs a little history: a tenth of a second of the phase.
  const uint64_t phase_us = now - phase_start_;
  if (phase_us >= 100'000 && done > phase_done_) {
    p.rate_per_second = (done - phase_done_) * 1'000'000 / phase_us;
    if (p.rate_per_second > 0 && total > done) {
      p.eta_micros = (total - done) * 1'000'000 / p.rate_per_second;
    }
  }
  fn_(p);
}

}  // namespace umap::recovery
