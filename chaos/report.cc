#include "chaos/report.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chaos/system.h"

namespace chaos {
namespace {

const ClassStats& StatsOf(const Tally& tally, const std::string& cls) {
  static const ClassStats kNone;
  auto it = tally.classes().find(cls);
  return it == tally.classes().end() ? kNone : it->second;
}

std::string XmlEscape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += ch;
    }
  }
  return o;
}

std::string JUnitXml(const Config& c, const Tally& tally,
                     const std::vector<IterationRecord>& records) {
  std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"umap-chaos\">\n";
  for (const auto& [cls, st] : tally.classes()) {
    int n = 0, fails = 0, skips = 0;
    for (const auto& r : records) {
      if (r.cls != cls) continue;
      ++n;
      fails += !r.violations.empty();
      skips += r.skipped;
    }
    absl::StrAppend(&xml, "  <testsuite name=\"chaos.", cls, "\" tests=\"", n, "\" failures=\"",
                    fails, "\" skipped=\"", skips, "\">\n");
    for (const auto& r : records) {
      if (r.cls != cls) continue;
      absl::StrAppend(&xml, "    <testcase classname=\"chaos.", cls, "\" name=\"iteration-",
                      r.index, "-", r.policy, "\" time=\"", r.seconds, "\">");
      if (r.skipped) {
        absl::StrAppend(&xml, "<skipped message=\"", XmlEscape(r.skip_reason), "\"/>");
      }
      for (const Violation& v : r.violations) {
        absl::StrAppend(&xml, "<failure message=\"", XmlEscape(v.invariant), "\">",
                        XmlEscape(v.detail + "\n" + r.what + "\nreproduce: " + Repro(c, r.index)),
                        "</failure>");
      }
      absl::StrAppend(&xml, "<system-out>", XmlEscape(r.what), "</system-out></testcase>\n");
    }
    absl::StrAppend(&xml, "  </testsuite>\n");
  }
  return xml + "</testsuites>\n";
}

std::string MarkdownSummary(const Config& c, const Tally& tally, size_t iterations,
                            const std::vector<ViolationRecord>& violations, double seconds) {
  std::string md = absl::StrCat(
      "# umap-chaos summary\n\n- seed: `", c.seed, "`\n- faults: `", c.faults_arg, "`, dfs `",
      c.dfs, "`", c.mutation.empty() ? "" : ", mutation `" + c.mutation + "`",
      "\n- iterations: ", iterations, ", wall time ", static_cast<int>(seconds), " s\n\n",
      "| class | iterations | faults fired | recoveries | crashes (SIGABRT/SIGBUS) | violations | "
      "worker peak RSS growth / peak RSS (MiB) | skipped |\n",
      "|---|---|---|---|---|---|---|---|\n");
  for (const auto& [cls, st] : tally.classes()) {
    absl::StrAppend(
        &md, "| ", cls, " | ", st.iterations, " | ", st.fired, " | ", st.recoveries, " | ",
        st.CrashText(), " | ", st.violations, " | ",
        absl::StrFormat("%.1f / %.1f", st.max_rss_growth_kib / 1024.0, st.max_rss_kib / 1024.0),
        " | ", st.skipped ? absl::StrCat(st.skipped, " (", st.skip_reason, ")") : "0", " |\n");
  }
  absl::StrAppend(&md, "\n| crash point | armed | fired |\n|---|---|---|\n");
  for (const auto& [point, n] : tally.points()) {
    absl::StrAppend(&md, "| `", point, "` | ", n.armed, " | ", n.fired, " |\n");
  }
  bool draws = false;
  for (const auto& [draw, n] : tally.draws()) {
    if (n.armed == 0) continue;
    if (!draws)
      absl::StrAppend(&md, "\n| fault draw | armed (worker runs) | fired |\n|---|---|---|\n");
    draws = true;
    absl::StrAppend(&md, "| `", draw, "` | ", n.armed, " | ", n.fired, " |\n");
  }
  absl::StrAppend(&md, "\n## Violations: ", violations.size(), "\n\n");
  for (const ViolationRecord& v : violations) {
    absl::StrAppend(&md, "- iteration ", v.iteration, " (", v.cls, "): **", v.v.invariant,
                    "**: ", v.v.detail, "  \n  reproduce: `", v.repro, "`; evidence in `", v.dir,
                    "`\n");
  }
  return md;
}

}  // namespace

