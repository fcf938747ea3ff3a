#include "runtime/stats/stats_publisher.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>

#include "absl/time/time.h"
#include "runtime/fault/mapping.h"
#include "runtime/sizing/cache_sizer.h"

namespace umap::runtime {
namespace {

const char* PolicyName(umap_policy p) { return p == UMAP_POLICY_RELAXED ? "relaxed" : "atomic"; }

const char* JournalModeName(umap_journal_mode m) {
  switch (m) {
    case UMAP_JOURNAL_INTENT:
      return "intent";
    case UMAP_JOURNAL_OFF:
      return "off";
    default:
      return "data";
  }
}

template <size_t N>
void Put(char (&field)[N], const std::string& s) {
  StatsSegment::CopyField(field, N, s);
}

const char* UffdAccessLabel(UffdAccess a) {
  switch (a) {
    case UffdAccess::kDevice:
      return "/dev/userfaultfd";
    case UffdAccess::kUserModeOnly:
      return "user-mode-only";
    default:
      return "syscall";
  }
}

uint64_t Age(uint64_t now, uint64_t since) { return since != 0 && now > since ? now - since : 0; }

void Request(const io::InFlightRequest& r, uint32_t kind, uint64_t now, StatsRequest* out) {
  out->kind = r.started_us != 0 ? kind : kStatsIoNone;
  out->attempt = r.attempt == io::kInlineAttempt ? kStatsInlineRead : r.attempt;
  out->offset = r.offset;
  out->length = r.length;
  out->age_us = Age(now, r.started_us);
  out->path[0] = '\0';  // named below, if its mapping is still there
}

}  // namespace

absl::StatusOr<std::unique_ptr<StatsPublisher>> StatsPublisher::Start(StatsSource* rt,
                                                                      unsigned period_ms,
                                                                      const std::string& dir) {
  auto segment = StatsSegment::Create(dir);
  if (!segment.ok()) return segment.status();
  std::unique_ptr<StatsPublisher> p(new StatsPublisher(rt, period_ms, *std::move(segment)));
  p->PublishNow();
  p->thread_ = std::thread([q = p.get()] { q->Loop(); });
  return p;
}

StatsPublisher::~StatsPublisher() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void StatsPublisher::Loop() {
  ::pthread_setname_np(::pthread_self(), "umap-stats");
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || kicked_; };
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&woken), absl::Milliseconds(period_ms_));
      if (stop_) return;
      kicked_ = false;
    }
    PublishNow();
  }
}

void StatsPublisher::Kick() {
  absl::MutexLock l(&mu_);
  kicked_ = true;
}

void StatsPublisher::PublishNow() {
  absl::MutexLock l(&publish_mu_);
  StatsLayout* out = segment_->Begin();
  out->published_unix_us = StatsSegment::UnixMicros();
  out->published_mono_us = StatsSegment::MonotonicMicros();
  out->period_ms = period_ms_;
  FillRuntime(out);
  FillJournal(out);
  segment_->End();
}

