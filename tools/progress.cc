#include "tools/progress.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/render.h"

namespace umap::tools {

ProgressPrinter::Style ProgressPrinter::AutoStyle(int fd) {
  return ::isatty(fd) ? Style::kBar : Style::kLines;
}

std::string ProgressPrinter::Format(const recovery::Progress& p) const {
  using Phase = recovery::Progress::Phase;
  const double frac = p.total == 0 ? 1.0 : static_cast<double>(p.done) / p.total;
  std::string s;
  if (options_.style == Style::kBar) {
    const int fill = static_cast<int>(frac * options_.width);
    s = absl::StrCat("[", std::string(fill, '#'), std::string(options_.width - fill, ' '), "] ");
  }
  absl::StrAppendFormat(&s, "%s %3.0f%% ", recovery::PhaseName(p.phase), 100 * frac);
  if (p.phase == Phase::kScan) {
    absl::StrAppend(&s, p.done, "/", p.total, " transactions");
  } else {
    const double secs = p.elapsed_micros / 1e6;
    absl::StrAppend(&s, HumanBytes(p.done), "/", HumanBytes(p.total));
    if (secs > 0) absl::StrAppend(&s, " ", HumanBytes(static_cast<uint64_t>(p.done / secs)), "/s");
    if (!p.path.empty()) absl::StrAppend(&s, " ", p.path);
  }
  absl::StrAppendFormat(&s, " %.1f s", p.elapsed_micros / 1e6);
  return s;
}

void ProgressPrinter::Update(const recovery::Progress& p) {
  if (options_.style == Style::kOff || p.elapsed_micros < options_.delay_micros) return;
  if (options_.style == Style::kBar) {
    std::fprintf(out_, "\r%s\033[K", Format(p).c_str());
    drawn_ = true;
  } else {
    const bool phase_end = p.done == p.total;
    if (p.elapsed_micros - last_line_ < options_.line_interval_micros && !phase_end &&
        p.phase == last_phase_ && last_line_ != 0) {
      return;
    }
    last_line_ = p.elapsed_micros;
    std::fprintf(out_, "umap-recover: %s\n", Format(p).c_str());
  }
  last_phase_ = p.phase;
  std::fflush(out_);
}

void ProgressPrinter::Finish() {
  if (drawn_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    drawn_ = false;
  }
}

}  // namespace umap::tools
