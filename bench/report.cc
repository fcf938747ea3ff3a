#include "bench/report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/backend.h"
#include "bench/human.h"

namespace umap_bench {
namespace {

using Table = std::vector<std::vector<std::string>>;

// Display width of UTF-8 text (every code point one column; we print only '–' outside ASCII).
size_t Width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

// Aligned plain-text table; the first row is the header.
std::string RenderText(const Table& t) {
  if (t.empty()) return "";
  std::vector<size_t> width(t[0].size(), 0);
  for (const auto& row : t) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], Width(row[c]));
  }
  std::string out;
  for (size_t r = 0; r < t.size(); ++r) {
    for (size_t c = 0; c < t[r].size(); ++c) {
      const std::string& s = t[r][c];
      std::string pad(width[c] - Width(s), ' ');
      // Numbers right-aligned; the header and the name columns (the first, and a
      // "backend" column) left.
      const bool name_column = c == 0 || t[0][c] == "backend";
      out += (name_column || r == 0) ? s + pad : pad + s;
      out += c + 1 < t[r].size() ? " | " : "\n";
    }
    if (r == 0) {
      for (size_t c = 0; c < width.size(); ++c) {
        out += std::string(width[c], '-') + (c + 1 < width.size() ? "-+-" : "\n");
      }
    }
  }
  return out;
}

std::string RenderMarkdown(const Table& t) {
  std::string out;
  for (size_t r = 0; r < t.size(); ++r) {
    out += "| " + absl::StrJoin(t[r], " | ") + " |\n";
    if (r == 0) {
      out += "|";
      for (size_t c = 0; c < t[r].size(); ++c) {
        out += c == 0 || t[0][c] == "backend" ? "---|" : "---:|";
      }
      out += "\n";
    }
  }
  return out;
}

std::string CountSpread(const Spread& s) {
  if (s.n == 0) return "-";
  if (s.n == 1) return HumanCount(s.median);
  return absl::StrCat(HumanCount(s.median), " (", HumanCount(s.min), "–", HumanCount(s.max), ")");
}
std::string RatioSpread(const Spread& s) {
  if (s.n == 0) return "-";
  if (s.n == 1) return absl::StrFormat("%.2f", s.median);
  return absl::StrFormat("%.2f (%.2f–%.2f)", s.median, s.min, s.max);
}
std::string BytesMedian(const Spread& s) { return s.n == 0 ? "-" : HumanBytes(s.median); }

double GetOps(const RunResult& r) { return r.ops_per_s; }
double GetCachePeak(const RunResult& r) { return static_cast<double>(r.umap_cache_peak); }
double GetFileCached(const RunResult& r) { return static_cast<double>(r.file_cached_bytes); }
double GetRss(const RunResult& r) { return static_cast<double>(r.peak_rss); }
double GetCgroup(const RunResult& r) { return static_cast<double>(r.cgroup_peak); }
double GetWall(const RunResult& r) { return r.wall_s; }
double PerOp(const RunResult& r, double v) { return r.ops ? v / static_cast<double>(r.ops) : 0; }
double GetCpuUsPerOp(const RunResult& r) { return PerOp(r, r.cpu_s * 1e6); }
double GetSwitchesPerOp(const RunResult& r) {
  return PerOp(r, static_cast<double>(r.voluntary_switches + r.involuntary_switches));
}
double GetFaultsPerOp(const RunResult& r) { return PerOp(r, static_cast<double>(r.faults)); }
double GetMissesPerS(const RunResult& r) {
  return r.wall_s > 0 ? static_cast<double>(r.misses) / r.wall_s : 0;
}
double GetCpuUsPerMiss(const RunResult& r) {
  return r.misses ? r.cpu_s * 1e6 / static_cast<double>(r.misses) : 0;
}
// Mean size of umap's merged reads (KiB), and reads per op: what merging and read-ahead did.
double GetReadKib(const RunResult& r) {
  return r.umap_io_reads
             ? static_cast<double>(r.umap_io_bytes) / 1024.0 / static_cast<double>(r.umap_io_reads)
             : 0;
}
double GetReadsPerOp(const RunResult& r) { return PerOp(r, static_cast<double>(r.umap_io_reads)); }
double GetWriteKib(const RunResult& r) {
  return r.umap_io_writes ? static_cast<double>(r.umap_io_write_bytes) / 1024.0 /
                                static_cast<double>(r.umap_io_writes)
                          : 0;
}

std::string Fixed(const Spread& s, int digits) {
  return s.n ? absl::StrFormat("%.*f", digits, s.median) : std::string("-");
}

}  // namespace

Spread SpreadOf(std::vector<double> v) {
  Spread s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return s;
}

void Report::Add(const RunResult& r, const std::string& workload_title) {
  auto [it, inserted] = workloads_.try_emplace(r.workload);
  if (inserted) {
    order_.push_back(r.workload);
    it->second.title = workload_title;
  }
  it->second.runs[r.backend][Key{r.threads, r.repeat}] = r;
}

