#include "bench/run_json.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace umap_bench {
namespace {

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out;
}

// The value of a flat JSON object's field (our own output only: no nesting, no escapes in
// numbers). Empty when absent.
std::string JsonField(const std::string& line, const std::string& key) {
  const std::string k = absl::StrCat("\"", key, "\":");
  size_t p = line.find(k);
  if (p == std::string::npos) return "";
  p += k.size();
  if (p < line.size() && line[p] == '"') {
    std::string out;
    for (size_t i = p + 1; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        ++i;
        out += line[i] == 'n' ? '\n' : line[i] == 't' ? '\t' : line[i];
        continue;
      }
      out += line[i];
    }
    return out;
  }
  size_t e = line.find_first_of(",}", p);
  return line.substr(p, e - p);
}

// The measured fields, in output order; ToJson writes them and ResultFromJson reads them
// back, so a child's result crosses to its parent whole.
struct U64Field {
  const char* key;
  uint64_t RunResult::*member;
};
constexpr U64Field kU64Fields[] = {
    {"ops", &RunResult::ops},
    {"faults", &RunResult::faults},
    {"major_faults", &RunResult::major_faults},
    {"process_faults", &RunResult::process_faults},
    {"voluntary_switches", &RunResult::voluntary_switches},
    {"involuntary_switches", &RunResult::involuntary_switches},
    {"umap_faults_missing", &RunResult::umap_faults_missing},
    {"umap_cache_used", &RunResult::umap_cache_used},
    {"umap_cache_peak", &RunResult::umap_cache_peak},
    {"umap_cache_limit", &RunResult::umap_cache_limit},
    {"umap_cache_capacity", &RunResult::umap_cache_capacity},
    {"umap_cache_virtual", &RunResult::umap_cache_virtual},
    {"umap_cache_ceiling", &RunResult::umap_cache_ceiling},
    {"umap_remisses", &RunResult::umap_remisses},
    {"umap_blocks_read", &RunResult::umap_blocks_read},
    {"umap_blocks_written", &RunResult::umap_blocks_written},
    {"umap_evictions", &RunResult::umap_evictions},
    {"umap_dirty_evictions", &RunResult::umap_dirty_evictions},
    {"umap_io_errors", &RunResult::umap_io_errors},
    {"umap_sigbus", &RunResult::umap_sigbus},
    {"umap_io_reads", &RunResult::umap_io_reads},
    {"umap_io_bytes", &RunResult::umap_io_bytes},
    {"umap_io_writes", &RunResult::umap_io_writes},
    {"umap_io_write_bytes", &RunResult::umap_io_write_bytes},
    {"umap_prefetched", &RunResult::umap_prefetched},
    {"file_cached_bytes", &RunResult::file_cached_bytes},
    {"peak_rss", &RunResult::peak_rss},
    {"cgroup_limit", &RunResult::cgroup_limit},
    {"cgroup_peak", &RunResult::cgroup_peak},
    {"cgroup_limit_hits", &RunResult::cgroup_limit_hits},
    {"oom_kills", &RunResult::oom_kills},
    {"read_checks", &RunResult::read_checks},
    {"misses", &RunResult::misses},
};
struct DoubleField {
  const char* key;
  double RunResult::*member;
};
constexpr DoubleField kDoubleFields[] = {
    {"wall_s", &RunResult::wall_s},
    {"ops_per_s", &RunResult::ops_per_s},
    {"mb_per_s", &RunResult::mb_per_s},
    {"cpu_s", &RunResult::cpu_s},
};

}  // namespace

RunResult ResultFromJson(const std::string& line) {
  RunResult r;
  auto u = [&](const char* k) { return std::strtoull(JsonField(line, k).c_str(), nullptr, 10); };
  r.backend = JsonField(line, "backend");
  r.workload = JsonField(line, "workload");
  r.threads = static_cast<unsigned>(u("threads"));
  r.repeat = static_cast<int>(u("repeat"));
  r.process = static_cast<unsigned>(u("process"));
  r.processes = std::max(1u, static_cast<unsigned>(u("processes")));
  for (const U64Field& f : kU64Fields) r.*f.member = u(f.key);
  for (const DoubleField& f : kDoubleFields) {
    r.*f.member = std::strtod(JsonField(line, f.key).c_str(), nullptr);
  }
  r.capped = JsonField(line, "capped") == "true";
  r.misses_counted = JsonField(line, "misses_counted") == "true";
  r.verified = JsonField(line, "verified") == "true";
  r.error = JsonField(line, "error");
  return r;
}

std::string ToJson(const RunResult& r, const Workload& w, const RunConfig& rc,
                   const BenchFile& file, const std::string& label) {
  std::string j = "{";
  auto str = [&](const char* k, const std::string& v) {
    absl::StrAppend(&j, j.size() > 1 ? "," : "", "\"", k, "\":\"", JsonEscape(v), "\"");
  };
  auto num = [&](const char* k, double v) {
    absl::StrAppend(&j, j.size() > 1 ? "," : "", "\"", k, "\":", absl::StrFormat("%.6g", v));
  };
  auto u64 = [&](const char* k, uint64_t v) {
    absl::StrAppend(&j, j.size() > 1 ? "," : "", "\"", k, "\":", v);
  };
  auto boolean = [&](const char* k, bool v) {
    absl::StrAppend(&j, j.size() > 1 ? "," : "", "\"", k, "\":", v ? "true" : "false");
  };
  str("label", label);
  str("workload", r.workload);
  str("backend", r.backend);
  u64("threads", r.threads);
  u64("repeat", static_cast<uint64_t>(r.repeat));
  u64("process", r.process);
  u64("processes", r.processes);
  str("pattern", PatternName(w.pattern));
  str("access", AccessName(w.access));
  u64("op_size", w.op_size);
  num("locality", w.locality);
  u64("ops_per_thread", w.ops_per_thread);
  u64("sync_every", w.sync_every);
  num("max_seconds", rc.max_seconds);
  str("file", file.path());
  u64("file_size", file.size());
  u64("cache_bytes", rc.options.cache_bytes);
  u64("block_size", rc.options.block_size);
  u64("handler_threads", rc.options.handler_threads);
  u64("writeback_threads", rc.options.writeback_threads);
  str("policy", PolicyName(rc.options.policy));
  str("journal_mode", JournalModeName(rc.options.journal_mode));
  str("journal_dir", rc.options.journal_dir);
  str("madvise", AdviceName(rc.options.advice));
  for (const DoubleField& f : kDoubleFields) num(f.key, r.*f.member);
  for (const U64Field& f : kU64Fields) u64(f.key, r.*f.member);
  boolean("capped", r.capped);
  boolean("misses_counted", r.misses_counted);
  boolean("verified", r.verified);
  str("error", r.error);
  j += "}";
  return j;
}

}  // namespace umap_bench