std::string Repro(const Config& c, int index) {
  std::string cmd = absl::StrCat(c.self, " --seed ", c.seed, " --faults ", c.faults_arg, " --dfs ",
                                 c.dfs, " --iteration ", index);
  if (!c.mutation.empty()) absl::StrAppend(&cmd, " --mutation ", c.mutation);
  if (c.replayable) absl::StrAppend(&cmd, " --replayable");
  return cmd;
}

void PrintSummary(const Config& c, const Tally& tally, size_t iterations, size_t violations,
                  double seconds) {
  std::printf("\n%-8s %10s %12s %11s %8s %11s %10s %8s\n", "class", "iterations", "faults fired",
              "recoveries", "crashes", "violations", "RSS+ MiB", "skipped");
  for (const std::string& f : c.faults) {
    const ClassStats& st = StatsOf(tally, f);
    std::printf(
        "%-8s %10llu %12llu %11llu %8llu %11llu %10.1f %8llu%s%s\n", f.c_str(),
        static_cast<unsigned long long>(st.iterations), static_cast<unsigned long long>(st.fired),
        static_cast<unsigned long long>(st.recoveries), static_cast<unsigned long long>(st.crashes),
        static_cast<unsigned long long>(st.violations), st.max_rss_growth_kib / 1024.0,
        static_cast<unsigned long long>(st.skipped), st.skipped ? "  skipped: " : "",
        st.skip_reason.c_str());
  }
  for (const std::string& f : c.faults) {
    const ClassStats& st = StatsOf(tally, f);
    if (!st.crash_signals.empty()) {
      std::printf("crashes of %s: %s\n", f.c_str(), st.CrashText().c_str());
    }
  }
  std::printf("\n%-26s %8s %8s\n", "crash point", "armed", "fired");
  for (const auto& [point, n] : tally.points()) {
    std::printf("%-26s %8llu %8llu\n", point.c_str(), static_cast<unsigned long long>(n.armed),
                static_cast<unsigned long long>(n.fired));
  }
  bool draws = false;
  for (const auto& [draw, n] : tally.draws()) {
    if (n.armed == 0) continue;
    if (!draws) std::printf("\n%-44s %8s %8s\n", "fault draw", "armed", "fired");
    draws = true;
    std::printf("%-44s %8llu %8llu\n", draw.c_str(), static_cast<unsigned long long>(n.armed),
                static_cast<unsigned long long>(n.fired));
  }
  std::printf("\n%zu iterations in %.0f s, %zu violations (seed %llu)\n", iterations, seconds,
              violations, static_cast<unsigned long long>(c.seed));
}

void WriteReports(const Config& c, const Tally& tally, const std::vector<IterationRecord>& records,
                  const std::vector<ViolationRecord>& violations, double seconds) {
  if (c.report_dir.empty()) return;
  if (absl::Status s = MakeDirs(c.report_dir); !s.ok()) {
    std::fprintf(stderr, "umap-chaos: --report: %s\n", s.ToString().c_str());
    return;
  }
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"chaos-junit.xml", JUnitXml(c, tally, records)},
        {"chaos-summary.md", MarkdownSummary(c, tally, records.size(), violations, seconds)}}) {
    if (absl::Status s = WriteWholeFile(c.report_dir + "/" + name, text, false); !s.ok()) {
      std::fprintf(stderr, "umap-chaos: --report: %s\n", s.ToString().c_str());
    }
  }
}

}  // namespace chaos