std::vector<unsigned> Report::Threads(const PerWorkload& pw) const {
  std::set<unsigned> t;
  for (const auto& [b, runs] : pw.runs) {
    for (const auto& [k, r] : runs) t.insert(k.threads);
  }
  return {t.begin(), t.end()};
}

Spread Report::Metric(const PerWorkload& pw, const std::string& b, unsigned threads,
                      double (*get)(const RunResult&)) const {
  std::vector<double> v;
  auto it = pw.runs.find(b);
  if (it == pw.runs.end()) return {};
  for (const auto& [k, r] : it->second) {
    if (k.threads == threads && r.verified) v.push_back(get(r));
  }
  return SpreadOf(std::move(v));
}

Spread Report::Ratio(const PerWorkload& pw, const std::string& a, const std::string& b,
                     unsigned threads) const {
  std::vector<double> v;
  auto ia = pw.runs.find(a), ib = pw.runs.find(b);
  if (ia == pw.runs.end() || ib == pw.runs.end()) return {};
  for (const auto& [k, ra] : ia->second) {
    if (k.threads != threads) continue;
    auto jb = ib->second.find(k);
    if (jb == ib->second.end() || !ra.verified || !jb->second.verified) continue;
    if (jb->second.ops_per_s > 0) v.push_back(ra.ops_per_s / jb->second.ops_per_s);
  }
  return SpreadOf(std::move(v));
}

std::vector<std::pair<std::string, std::string>> Report::RatioPairs(const PerWorkload& pw) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& subject : backends_) {
    if (BackendFamily(subject) != "umap" || !Has(pw, subject)) continue;
    for (const std::string& ref : backends_) {
      if (BackendFamily(ref) != "umap" && Has(pw, ref)) out.emplace_back(subject, ref);
    }
  }
  return out;
}

std::string Report::OpsCell(const PerWorkload& pw, const std::string& b, unsigned threads) const {
  const Spread s = Metric(pw, b, threads, GetOps);
  if (s.n > 0) return CountSpread(s);
  auto it = pw.runs.find(b);
  if (it == pw.runs.end()) return "-";
  bool any = false, oom = false;
  for (const auto& [k, r] : it->second) {
    if (k.threads != threads) continue;
    any = true;
    oom |= r.oom_kills > 0;
  }
  return !any ? "-" : oom ? "OOM" : "FAILED";
}

Report::Table Report::ThroughputTable(const PerWorkload& pw, bool markdown) const {
  const auto pairs = RatioPairs(pw);
  std::vector<std::string> ratio_heads;
  for (const auto& [a, b] : pairs) {
    ratio_heads.push_back(markdown && a == "umap" && b == "mmap"
                              ? std::string("**umap/mmap** (min–max)")
                              : absl::StrCat(a, "/", b, " (min–max)"));
  }
  std::vector<std::string> ops_heads;
  for (const std::string& b : backends_) ops_heads.push_back(absl::StrCat(b, " ops/s (min–max)"));
  Table t;
  std::vector<std::string> h = {"threads"};
  // Markdown puts the ratios first: they are the result; the terminal puts the rates first.
  for (const auto& group :
       markdown ? std::vector{ratio_heads, ops_heads} : std::vector{ops_heads, ratio_heads}) {
    h.insert(h.end(), group.begin(), group.end());
  }
  t.push_back(h);
  for (unsigned th : Threads(pw)) {
    std::vector<std::string> ops, ratios;
    for (const std::string& b : backends_) ops.push_back(OpsCell(pw, b, th));
    for (const auto& [a, b] : pairs) ratios.push_back(RatioSpread(Ratio(pw, a, b, th)));
    std::vector<std::string> row = {absl::StrCat(th)};
    for (const auto& group : markdown ? std::vector{ratios, ops} : std::vector{ops, ratios}) {
      row.insert(row.end(), group.begin(), group.end());
    }
    t.push_back(row);
  }
  return t;
}

