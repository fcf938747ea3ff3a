// umap-stat: what a running Umap process is doing, from the stats segment each of its
// runtimes publishes (runtime/stats/stats_segment.h). A thin main() over umap_stat_reader and
// umap_stat_render; docs/operations.md ("Watching a running job") describes every field.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "runtime/stats/stats_segment.h"
#include "tools/umap_stat_reader.h"
#include "tools/umap_stat_render.h"

namespace umap::tools {
namespace {

constexpr char kFooter[] = R"(Exit codes:
  0  shown; no request is stalled
  1  nothing to show: no such process, no Umap runtime in it, or its segment was refused
  2  usage error
  3  shown; a request has been in flight longer than the stall threshold (the output says
     which file, offset and for how long)
See docs/operations.md, "Watching a running job".)";

// Writes `text` to `path` atomically (a temporary file renamed over it), as node_exporter's
// textfile collector wants.
bool WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ::close(fd) == 0 && ok;
  if (ok && ::rename(tmp.c_str(), path.c_str()) == 0) return true;
  ::unlink(tmp.c_str());
  return false;
}

struct Args {
  std::vector<int> pids;
  bool all = false, json = false, watch = false;
  double interval_s = 1.0;
  std::string prometheus, dir = runtime::StatsSegment::kDefaultDir;
  StatOptions opts;
};

// One round: reads, prints, writes the textfile. Returns the exit code of this round.
int Round(const Args& a, bool* any_alive) {
  std::vector<int> pids = a.pids;
  if (a.all) {
    for (pid_t p : ListProcesses(a.dir)) pids.push_back(p);
  }
  std::vector<ProcessStats> shown;
  bool failed = false, stalled = false;
  for (int pid : pids) {
    auto r = ReadProcess(pid, a.dir);
    if (!r.ok()) {
      // --all skips processes that vanish or are not ours; a named pid is an error.
      if (!a.all || a.pids.end() != std::find(a.pids.begin(), a.pids.end(), pid)) {
        std::fprintf(stderr, "umap-stat: %s\n", std::string(r.status().message()).c_str());
        failed = true;
      }
      continue;
    }
    ProcessStats p{pid, *std::move(r)};
    for (const StatsSnapshot& s : p.runtimes) {
      std::string what;
      stalled |= Stalled(s, a.opts, &what);
    }
    const std::string text = a.json ? RenderJson(p, a.opts) : RenderText(p, a.opts);
    if (a.prometheus.empty() || a.json || !a.watch) std::fputs(text.c_str(), stdout);
    shown.push_back(std::move(p));
  }
  std::fflush(stdout);
  *any_alive = !shown.empty();
  if (!a.prometheus.empty() &&
      !WriteFileAtomically(a.prometheus, RenderPrometheus(shown, a.opts))) {
    std::fprintf(stderr, "umap-stat: cannot write %s\n", a.prometheus.c_str());
    failed = true;
  }
  if (shown.empty() && (failed || a.pids.empty())) {
    if (a.all && !failed)
      std::fprintf(stderr, "umap-stat: no Umap process found in %s\n", a.dir.c_str());
    return 1;
  }
  return stalled ? 3 : (failed ? 1 : 0);
}

int Main(int argc, char** argv) {
  CLI::App app{
      "umap-stat: show what running Umap processes are doing: cache, faults, I/O in "
      "flight (the oldest request's file, offset and age), journal backlog, per "
      "mapping figures.",
      "umap-stat"};
  app.footer(kFooter);
  Args a;
  app.add_option("pid", a.pids, "Process ids to show")->type_name("PID");
  app.add_flag("-a,--all", a.all, "Every Umap process whose segment this user may read");
  app.add_flag("--json", a.json, "One JSON document per process (one per line)");
  app.add_flag("-w,--watch", a.watch, "Repeat every --interval seconds until the processes end");
  app.add_option("-i,--interval", a.interval_s, "Seconds between rounds with --watch")
      ->default_val(1.0)
      ->check(CLI::Range(0.05, 3600.0));
  app.add_option("--prometheus", a.prometheus,
                 "Also write the Prometheus text exposition to FILE (atomically), e.g. in "
                 "node_exporter's --collector.textfile.directory")
      ->type_name("FILE");
  app.add_option("--stall-ms", a.opts.stall_ms,
                 "A request in flight this long is stalled (never later than half its "
                 "deadline)")
      ->default_val(1000);
  app.add_option("--dir", a.dir, "Where the segments are")->default_val(a.dir);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (a.pids.empty() && !a.all) {
    std::fprintf(stderr, "umap-stat: give a PID or --all (see --help)\n");
    return 2;
  }
  for (bool first = true;; first = false) {
    if (!first && !a.json && a.prometheus.empty()) std::fputs("\n", stdout);
    bool alive = false;
    const int rc = Round(a, &alive);
    if (!a.watch) return rc;
    if (!alive && !a.all) return rc == 1 ? 1 : 0;  // the processes ended
    std::this_thread::sleep_for(std::chrono::duration<double>(a.interval_s));
  }
}

}  // namespace
}  // namespace umap::tools

int main(int argc, char** argv) {
  try {
    return umap::tools::Main(argc, argv);
  } catch (const std::exception& e) {  // CLI11 or the standard library; our code does not throw
    std::fprintf(stderr, "umap-stat: %s\n", e.what());
    return 1;
  }
}
