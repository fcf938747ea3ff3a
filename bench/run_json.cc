#include "bench/run_json.h"

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
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      out += line[i];
    }
    return out;
  }
  size_t e = line.find_first_of(",}", p);
  return line.substr(p, e - p);
}

}  // namespace

RunResult ResultFromJson(const std::string& line) {
  RunResult r;
  auto u = [&](const char* k) { return std::strtoull(JsonField(line, k).c_str(), nullptr, 10); };
  auto d = [&](const char* k) { return std::strtod(JsonField(line, k).c_str(), nullptr); };
  r.backend = JsonField(line, "backend");
  r.workload = JsonField(line, "workload");
  r.threads = static_cast<unsigned>(u("threads"));
  r.repeat = static_cast<int>(u("repeat"));
  r.ops = u("ops");
  r.wall_s = d("wall_s");
  r.ops_per_s = d("ops_per_s");
  r.mb_per_s = d("mb_per_s");
  r.faults = u("faults");
  r.umap_cache_peak = u("umap_cache_peak");
  r.umap_io_reads = u("umap_io_reads");
  r.umap_io_bytes = u("umap_io_bytes");
  r.umap_io_writes = u("umap_io_writes");
  r.umap_io_write_bytes = u("umap_io_write_bytes");
  r.umap_prefetched = u("umap_prefetched");
  r.file_cached_bytes = u("file_cached_bytes");
  r.peak_rss = u("peak_rss");
  r.cgroup_peak = u("cgroup_peak");
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
  str("label", label);
  str("workload", r.workload);
  str("backend", r.backend);
  u64("threads", r.threads);
  u64("repeat", static_cast<uint64_t>(r.repeat));
  str("pattern", PatternName(w.pattern));
  str("access", AccessName(w.access));
  u64("op_size", w.op_size);
  num("locality", w.locality);
  u64("ops_per_thread", w.ops_per_thread);
  u64("sync_every", w.sync_every);
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
  u64("ops", r.ops);
  num("wall_s", r.wall_s);
  num("ops_per_s", r.ops_per_s);
  num("mb_per_s", r.mb_per_s);
  u64("faults", r.faults);
  u64("major_faults", r.major_faults);
  u64("process_faults", r.process_faults);
  u64("umap_cache_used", r.umap_cache_used);
  u64("umap_cache_peak", r.umap_cache_peak);
  u64("umap_cache_limit", r.umap_cache_limit);
  u64("umap_blocks_read", r.umap_blocks_read);
  u64("umap_blocks_written", r.umap_blocks_written);
  u64("umap_evictions", r.umap_evictions);
  u64("umap_dirty_evictions", r.umap_dirty_evictions);
  u64("umap_io_errors", r.umap_io_errors);
  u64("umap_sigbus", r.umap_sigbus);
  u64("umap_io_reads", r.umap_io_reads);
  u64("umap_io_bytes", r.umap_io_bytes);
  u64("umap_io_writes", r.umap_io_writes);
  u64("umap_io_write_bytes", r.umap_io_write_bytes);
  u64("umap_prefetched", r.umap_prefetched);
  u64("file_cached_bytes", r.file_cached_bytes);
  u64("peak_rss", r.peak_rss);
  u64("cgroup_peak", r.cgroup_peak);
  u64("read_checks", r.read_checks);
  absl::StrAppend(&j, ",\"verified\":", r.verified ? "true" : "false");
  str("error", r.error);
  j += "}";
  return j;
}

}  // namespace umap_bench
