#include "tools/umap_stat_render.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/json_writer.h"

namespace umap::tools {
namespace {

using runtime::StatsLayout;
using runtime::StatsMapping;
using runtime::StatsRequest;

std::string Seconds(uint64_t us) { return absl::StrFormat("%.1f s", us / 1e6); }

std::string Field(const char* f, size_t n) { return std::string(f, strnlen(f, n)); }
template <size_t N>
std::string Field(const char (&f)[N]) {
  return Field(f, N);
}

uint64_t SinceUs(const StatsSnapshot& s) {
  return s.read_mono_us > s.layout->published_mono_us ? s.read_mono_us - s.layout->published_mono_us
                                                      : 0;
}

// "/m.bin offset 1048576 length 512.0 KiB"
std::string Describe(const StatsRequest& r) {
  return absl::StrCat(r.path[0] ? Field(r.path) : std::string("(mapping gone)"), " offset ",
                      r.offset, " length ", HumanBytes(r.length));
}

std::string Kind(const StatsRequest& r) {
  return r.kind == runtime::kStatsIoWrite ? "write" : "read";
}

// The segment stopped being updated: the process is stopped (SIGSTOP, a debugger) or
// something froze it whole.
bool Frozen(const StatsSnapshot& s) {
  const uint64_t period_us = uint64_t{std::max<uint32_t>(s.layout->period_ms, 1)} * 1000;
  return SinceUs(s) > std::max<uint64_t>(3 * period_us, 2'000'000);
}

std::string SizeHist(const StatsLayout& l) {
  std::string out;
  for (int k = 0; k < runtime::kStatsSizeBuckets; ++k) {
    if (l.io_size_hist[k] == 0) continue;
    const uint64_t lo = uint64_t{4096} << k;
    absl::StrAppend(&out, out.empty() ? "" : " ", HumanBytes(lo),
                    k == runtime::kStatsSizeBuckets - 1 ? "+" : "", ":", l.io_size_hist[k]);
  }
  return out.empty() ? "none yet" : out;
}

void TextRuntime(const StatsSnapshot& s, const StatOptions& o, std::string* out) {
  const StatsLayout& l = *s.layout;
  absl::StrAppend(out, "runtime ", l.runtime_index, ": ", Field(l.fault_mode),
                  " fault mode, userfaultfd via ", Field(l.uffd_access), ", ", Field(l.io_engine),
                  " I/O, policy ", Field(l.policy), ", journal ", Field(l.journal_mode),
                  ", blocks of ", HumanBytes(l.block_size), "; updated ", Seconds(SinceUs(s)),
                  " ago", l.state == runtime::kStatsClosed ? " (shutting down)" : "", "\n");
  if (Frozen(s)) {
    absl::StrAppend(out, "  NOT UPDATED for ", Seconds(SinceUs(s)),
                    ": the process is stopped or frozen (the figures below are that old)\n");
  }
  absl::StrAppend(
      out, "  cache      ", HumanBytes(l.cache_bytes_used), " used / ",
      HumanBytes(l.cache_bytes_limit), " cap (peak ", HumanBytes(l.cache_bytes_peak),
      l.cache_bytes_virtual ? absl::StrCat(", virtual ", HumanBytes(l.cache_bytes_virtual)) : "",
      ")\n");
  if (l.lazy_sizing) {
    // The capacity, what it may grow to, and what the memory budget is made of.
    absl::StrAppend(
        out, "  sizing     capacity ", HumanBytes(l.cache_bytes_capacity), ", ceiling ",
        HumanBytes(l.cache_bytes_ceiling), "; re-misses ", l.cache_remisses, ", grew ",
        l.cache_grows, " times, shrunk by ", l.cache_shrunk_blocks, " blocks; pressure events ",
        l.memory_pressure_events, "; sampled hits ", l.sampled_hits, "\n");
    absl::StrAppend(out, "  memory     ", HumanBytes(l.memory_used_bytes), " used of ",
                    HumanBytes(l.memory_limit_bytes), " (", Field(l.memory_source), ")",
                    l.board_runtimes > 1
                        ? absl::StrCat("; shared with ", l.board_runtimes - 1, " other runtime",
                                       l.board_runtimes > 2 ? "s" : "")
                        : "",
                    "\n");
  } else {
    absl::StrAppend(out, "  sizing     fixed cache of ", HumanBytes(l.cache_bytes_capacity), "\n");
  }
  absl::StrAppend(out, "  faults     ", l.faults_missing, " missing, ", l.faults_wp,
                  " first writes; evictions ", l.evictions, " (", l.dirty_evictions,
                  " dirty); SIGBUS ", l.sigbus, "; I/O errors ", l.io_errors, "\n");
  absl::StrAppend(
      out, "  reads      ", l.io_reads, " merged, ", HumanBytes(l.io_bytes),
      l.io_reads ? absl::StrCat(" (avg ", HumanBytes(l.io_bytes / l.io_reads), ")") : "",
      "; read-ahead ", l.prefetched_blocks, " blocks; timeouts ", l.io_timeouts, ", retries ",
      l.io_retries_done, ", failed ", l.io_read_failures, "\n");
  absl::StrAppend(out, "  writes     ", l.io_writes, " merged, ", HumanBytes(l.io_write_bytes),
                  "; timeouts ", l.io_write_timeouts, "; umsyncs shared ", l.umsyncs_shared, "\n");
  absl::StrAppend(out, "  read sizes ", SizeHist(l), "\n");
  absl::StrAppend(out, "  in flight  ", l.reads_in_flight, " reads, ", l.writes_in_flight,
                  " writes, ", l.fills_queued, " fills queued\n");
  for (const StatsRequest* r : {&l.oldest_read, &l.oldest_write}) {
    if (r->kind == runtime::kStatsIoNone) continue;
    const uint64_t age = RequestAgeUs(s, *r);
    const bool stalled = age >= StallThresholdUs(s, o);
    absl::StrAppend(out, stalled ? "  STALLED    " : "  oldest     ", Kind(*r), " of ",
                    Describe(*r), ": in flight for ", Seconds(age));
    if (r->kind == runtime::kStatsIoRead && r->attempt == runtime::kStatsInlineRead) {
      // Signal fault mode reads a random miss in the faulting thread: no retry, no deadline.
      absl::StrAppend(out, " (read by the faulting thread, which waits for the file system)\n");
      continue;
    }
    if (r->kind == runtime::kStatsIoRead) {
      absl::StrAppend(out, " (attempt ", r->attempt + 1, " of ", l.io_retries + 1, ")");
    }
    absl::StrAppend(out, "; deadline ", Seconds(l.io_timeout_ms * 1000), "\n");
  }
  if (!l.journal_open) {
    absl::StrAppend(out, "  journal    none open (no writable mapping yet, or journal off)\n");
  } else if (l.journal_known) {
    absl::StrAppend(
        out, "  journal    ", Field(l.journal_dir), ": ", l.journal_pending_txns,
        " transactions pending (", l.journal_unapplied_txns, " not applied), ",
        HumanBytes(l.journal_staged_bytes), " staged in ", l.journal_staged_blocks, " blocks; ",
        l.journal_commits, " commits, ", HumanBytes(l.journal_bytes_written), " written",
        l.journal_age_us > 1'000'000
            ? absl::StrCat(" (as of ", Seconds(l.journal_age_us), " ago: the journal is busy)")
            : "",
        "\n");
  }
  absl::StrAppend(
      out, "  mappings   ", l.mappings_total,
      l.mappings_listed < l.mappings_total ? absl::StrCat(" (", l.mappings_listed, " listed)") : "",
      "\n");
  for (uint32_t i = 0; i < l.mappings_listed; ++i) {
    const StatsMapping& m = l.mappings[i];
    absl::StrAppend(
        out, "    ", Field(m.path), " ", m.writable ? "rw" : "ro", " ", HumanBytes(m.length),
        " at ", m.file_offset, ": faults ", m.faults, " (hits ", m.hits, ", misses ", m.misses,
        "), first writes ", m.first_writes, ", resident ", HumanBytes(m.resident_bytes), ", dirty ",
        m.dirty_blocks, " blocks, read ", HumanBytes(m.bytes_read), " in ", m.reads, " reads",
        m.direct_io ? " (O_DIRECT)" : "", ", umsyncs ", m.umsyncs,
        m.umsync_age_us ? absl::StrCat(" (one running for ", Seconds(m.umsync_age_us), ")") : "",
        "\n");
    if (l.lazy_sizing) {
      absl::StrAppend(out, "      cache share: virtual ", HumanBytes(m.virtual_bytes), ", max ",
                      HumanBytes(m.max_bytes), ", working set ", HumanBytes(m.working_set_bytes),
                      ", re-misses ", m.remisses, ", sampled hits ", m.sampled_hits, "\n");
    }
  }
}

void JsonRequest(JsonWriter* w, const StatsSnapshot& s, const StatsRequest& r,
                 const StatOptions& o) {
  w->BeginObject();
  w->Field("file", Field(r.path));
  w->Field("offset", r.offset);
  w->Field("length", r.length);
  const uint64_t age = RequestAgeUs(s, r);
  w->Field("age_ms", age / 1000);
  const bool by_thread = r.attempt == runtime::kStatsInlineRead;
  w->Field("by_faulting_thread", by_thread);
  w->Field("attempt", by_thread ? uint64_t{0} : uint64_t{r.attempt});
  w->Field("stalled", age >= StallThresholdUs(s, o));
  w->EndObject();
}

void JsonCache(JsonWriter* w, const StatsLayout& l) {
  w->Key("cache");
  w->BeginObject();
  w->Field("used_bytes", l.cache_bytes_used);
  w->Field("peak_bytes", l.cache_bytes_peak);
  w->Field("cap_bytes", l.cache_bytes_limit);
  w->Field("virtual_bytes", l.cache_bytes_virtual);
  w->Field("lazy_sizing", l.lazy_sizing != 0);
  w->Field("capacity_bytes", l.cache_bytes_capacity);
  w->Field("ceiling_bytes", l.cache_bytes_ceiling);
  w->Field("remisses", l.cache_remisses);
  w->Field("grows", l.cache_grows);
  w->Field("shrunk_blocks", l.cache_shrunk_blocks);
  w->Field("pressure_events", l.memory_pressure_events);
  w->Field("sampled_hits", l.sampled_hits);
  w->EndObject();
  w->Key("memory");
  w->BeginObject();
  w->Field("limit_bytes", l.memory_limit_bytes);
  w->Field("used_bytes", l.memory_used_bytes);
  w->Field("source", Field(l.memory_source));
  w->Field("runtimes_sharing", uint64_t{l.board_runtimes});
  w->EndObject();
}

void JsonCounters(JsonWriter* w, const StatsLayout& l) {
  w->Key("counters");
  w->BeginObject();
  const std::pair<const char*, uint64_t> counters[] = {{"faults_missing", l.faults_missing},
                                                       {"faults_wp", l.faults_wp},
                                                       {"evictions", l.evictions},
                                                       {"dirty_evictions", l.dirty_evictions},
                                                       {"sigbus", l.sigbus},
                                                       {"io_errors", l.io_errors},
                                                       {"io_reads", l.io_reads},
                                                       {"io_read_bytes", l.io_bytes},
                                                       {"io_writes", l.io_writes},
                                                       {"io_write_bytes", l.io_write_bytes},
                                                       {"io_timeouts", l.io_timeouts},
                                                       {"io_retries", l.io_retries_done},
                                                       {"io_read_failures", l.io_read_failures},
                                                       {"io_write_timeouts", l.io_write_timeouts},
                                                       {"io_queue_wait_us", l.io_queue_wait_us},
                                                       {"prefetched_blocks", l.prefetched_blocks},
                                                       {"umsyncs_shared", l.umsyncs_shared}};
  for (const auto& [k, v] : counters) w->Field(k, v);
  w->EndObject();
  w->Key("read_size_hist");
  w->BeginArray();
  for (uint64_t v : l.io_size_hist) w->Uint(v);
  w->EndArray();
}

void JsonInFlight(JsonWriter* w, const StatsSnapshot& s, const StatOptions& o) {
  const StatsLayout& l = *s.layout;
  w->Key("in_flight");
  w->BeginObject();
  w->Field("reads", l.reads_in_flight);
  w->Field("writes", l.writes_in_flight);
  w->Field("fills_queued", l.fills_queued);
  w->Key("oldest_read");
  if (l.oldest_read.kind != runtime::kStatsIoNone)
    JsonRequest(w, s, l.oldest_read, o);
  else
    w->Null();
  w->Key("oldest_write");
  if (l.oldest_write.kind != runtime::kStatsIoNone)
    JsonRequest(w, s, l.oldest_write, o);
  else
    w->Null();
  w->EndObject();
}

void JsonJournal(JsonWriter* w, const StatsLayout& l) {
  w->Key("journal");
  if (l.journal_open && l.journal_known) {
    w->BeginObject();
    w->Field("dir", Field(l.journal_dir));
    w->Field("pending_txns", l.journal_pending_txns);
    w->Field("unapplied_txns", l.journal_unapplied_txns);
    w->Field("staged_bytes", l.journal_staged_bytes);
    w->Field("staged_blocks", l.journal_staged_blocks);
    w->Field("commits", l.journal_commits);
    w->Field("bytes_written", l.journal_bytes_written);
    w->Field("age_ms", l.journal_age_us / 1000);
    w->EndObject();
  } else {
    w->Null();
  }
}

void JsonMappings(JsonWriter* w, const StatsLayout& l) {
  w->Field("mappings_total", uint64_t{l.mappings_total});
  w->Key("mappings");
  w->BeginArray();
  for (uint32_t i = 0; i < l.mappings_listed; ++i) {
    const StatsMapping& m = l.mappings[i];
    w->BeginObject();
    w->Field("file", Field(m.path));
    w->Field("writable", m.writable != 0);
    w->Field("length", m.length);
    w->Field("file_offset", m.file_offset);
    w->Field("faults", m.faults);
    w->Field("hits", m.hits);
    w->Field("misses", m.misses);
    w->Field("first_writes", m.first_writes);
    w->Field("virtual_bytes", m.virtual_bytes);
    w->Field("max_bytes", m.max_bytes);
    w->Field("remisses", m.remisses);
    w->Field("working_set_bytes", m.working_set_bytes);
    w->Field("sampled_hits", m.sampled_hits);
    w->Field("resident_bytes", m.resident_bytes);
    w->Field("dirty_blocks", m.dirty_blocks);
    w->Field("bytes_read", m.bytes_read);
    w->Field("reads", m.reads);
    w->Field("prefetched_blocks", m.prefetched_blocks);
    w->Field("direct_io", m.direct_io != 0);
    w->Field("umsyncs", m.umsyncs);
    w->Field("umsync_running_ms", m.umsync_age_us / 1000);
    w->EndObject();
  }
  w->EndArray();
}

void JsonRuntime(JsonWriter* w, const StatsSnapshot& s, const StatOptions& o) {
  const StatsLayout& l = *s.layout;
  w->BeginObject();
  w->Field("runtime", uint64_t{l.runtime_index});
  w->Field("segment", s.path);
  w->Field("updated_ms_ago", SinceUs(s) / 1000);
  w->Field("frozen", Frozen(s));
  w->Field("closing", l.state == runtime::kStatsClosed);
  w->Field("fault_mode", Field(l.fault_mode));
  w->Field("userfaultfd_access", Field(l.uffd_access));
  w->Field("io_engine", Field(l.io_engine));
  w->Field("policy", Field(l.policy));
  w->Field("journal_mode", Field(l.journal_mode));
  w->Field("block_size", l.block_size);
  w->Field("io_timeout_ms", l.io_timeout_ms);
  w->Field("io_retries", l.io_retries);
  JsonCache(w, l);
  JsonCounters(w, l);
  JsonInFlight(w, s, o);
  JsonJournal(w, l);
  JsonMappings(w, l);
  std::string what;
  w->Field("stalled", Stalled(s, o, &what));
  w->EndObject();
}

// Prometheus label value: backslash, double quote and newline escaped.
std::string Label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(n, " B") : absl::StrFormat("%.1f %s", v, units[u]);
}

uint64_t RequestAgeUs(const StatsSnapshot& s, const StatsRequest& r) {
  return r.kind == runtime::kStatsIoNone ? 0 : r.age_us + SinceUs(s);
}

uint64_t StallThresholdUs(const StatsSnapshot& s, const StatOptions& o) {
  const uint64_t half_deadline = s.layout->io_timeout_ms * 1000 / 2;
  return std::max<uint64_t>(1, std::min(o.stall_ms * 1000, half_deadline));
}

bool Stalled(const StatsSnapshot& s, const StatOptions& o, std::string* what) {
  const StatsLayout& l = *s.layout;
  for (const StatsRequest* r : {&l.oldest_read, &l.oldest_write}) {
    if (r->kind == runtime::kStatsIoNone) continue;
    const uint64_t age = RequestAgeUs(s, *r);
    if (age < StallThresholdUs(s, o)) continue;
    *what = absl::StrCat(Kind(*r), " of ", Describe(*r), " in flight for ", Seconds(age));
    return true;
  }
  return false;
}

std::string RenderText(const ProcessStats& p, const StatOptions& o) {
  std::string out = absl::StrCat("umap-stat: process ", p.pid, ", ", p.runtimes.size(),
                                 p.runtimes.size() == 1 ? " runtime\n" : " runtimes\n");
  for (const StatsSnapshot& s : p.runtimes) TextRuntime(s, o, &out);
  return out;
}

std::string RenderJson(const ProcessStats& p, const StatOptions& o) {
  JsonWriter w;
  w.BeginObject();
  w.Field("pid", static_cast<uint64_t>(p.pid));
  bool stalled = false;
  w.Key("runtimes");
  w.BeginArray();
  for (const StatsSnapshot& s : p.runtimes) {
    JsonRuntime(&w, s, o);
    std::string what;
    stalled |= Stalled(s, o, &what);
  }
  w.EndArray();
  w.Field("stalled", stalled);
  w.EndObject();
  return w.str() + "\n";
}

struct PromMetric {
  const char* name;
  const char* type;
  const char* help;
  std::string samples;
};
// Indices into PromMetrics(), in its order.
enum PromIndex {
  kCache,
  kCacheCap,
  kFaults,
  kEvictions,
  kReadBytes,
  kReads,
  kWriteBytes,
  kTimeouts,
  kInFlight,
  kOldestAge,
  kStalled,
  kPending,
  kStaged,
  kSegmentAge,
  kMapFaults,
  kMapMisses,
  kMapResident,
  kMapDirty,
  kCapacity,
  kVirtual,
  kCeiling,
  kRemisses,
  kPressure,
  kMapVirtual,
  kMapWorkingSet
};
std::vector<PromMetric> PromMetrics() {
  return {
      {"umap_cache_bytes", "gauge", "Resident cached bytes (blocks plus shadow buffers).", ""},
      {"umap_cache_cap_bytes", "gauge", "Bound on cached bytes.", ""},
      {"umap_faults_total", "counter", "Page faults resolved, by kind (missing, wp).", ""},
      {"umap_evictions_total", "counter", "Blocks evicted from the cache.", ""},
      {"umap_io_read_bytes_total", "counter", "Bytes read from files.", ""},
      {"umap_io_reads_total", "counter", "Merged reads completed.", ""},
      {"umap_io_write_bytes_total", "counter", "Bytes written back to files.", ""},
      {"umap_io_timeouts_total", "counter", "I/O attempts that passed their deadline.", ""},
      {"umap_io_in_flight", "gauge", "I/O requests in flight, by kind.", ""},
      {"umap_io_oldest_age_seconds", "gauge", "Age of the oldest request in flight, by kind.", ""},
      {"umap_stalled", "gauge", "1 when a request has been in flight past the stall threshold.",
       ""},
      {"umap_journal_pending_transactions", "gauge", "Committed transactions still in the journal.",
       ""},
      {"umap_journal_staged_bytes", "gauge", "Dirty bytes spilled to the journal, not committed.",
       ""},
      {"umap_segment_age_seconds", "gauge", "Time since the process last published.", ""},
      {"umap_mapping_faults_total", "counter", "Faults of one mapping.", ""},
      {"umap_mapping_misses_total", "counter", "Faults of one mapping that read the file.", ""},
      {"umap_mapping_resident_bytes", "gauge", "Resident bytes of one mapping.", ""},
      {"umap_mapping_dirty_blocks", "gauge", "Dirty blocks of one mapping.", ""},
      {"umap_cache_capacity_bytes", "gauge", "The cache's capacity now (lazy sizing moves it).",
       ""},
      {"umap_cache_virtual_bytes", "gauge",
       "Virtual capacity: the smallest capacity predicted to miss about as often.", ""},
      {"umap_cache_ceiling_bytes", "gauge",
       "The most the cache may grow to now (hard cap, memory budget, pressure).", ""},
      {"umap_cache_remisses_total", "counter", "Misses of blocks that were cached before.", ""},
      {"umap_memory_pressure_events_total", "counter", "Memory pressure events acted on.", ""},
      {"umap_mapping_virtual_bytes", "gauge", "Virtual capacity of one mapping.", ""},
      {"umap_mapping_working_set_bytes", "gauge", "Estimated working set of one mapping.", ""},
  };
}

// One runtime's samples, appended to each metric's.
void AddPromSamples(std::vector<PromMetric>& ms, pid_t pid, const StatsSnapshot& s,
                    const StatOptions& o) {
  auto add = [&](int i, const std::string& labels, double v) {
    absl::StrAppend(&ms[i].samples, ms[i].name, "{", labels, "} ", absl::StrFormat("%.15g", v),
                    "\n");
  };
  const StatsLayout& l = *s.layout;
  const std::string id = absl::StrCat("pid=\"", pid, "\",runtime=\"", l.runtime_index, "\"");
  add(kCache, id, l.cache_bytes_used);
  add(kCacheCap, id, l.cache_bytes_limit);
  add(kFaults, id + ",kind=\"missing\"", l.faults_missing);
  add(kFaults, id + ",kind=\"wp\"", l.faults_wp);
  add(kEvictions, id, l.evictions);
  add(kReadBytes, id, l.io_bytes);
  add(kReads, id, l.io_reads);
  add(kWriteBytes, id, l.io_write_bytes);
  add(kTimeouts, id, l.io_timeouts + l.io_write_timeouts);
  add(kInFlight, id + ",kind=\"read\"", l.reads_in_flight);
  add(kInFlight, id + ",kind=\"write\"", l.writes_in_flight);
  for (const StatsRequest* r : {&l.oldest_read, &l.oldest_write}) {
    if (r->kind == runtime::kStatsIoNone) continue;
    add(kOldestAge,
        absl::StrCat(id, ",kind=\"", Kind(*r), "\",file=\"", Label(Field(r->path)), "\""),
        RequestAgeUs(s, *r) / 1e6);
  }
  std::string what;
  add(kStalled, id, Stalled(s, o, &what) ? 1 : 0);
  add(kPending, id, l.journal_pending_txns);
  add(kStaged, id, l.journal_staged_bytes);
  add(kSegmentAge, id, SinceUs(s) / 1e6);
  add(kCapacity, id, l.cache_bytes_capacity);
  add(kVirtual, id, l.cache_bytes_virtual);
  add(kCeiling, id, l.cache_bytes_ceiling);
  add(kRemisses, id, l.cache_remisses);
  add(kPressure, id, l.memory_pressure_events);
  for (uint32_t i = 0; i < l.mappings_listed; ++i) {
    const StatsMapping& m = l.mappings[i];
    const std::string ml = absl::StrCat(id, ",file=\"", Label(Field(m.path)), "\"");
    add(kMapFaults, ml, m.faults);
    add(kMapMisses, ml, m.misses);
    add(kMapResident, ml, m.resident_bytes);
    add(kMapDirty, ml, m.dirty_blocks);
    add(kMapVirtual, ml, m.virtual_bytes);
    add(kMapWorkingSet, ml, m.working_set_bytes);
  }
}

std::string RenderPrometheus(const std::vector<ProcessStats>& ps, const StatOptions& o) {
  std::vector<PromMetric> ms = PromMetrics();
  for (const ProcessStats& p : ps) {
    for (const StatsSnapshot& s : p.runtimes) AddPromSamples(ms, p.pid, s, o);
  }
  std::string out;
  for (const PromMetric& m : ms) {
    absl::StrAppend(&out, "# HELP ", m.name, " ", m.help, "\n# TYPE ", m.name, " ", m.type, "\n",
                    m.samples);
  }
  return out;
}

}  // namespace umap::tools