Report::Table Report::DetailTable(const PerWorkload& pw) const {
  bool cgroup = false;
  for (const auto& [b, runs] : pw.runs) {
    for (const auto& [k, r] : runs) cgroup |= r.cgroup_limit > 0;
  }
  Table t;
  std::vector<std::string> h = {"threads", "backend"};
  if (cgroup) h.push_back("cgroup peak");
  for (const char* c :
       {"peak RSS", "file page cache", "umap cache peak", "CPU us/op", "ctx sw/op", "faults/op",
        "misses/s", "CPU us/miss", "umap KiB/read", "umap reads/op", "umap KiB/write", "wall s"}) {
    h.push_back(c);
  }
  t.push_back(h);
  for (unsigned th : Threads(pw)) {
    for (const std::string& b : backends_) {
      if (!Has(pw, b)) continue;
      const bool umap = BackendFamily(b) == "umap";
      bool counted = false;
      for (const auto& [k, r] : pw.runs.at(b)) counted |= k.threads == th && r.misses_counted;
      auto m = [&](double (*get)(const RunResult&)) { return Metric(pw, b, th, get); };
      std::vector<std::string> row = {absl::StrCat(th), b};
      if (cgroup) row.push_back(BytesMedian(m(GetCgroup)));
      row.push_back(BytesMedian(m(GetRss)));
      row.push_back(BytesMedian(m(GetFileCached)));
      row.push_back(umap ? BytesMedian(m(GetCachePeak)) : "-");
      row.push_back(Fixed(m(GetCpuUsPerOp), 1));
      row.push_back(Fixed(m(GetSwitchesPerOp), 2));
      row.push_back(Fixed(m(GetFaultsPerOp), 2));
      row.push_back(counted ? CountSpread(m(GetMissesPerS)) : "-");
      row.push_back(counted ? Fixed(m(GetCpuUsPerMiss), 1) : "-");
      for (auto get : {GetReadKib, GetReadsPerOp, GetWriteKib}) {
        row.push_back(umap ? Fixed(m(get), 2) : "-");
      }
      row.push_back(Fixed(m(GetWall), 2));
      t.push_back(row);
    }
  }
  return t;
}

int Report::Failed(const PerWorkload& pw) const {
  int failed = 0;
  for (const auto& [b, runs] : pw.runs) {
    for (const auto& [k, r] : runs) failed += !r.verified;
  }
  return failed;
}

std::string Report::Text() const {
  std::string out;
  for (const std::string& name : order_) {
    const PerWorkload& pw = workloads_.at(name);
    absl::StrAppend(&out, "\n== ", name, ": ", pw.title, " ==\n", context_, "\n");
    out += RenderText(ThroughputTable(pw, /*markdown=*/false));
    absl::StrAppend(&out, "per backend (medians over the verified runs):\n",
                    RenderText(DetailTable(pw)));
    if (const int failed = Failed(pw)) {
      absl::StrAppend(&out, "!! ", failed,
                      " run(s) of this workload FAILED (errors above); they are left out.\n");
    }
  }
  return out;
}

std::string Report::Markdown(const std::string& label) const {
  std::string out;
  for (const std::string& name : order_) {
    const PerWorkload& pw = workloads_.at(name);
    absl::StrAppend(&out, "\n### ", label, ": ", name, "\n\n", pw.title, ". ", context_, "\n\n");
    out += RenderMarkdown(ThroughputTable(pw, /*markdown=*/true));
    out += "\n";
    out += RenderMarkdown(DetailTable(pw));
    if (const int failed = Failed(pw)) {
      absl::StrAppend(&out, "\n**", failed, " run(s) failed verification.**\n");
    }
  }
  return out;
}

absl::Status Report::WritePlots(const std::string& dir, const std::string& label) const {
  for (const std::string& name : order_) {
    const PerWorkload& pw = workloads_.at(name);
    const std::string stem = absl::StrCat(dir, "/", label, "-", name);
    {
      std::ofstream dat(stem + ".dat");
      if (!dat) return absl::InternalError(absl::StrCat("cannot write ", stem, ".dat"));
      dat << "# threads";
      for (const std::string& b : backends_) {
        dat << " " << b << "_median " << b << "_min " << b << "_max";
      }
      dat << "\n";
      for (unsigned th : Threads(pw)) {
        dat << th;
        for (const std::string& b : backends_) {
          Spread s = Metric(pw, b, th, GetOps);
          if (s.n == 0) {
            dat << " NaN NaN NaN";
          } else {
            dat << absl::StrFormat(" %.6g %.6g %.6g", s.median, s.min, s.max);
          }
        }
        dat << "\n";
      }
    }
    std::ofstream gp(stem + ".gp");
    if (!gp) return absl::InternalError(absl::StrCat("cannot write ", stem, ".gp"));
    gp << "set terminal pngcairo size 900,560 noenhanced\n"
       << "set output '" << stem << ".png'\n"
       << "set title '" << label << ": " << name << " (median, bars: min-max)'\n"
       << "set xlabel 'threads'\nset ylabel 'ops/s'\nset logscale x 2\n"
       << "set yrange [0:*]\nset key outside right top\nset grid\n"
       << "set datafile missing 'NaN'\nplot ";
    for (size_t i = 0; i < backends_.size(); ++i) {
      const int c = 2 + 3 * static_cast<int>(i);
      gp << (i ? ", " : "") << "'" << stem << ".dat' using 1:" << c << ":" << c + 1 << ":" << c + 2
         << " with yerrorlines lw 2 title '" << backends_[i] << "'";
    }
    gp << "\n";
  }
  return absl::OkStatus();
}

}  // namespace umap_bench
