#include "bench/report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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
      // Numbers right-aligned, the header and the first column left.
      out += (c == 0 || r == 0) ? s + pad : pad + s;
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
      for (size_t c = 0; c < t[r].size(); ++c) out += c == 0 ? "---|" : "---:|";
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
// Mean size of umap's merged reads (KiB), and reads per op: what merging and read-ahead did.
double GetReadKib(const RunResult& r) {
  return r.umap_io_reads
             ? static_cast<double>(r.umap_io_bytes) / 1024.0 / static_cast<double>(r.umap_io_reads)
             : 0;
}
double GetReadsPerOp(const RunResult& r) {
  return r.ops ? static_cast<double>(r.umap_io_reads) / static_cast<double>(r.ops) : 0;
}
double GetWriteKib(const RunResult& r) {
  return r.umap_io_writes ? static_cast<double>(r.umap_io_write_bytes) / 1024.0 /
                                static_cast<double>(r.umap_io_writes)
                          : 0;
}
double GetFaultsPerOp(const RunResult& r) {
  return r.ops ? static_cast<double>(r.faults) / static_cast<double>(r.ops) : 0;
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

std::vector<std::string> Report::UmapBackends(const PerWorkload& pw) const {
  std::vector<std::string> out;
  for (const std::string& b : backends_) {
    if (BackendFamily(b) == "umap" && Has(pw, b)) out.push_back(b);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> Report::RatioPairs(const PerWorkload& pw) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& subject : UmapBackends(pw)) {
    for (const std::string& ref : backends_) {
      if (BackendFamily(ref) != "umap" && Has(pw, ref)) out.emplace_back(subject, ref);
    }
  }
  return out;
}

bool Report::has_ratio() const {
  for (const auto& [name, pw] : workloads_) {
    if (!RatioPairs(pw).empty()) return true;
  }
  return false;
}

std::string Report::ThroughputText(const PerWorkload& pw) const {
  Table t;
  std::vector<std::string> h = {"threads"};
  for (const std::string& b : backends_) h.push_back(absl::StrCat(b, " ops/s (min–max)"));
  const auto pairs = RatioPairs(pw);
  for (const auto& [a, b] : pairs) h.push_back(absl::StrCat(a, "/", b, " (min–max)"));
  t.push_back(h);
  for (unsigned th : Threads(pw)) {
    std::vector<std::string> row = {absl::StrCat(th)};
    for (const std::string& b : backends_) {
      row.push_back(CountSpread(Metric(pw, b, th, GetOps)));
    }
    for (const auto& [a, b] : pairs) row.push_back(RatioSpread(Ratio(pw, a, b, th)));
    t.push_back(row);
  }
  return RenderText(t);
}

std::string Report::MemoryText(const PerWorkload& pw) const {
  bool cg = false;
  for (const auto& [b, runs] : pw.runs) {
    for (const auto& [k, r] : runs) cg |= r.cgroup_peak > 0;
  }
  const std::vector<std::string> umaps = UmapBackends(pw);
  auto median = [](const Spread& s) {
    return s.n ? absl::StrFormat("%.2f", s.median) : std::string("-");
  };
  Table m;
  std::vector<std::string> mh = {"threads"};
  for (const std::string& u : umaps) mh.push_back(absl::StrCat(u, " cache peak"));
  for (const std::string& b : backends_) mh.push_back(absl::StrCat("file page cache ", b));
  for (const std::string& b : backends_) mh.push_back(absl::StrCat("peak RSS ", b));
  if (cg) {
    for (const std::string& b : backends_) mh.push_back(absl::StrCat("cgroup peak ", b));
    for (const std::string& b : backends_) mh.push_back(absl::StrCat("wall s ", b));
  }
  for (const std::string& b : backends_) mh.push_back(absl::StrCat("faults/op ", b));
  for (const std::string& u : umaps) {
    mh.push_back(absl::StrCat(u, " KiB/read"));
    mh.push_back(absl::StrCat(u, " reads/op"));
    mh.push_back(absl::StrCat(u, " KiB/write"));
  }
  m.push_back(mh);
  for (unsigned th : Threads(pw)) {
    std::vector<std::string> row = {absl::StrCat(th)};
    for (const std::string& u : umaps) {
      row.push_back(BytesMedian(Metric(pw, u, th, GetCachePeak)));
    }
    for (const std::string& b : backends_) {
      row.push_back(BytesMedian(Metric(pw, b, th, GetFileCached)));
    }
    for (const std::string& b : backends_) row.push_back(BytesMedian(Metric(pw, b, th, GetRss)));
    if (cg) {
      for (const std::string& b : backends_) {
        row.push_back(BytesMedian(Metric(pw, b, th, GetCgroup)));
      }
      for (const std::string& b : backends_) row.push_back(median(Metric(pw, b, th, GetWall)));
    }
    for (const std::string& b : backends_) {
      row.push_back(median(Metric(pw, b, th, GetFaultsPerOp)));
    }
    for (const std::string& u : umaps) {
      for (auto get : {GetReadKib, GetReadsPerOp, GetWriteKib}) {
        row.push_back(median(Metric(pw, u, th, get)));
      }
    }
    m.push_back(row);
  }
  return RenderText(m);
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
    out += ThroughputText(pw);
    absl::StrAppend(&out, "memory and faults (medians over the verified runs):\n", MemoryText(pw));
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
    const auto pairs = RatioPairs(pw);
    const std::vector<std::string> umaps = UmapBackends(pw);
    Table t;
    std::vector<std::string> h = {"threads"};
    for (const auto& [a, b] : pairs) {
      h.push_back(a == "umap" && b == "mmap" ? std::string("**umap/mmap** median (min–max)")
                                             : absl::StrCat(a, "/", b, " median (min–max)"));
    }
    for (const std::string& b : backends_) h.push_back(absl::StrCat(b, " ops/s (min–max)"));
    for (const std::string& u : umaps) h.push_back(absl::StrCat(u, " cache peak"));
    for (const std::string& b : backends_) h.push_back(absl::StrCat("page cache ", b));
    for (const std::string& u : umaps) h.push_back(absl::StrCat(u, " KiB/read"));
    t.push_back(h);
    for (unsigned th : Threads(pw)) {
      std::vector<std::string> row = {absl::StrCat(th)};
      for (const auto& [a, b] : pairs) row.push_back(RatioSpread(Ratio(pw, a, b, th)));
      for (const std::string& b : backends_) {
        row.push_back(CountSpread(Metric(pw, b, th, GetOps)));
      }
      for (const std::string& u : umaps) {
        row.push_back(BytesMedian(Metric(pw, u, th, GetCachePeak)));
      }
      for (const std::string& b : backends_) {
        row.push_back(BytesMedian(Metric(pw, b, th, GetFileCached)));
      }
      for (const std::string& u : umaps) {
        Spread s = Metric(pw, u, th, GetReadKib);
        row.push_back(s.n ? absl::StrFormat("%.1f", s.median) : "-");
      }
      t.push_back(row);
    }
    out += RenderMarkdown(t);
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
