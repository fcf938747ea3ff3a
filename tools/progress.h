// Progress display for long replays: a redrawn bar on a terminal, plain lines otherwise
// (logs of batch jobs). Nothing is shown during the first `delay` of a run, so short runs
// print no progress at all.
#ifndef UMAP_TOOLS_PROGRESS_H_
#define UMAP_TOOLS_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "recovery/recovery.h"

namespace umap::tools {

class ProgressPrinter {
 public:
  enum class Style { kBar, kLines, kOff };
  struct Options {
    Style style = Style::kLines;
    uint64_t delay_micros = 1'000'000;        // show nothing before this
    uint64_t line_interval_micros = 5'000'000;  // kLines: at most one line per interval
    int width = 30;                             // kBar: characters of the bar
  };
  // Writes to `out` (not owned; usually stderr).
  ProgressPrinter(FILE* out, Options options) : out_(out), options_(options) {}
  // kBar when `fd` is a terminal, else kLines.
  static Style AutoStyle(int fd);

  void Update(const recovery::Progress& p);
  // Ends the bar line, if one was drawn.
  void Finish();

  // The text of one update (without the leading \r or trailing \n), for tests.
  std::string Format(const recovery::Progress& p) const;

 private:
  FILE* const out_;
  const Options options_;
  bool drawn_ = false;
  uint64_t last_line_ = 0;
  recovery::Progress::Phase last_phase_ = recovery::Progress::Phase::kScan;
};

}  // namespace umap::tools

#endif  // UMAP_TOOLS_PROGRESS_H_