void StatsPublisher::FillRuntime(StatsLayout* l) {
  const RuntimeOptions& o = rt_->options();
  Put(l->uffd_access, UffdAccessLabel(rt_->uffd_access()));
  Put(l->policy, PolicyName(o.policy));
  Put(l->journal_mode, JournalModeName(o.journal_mode));
  l->block_size = rt_->block_size();
  l->io_timeout_ms = o.io_timeout_ms;
  l->io_retries = o.io_retries;
  rt_->WhileMappingsPinned([&] {
    const umap_stats s = rt_->Stats();
    Put(l->io_engine, s.io_engine == UMAP_IO_URING ? "uring" : "posix");
    Put(l->fault_mode, s.fault_mode == UMAP_FAULT_HANDLER ? "handler" : "signal");
    l->cache_bytes_used = s.cache_bytes_used;
    l->cache_bytes_peak = s.cache_bytes_peak;
    l->cache_bytes_limit = s.cache_bytes_limit;
    l->cache_bytes_virtual = s.cache_virtual_bytes;
    l->lazy_sizing = static_cast<uint32_t>(s.lazy_sizing);
    l->cache_bytes_capacity = s.cache_capacity_bytes;
    l->cache_bytes_ceiling = s.cache_ceiling_bytes;
    l->memory_limit_bytes = s.memory_limit_bytes;
    l->memory_used_bytes = s.memory_used_bytes;
    l->cache_remisses = s.cache_remisses;
    l->cache_grows = s.cache_grows;
    l->cache_shrunk_blocks = s.cache_shrunk_blocks;
    l->memory_pressure_events = s.memory_pressure_events;
    l->sampled_hits = s.sampled_hits;
    if (CacheSizer* z = rt_->sizer()) {
      l->board_runtimes = z->figures().board_runtimes;
      Put(l->memory_source, z->probe().Describe());
    }
    l->faults_missing = s.faults_missing;
    l->faults_wp = s.faults_wp;
    l->evictions = s.evictions;
    l->dirty_evictions = s.dirty_evictions;
    l->sigbus = s.sigbus_raised;
    l->io_errors = s.io_errors;
    l->io_reads = s.io_reads;
    l->io_bytes = s.io_bytes;
    l->io_writes = s.io_writes;
    l->io_write_bytes = s.io_write_bytes;
    l->io_timeouts = s.io_timeouts;
    l->io_retries_done = s.io_retries;
    l->io_read_failures = s.io_read_failures;
    l->io_write_timeouts = s.io_write_timeouts;
    l->io_queue_wait_us = s.io_queue_wait_us;
    l->prefetched_blocks = s.prefetched_blocks;
    l->umsyncs_shared = s.umsyncs_shared;
    static_assert(kStatsSizeBuckets == UMAP_IO_SIZE_BUCKETS);
    std::copy(std::begin(s.io_size_hist), std::end(s.io_size_hist), l->io_size_hist);

    const uint64_t now = rt_->NowMicros();
    const io::InFlight f = rt_->InFlightNow();
    l->reads_in_flight = f.reads;
    l->writes_in_flight = f.writes;
    l->fills_queued = f.queued;
    Request(f.oldest_read, kStatsIoRead, now, &l->oldest_read);
    Request(f.oldest_write, kStatsIoWrite, now, &l->oldest_write);
    uint32_t total = 0, listed = 0;
    const uint64_t bs = rt_->block_size();
    rt_->ForEachMapping([&](Mapping& m) {
      ++total;
      const std::string& name = m.file()->name();
      if (f.oldest_read.started_us != 0 && f.oldest_read.owner == m.io_queue()) {
        Put(l->oldest_read.path, name);
      }
      if (f.oldest_write.started_us != 0 && f.oldest_write.owner == m.file()) {
        Put(l->oldest_write.path, name);
      }
      if (listed == kStatsMaxMappings) return;
      StatsMapping& e = l->mappings[listed++];
      e.writable = m.writable() ? 1 : 0;
      e.direct_io = m.direct_io() ? 1 : 0;
      Put(e.path, name);
      e.length = m.length();
      e.file_offset = m.file_offset();
      e.faults = m.faults();
      e.misses = std::min(m.misses(), e.faults);
      e.hits = e.faults - e.misses;
      e.first_writes = m.first_writes();
      e.resident_bytes = m.resident_blocks() * bs;
      e.dirty_blocks = m.dirty_blocks();
      e.bytes_read = m.bytes_read();
      e.reads = m.fills();
      e.prefetched_blocks = m.prefetched();
      e.umsyncs = m.umsyncs();
      e.umsync_age_us = Age(now, m.umsync_started_us());
      e.virtual_bytes = uint64_t{m.virtual_blocks()} * bs;
      e.max_bytes = uint64_t{std::min(m.quota(), rt_->pool_limit())} * bs;
      e.remisses = m.remisses();
      e.working_set_bytes = uint64_t{m.working_set_blocks()} * bs;
      e.sampled_hits = m.sampled_hits();
    });
    l->mappings_total = total;
    l->mappings_listed = listed;
    // Entries past the list are cleared, so a reader never shows a mapping that is gone.
    std::memset(l->mappings + listed, 0, sizeof(StatsMapping) * (kStatsMaxMappings - listed));
  });
}

void StatsPublisher::FillJournal(StatsLayout* l) {
  journal::Journal::Stats js;
  bool open = false;
  std::string dir;
  const uint64_t now = StatsSegment::MonotonicMicros();
  if (rt_->TryJournalStats(&js, &open, &dir)) {
    l->journal_open = open ? 1 : 0;
    if (open) {
      l->journal_known = 1;
      l->journal_pending_txns = js.pending_txns;
      l->journal_unapplied_txns = js.unapplied_txns;
      l->journal_staged_bytes = js.staged_bytes;
      l->journal_staged_blocks = js.staged_blocks;
      l->journal_commits = js.commits;
      l->journal_bytes_written = js.bytes_written;
      Put(l->journal_dir, dir);
    }
    journal_read_mono_us_ = now;
  }
  l->journal_age_us = journal_read_mono_us_ ? now - journal_read_mono_us_ : 0;
}

}  // namespace umap::runtime
