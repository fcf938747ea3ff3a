#include "runtime/sizing/cache_sizer.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "runtime/fault/mapping.h"
#include "runtime/fault/uffd.h"
#include "runtime/cache/eviction_scratch.h"
#include "runtime/sizing/capacity_split.h"
#include "runtime/stats/stats_segment.h"

namespace umap::runtime {
namespace {

uint32_t NowMs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint32_t>(ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

uint32_t ToBlocks(uint64_t bytes, size_t block_size) {
  return static_cast<uint32_t>(std::min<uint64_t>(bytes / block_size, UINT32_MAX - 1));
}

std::string Mib(uint64_t blocks, size_t block_size) {
  return absl::StrCat(blocks * block_size / (1 << 20), " MiB");
}

}  // namespace

CacheSizer::CacheSizer(SizerHost* rt, std::shared_ptr<MemoryProbe> probe, const Options& o,
                       uint32_t floor_blocks)
    : rt_(rt),
      probe_(std::move(probe)),
      options_(o),
      floor_blocks_(floor_blocks),
      policy_(
          SizingPolicy::Options{floor_blocks, o.min_step_blocks, 4'000'000, 64'000'000, 2'000'000}),
      parks_(o.park_buffers, rt->block_size()),
      park_records_(o.park_buffers) {}

absl::StatusOr<std::unique_ptr<CacheSizer>> CacheSizer::Create(SizerHost* rt,
                                                               std::shared_ptr<MemoryProbe> probe,
                                                               const Options& o) {
  BlockPool& pool = rt->pool();
  const uint32_t floor = std::min(o.start_blocks, pool.capacity());
  std::unique_ptr<CacheSizer> s(new CacheSizer(rt, std::move(probe), o, floor));
  if (!s->parks_.ok()) return PosixError(ENOMEM, "allocating the park buffers of lazy sizing");
  s->stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->stop_fd_ < 0) return PosixError(errno, "eventfd for the cache sizer");
  s->pressure_fd_ = s->probe_->pressure_fd();
  const uint64_t now = StatsSegment::MonotonicMicros();
  // The start first: the probe publishes the limit as this runtime's demand on the cgroup
  // board, and the pool's structural maximum there would leave the other runtimes of the
  // cgroup no room until the next period.
  pool.set_limit(floor);
  s->ProbeMemory(now);
  const SizingPolicy::Output out =
      s->policy_.Step({now, floor, pool.capacity(), s->allowance_blocks_.load(), floor, false});
  pool.set_limit(out.limit);
  s->ceiling_.store(out.ceiling, std::memory_order_relaxed);
  s->last_epoch_us_ = now;
  UMAP_LOG(kInfo, "lazy cache sizing: start ", Mib(pool.limit(), rt->block_size()),
           ", hard cap ", Mib(pool.capacity(), rt->block_size()),
           ", memory: ", s->probe_->Describe(), ", budget allows ",
           Mib(s->allowance_blocks_.load(), rt->block_size()),
           s->board_ ? absl::StrCat(", shared through ", s->board_->path()) : "");
  return s;
}

CacheSizer::~CacheSizer() {
  Stop();
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

void CacheSizer::Stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    if (::write(stop_fd_, &one, sizeof one) < 0) {
      UMAP_LOG(kError, "cache sizer: eventfd write failed: errno ", errno);
    }
    thread_.join();
    // Consumed, so that a later Start's thread does not stop at once.
    uint64_t n;
    while (::read(stop_fd_, &n, sizeof n) < 0 && errno == EINTR) {
    }
  }
  if (disarmed_) return;
  // The board is a shared file mapping named after this machine's cgroup, the trigger
  // kernel state: neither belongs in a checkpoint. The next probe joins the board again.
  board_.reset();
  board_runtimes_.store(0, std::memory_order_relaxed);
  probe_->Disarm();
  pressure_fd_ = -1;
  disarmed_ = true;
}

void CacheSizer::Start() {
  if (thread_.joinable()) return;
  if (disarmed_) {
    probe_->Rearm();
    pressure_fd_ = probe_->pressure_fd();
    last_probe_us_ = 0;  // the first tick samples memory (the cgroup may be another now)
    disarmed_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void CacheSizer::DropParkBuffers() {
  if (parks_.count() == 0 || parks_.in_use() != 0) return;
  if (int err = DiscardPages(parks_.at(0), size_t{parks_.count()} * rt_->block_size())) {
    UMAP_LOG(kWarn, "cache sizer: dropping the park buffers' pages failed: errno ", err);
  }
}

uint32_t CacheSizer::base_step(uint32_t limit) const {
  return std::max(options_.min_step_blocks, limit / 8);
}

uint32_t CacheSizer::step(uint32_t limit) const {
  const uint32_t base = base_step(limit);
  // The history predicts a working set past the next step: go most of the way at once (at
  // most doubling, never past the prediction), so that a reused set is not evicted over
  // and over while the cache creeps up to it in small steps.
  const uint32_t wanted = wanted_blocks_.load(std::memory_order_relaxed);
  if (wanted > uint64_t{limit} + base) return std::min(limit, wanted - limit);
  return base;
}

void CacheSizer::OnReMiss() {
  BlockPool& pool = rt_->pool();
  const uint32_t limit = pool.limit();
  const uint32_t ceiling = ceiling_.load(std::memory_order_relaxed);
  // (Batched eviction keeps up to a batch free: that much below the limit still counts as
  // full. A re-miss comes from a miss's eviction, not read-ahead's.)
  const uint32_t batch = static_cast<uint32_t>(rt_->EvictBatchSize(/*bulk=*/false));
  const bool full = pool.held() + batch >= limit;
  if (limit >= ceiling) {
    if (full) blocked_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  uint64_t to = uint64_t{limit} + step(limit);
  if (!full) {
    // Early growth: the block was evicted, so the cache is behind the set being reused.
    // Growing only when the pool is full again would evict a batch of that set first, each
    // eviction one more miss later. Bounded by the distinct blocks missed so far (a cache
    // never needs more blocks than were ever brought in) plus a step, and by the last
    // epoch's working sets once there are some.
    uint64_t bound = first_misses_.load(std::memory_order_relaxed) + base_step(limit);
    const uint32_t wanted = wanted_blocks_.load(std::memory_order_relaxed);
    if (wanted != 0) bound = std::min<uint64_t>(bound, wanted);
    to = std::min(to, bound);
    if (to <= limit) return;
  }
  to = std::min<uint64_t>(ceiling, to);
  if (pool.TryRaiseLimit(limit, static_cast<uint32_t>(to))) {
    grows_.fetch_add(1, std::memory_order_relaxed);
  }
}

CacheSizer::Figures CacheSizer::figures() const {
  Figures f;
  f.limit = rt_->pool().limit();
  f.ceiling = ceiling_.load(std::memory_order_relaxed);
  f.virtual_blocks = virtual_blocks_.load(std::memory_order_relaxed);
  f.grows = grows_.load(std::memory_order_relaxed);
  f.blocked = blocked_.load(std::memory_order_relaxed);
  f.shrunk_blocks = shrunk_.load(std::memory_order_relaxed);
  f.pressure_events = policy_pressure_events_.load(std::memory_order_relaxed);
  f.parks = parks_done_.load(std::memory_order_relaxed);
  f.expired_parks = expired_parks_.load(std::memory_order_relaxed);
  f.board_runtimes = board_runtimes_.load(std::memory_order_relaxed);
  return f;
}

void CacheSizer::Loop() {
  ::pthread_setname_np(::pthread_self(), "umap-sizer");
  pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {pressure_fd_, POLLIN | POLLPRI, 0}};
  int timeout = static_cast<int>(options_.tick_ms);
  for (;;) {
    const int r = ::poll(fds, pressure_fd_ >= 0 ? 2 : 1, timeout);
    if (r < 0 && errno != EINTR) {
      UMAP_LOG(kError, "cache sizer: poll failed: errno ", errno, "; lazy sizing stops");
      return;
    }
    if (r > 0 && fds[0].revents != 0) return;
    bool pressure = false;
    if (r > 0 && pressure_fd_ >= 0 && fds[1].revents != 0) {
      if (fds[1].revents & (POLLERR | POLLNVAL)) {
        // The trigger's file went away (its cgroup was removed): the usage threshold stays.
        UMAP_LOG(kWarn, "cache sizer: the memory pressure trigger failed (", probe_->Describe(),
                 "); watching usage only");
        pressure_fd_ = -1;
      } else {
        pressure = probe_->TakePressure();
      }
    }
    const bool busy = Tick(StatsSegment::MonotonicMicros(), pressure);
    timeout = static_cast<int>(busy ? options_.tick_ms : options_.probe_ms);
  }
}

bool CacheSizer::Tick(uint64_t now_us, bool pressure_event) {
  bool busy = false;
  const uint32_t now_ms = NowMs();
  rt_->WhileMappingsPinned([&] {
    busy = DrainAndPark(now_ms);
    ExpireParks(now_ms);
    if (now_us - last_epoch_us_ >= uint64_t{options_.epoch_ms} * 1000) {
      last_epoch_us_ = now_us;
      EndEpoch();
    }
  });
  if (pressure_event || reprobe_.exchange(false, std::memory_order_relaxed) ||
      now_us - last_probe_us_ >= uint64_t{options_.probe_ms} * 1000) {
    ProbeMemory(now_us);
  }
  BlockPool& pool = rt_->pool();
  if (pressure_event && ForeignPressure()) pressure_event = false;
  const bool pressure = pressure_event || budget_.near_limit();
  const SizingPolicy::Output out =
      policy_.Step({now_us, pool.limit(), pool.capacity(), allowance_blocks_.load(),
                    virtual_blocks_.load(), pressure});
  policy_pressure_events_.store(policy_.pressure_events(), std::memory_order_relaxed);
  if (out.pressure_acted) {
    UMAP_LOG(kInfo, "memory pressure (", pressure_event ? "trigger" : "usage near the limit",
             "): cache ", Mib(pool.limit(), rt_->block_size()), " -> ",
             Mib(out.limit, rt_->block_size()));
  }
  if (out.limit < pool.limit()) pool.set_limit(out.limit);
  ceiling_.store(out.ceiling, std::memory_order_relaxed);
  rt_->UpdateReadCap();
  if (pool.held() > pool.limit()) {
    uint32_t freed = 0;
    rt_->WhileMappingsPinned([&] { freed = rt_->ShrinkPool(options_.shrink_per_tick); });
    shrunk_.fetch_add(freed, std::memory_order_relaxed);
    busy = true;  // more next tick (dirty blocks wait for their write-back)
  }
  return busy;
}

bool CacheSizer::DrainAndPark(uint32_t now_ms) {
  bool busy = false;
  std::vector<Mapping*> mappings;  // the sizer's thread: allocation is fine here
  rt_->ForEachMapping([&](Mapping& m) {
    if (m.tracker() == nullptr) return;
    busy |= m.tracker()->Drain() > 0;
    mappings.push_back(&m);
  });
  if (mappings.empty()) return busy;
  struct Candidate {
    Mapping* m;
    uint64_t block;
    uint64_t stale;  // microseconds since its last seen access
  };
  // Parked in the order visited: the parked instants spread evenly over the resident
  // blocks, as the footprint's average needs (reuse_tracker.h).
  // Each mapping's tracked blocks in turn, evenly: a visit to a block that is not resident
  // is an instant of its reuse history (its next access faults); a resident one is a
  // candidate for parking (an instant too, once parked).
  std::vector<Candidate> candidates;
  const uint64_t now = ReuseTracker::Now();
  const uint32_t per_mapping =
      std::max<uint32_t>(4, 4 * options_.parks_per_tick / static_cast<uint32_t>(mappings.size()));
  for (size_t k = 0; k < mappings.size(); ++k) {
    Mapping& m = *mappings[(next_mapping_ + k) % mappings.size()];
    ReuseTracker& t = *m.tracker();
    t.VisitTracked(per_mapping, now, [&](uint64_t block, uint64_t stale) {
      const CacheEntryTable::Entry e = m.table().Load(block);
      if (e.present()) {
        // No skipping: a resident block the parking budget cannot take waits for the next
        // tick, so that every resident block gets its turn.
        if (candidates.size() >= options_.parks_per_tick) return false;
        candidates.push_back({&m, block, stale});
      } else if (!e.parked()) {
        t.NoteAbsent(block, now);
      }
      return true;
    });
  }
  next_mapping_ = (next_mapping_ + 1) % static_cast<uint32_t>(mappings.size());
  EvictionBatchOf<EvictionScratch::kSmallBatch> batch;  // on the sizer's own stack
  const int max_parks =
      static_cast<int>(std::min<uint32_t>(options_.parks_per_tick, batch.capacity));
  for (const Candidate& c : candidates) {
    if (batch.count >= max_parks) break;
    const uint32_t park = parks_.Acquire();
    if (park == IndexStack::kEmpty) break;
    if (!c.m->PreparePark(c.block, park, &batch)) parks_.Release(park);
  }
  if (batch.count == 0) return busy;
  DiscardBatch(rt_->pidfd(), &batch);
  for (int i = 0; i < batch.count; ++i) {
    const EvictionBatch::Victim& v = batch.victims[i];
    v.mapping->FinishPark(v);
    if (!v.discarded) continue;
    v.mapping->tracker()->NoteParked(v.block, now);
    park_records_[v.park] = ParkRecord{v.mapping->slot(), now_ms == 0 ? 1 : now_ms, v.block};
    parks_done_.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

void CacheSizer::ExpireParks(uint32_t now_ms) {
  for (uint32_t i = 0; i < park_records_.size(); ++i) {
    ParkRecord& r = park_records_[i];
    if (r.ms == 0 || now_ms - r.ms < options_.park_max_ms) continue;
    // Its access did not come: the block leaves the cache, so that the buffer can watch
    // another one, and its next access, a miss, still measures its reuse from the parking.
    // (A record whose block was served meanwhile finds it no longer parked there.)
    Mapping* m = rt_->MappingAt(r.slot);
    if (m != nullptr && m->EvictParked(r.block, i)) {
      expired_parks_.fetch_add(1, std::memory_order_relaxed);
    }
    r.ms = 0;
  }
}

void CacheSizer::EndEpoch() {
  struct Curve {
    Mapping* m;
    std::vector<double> misses;
  };
  std::vector<Curve> curves;
  uint64_t virtual_total = 0, wanted_total = 0;
  const uint32_t limit = rt_->pool().limit();
  const uint32_t quantum = std::max<uint32_t>(1, limit / 64);
  const uint64_t now = ReuseTracker::Now();
  rt_->ForEachMapping([&](Mapping& m) {
    ReuseTracker* t = m.tracker();
    if (t == nullptr) return;
    t->EndEpoch(now, [&](uint64_t b) {
      const CacheEntryTable::Entry e = m.table().Load(b);
      return e.present()  ? ReuseTracker::State::kResident
             : e.parked() ? ReuseTracker::State::kParked
                          : ReuseTracker::State::kAbsent;
    });
    const MissCurve& h = t->curve();
    const uint64_t c = m.resident_blocks();
    uint64_t v = c;  // nothing known yet: keep what it has
    if (h.total_rate() > 0) {
      const double target = h.MissesAt(static_cast<double>(c)) * (1 + options_.tolerance) +
                            options_.floor_fraction * h.total_rate();
      v = std::min<uint64_t>(c, h.CapacityFor(target));
    }
    m.set_sizing(static_cast<uint32_t>(std::min<uint64_t>(v, UINT32_MAX)),
                 static_cast<uint32_t>(std::min<uint64_t>(t->working_set(), UINT32_MAX)));
    virtual_total += v;
    wanted_total += std::min<uint64_t>(t->working_set(), m.blocks());
    Curve cv{&m, std::vector<double>(65)};
    for (uint32_t j = 0; j <= 64; ++j) {
      cv.misses[j] = h.MissesAt(static_cast<double>(uint64_t{j} * quantum));
    }
    curves.push_back(std::move(cv));
  });
  virtual_blocks_.store(static_cast<uint32_t>(std::min<uint64_t>(virtual_total, UINT32_MAX)),
                        std::memory_order_relaxed);
  wanted_blocks_.store(static_cast<uint32_t>(std::min<uint64_t>(wanted_total, UINT32_MAX)),
                       std::memory_order_relaxed);
  if (curves.size() < 2) {
    for (Curve& c : curves) c.m->set_quota(limit);
    quotas_active_.store(false, std::memory_order_relaxed);
    return;
  }
  std::vector<SplitClaim> claims;
  for (const Curve& c : curves) {
    claims.push_back({absl::MakeConstSpan(c.misses),
                      static_cast<uint32_t>((c.m->blocks() + quantum - 1) / quantum)});
  }
  const std::vector<uint32_t> got = SplitCapacity(claims, 64, 1);
  bool over = false;
  for (size_t i = 0; i < curves.size(); ++i) {
    const uint32_t quota = got[i] * quantum;
    curves[i].m->set_quota(quota);
    over |= curves[i].m->resident_blocks() > uint64_t{quota} + quantum;
  }
  quotas_active_.store(over, std::memory_order_relaxed);
}

bool CacheSizer::ForeignPressure() {
  if (!probe_->pressure_is_machine_wide() || !last_sample_.cgroup_limited) return false;
  const MemorySample& s = last_sample_;
  const uint64_t headroom = s.limit > s.used ? s.limit - s.used : 0;
  if (s.available < headroom) return false;  // the machine cannot give what the cgroup allows
  if (!foreign_pressure_logged_) {
    foreign_pressure_logged_ = true;
    UMAP_LOG(kInfo, "memory pressure elsewhere on the machine (", probe_->Describe(),
             ") left alone: this process's memory cgroup has ", headroom >> 20,
             " MiB of room and the machine ", s.available >> 20,
             " MiB available; its own limit is watched by usage");
  }
  return true;
}

void CacheSizer::ProbeMemory(uint64_t now_us) {
  last_probe_us_ = now_us;
  absl::StatusOr<MemorySample> s = probe_->Sample();
  if (!s.ok()) {
    if (!probe_error_logged_) {
      UMAP_LOG(kWarn, "lazy sizing cannot read memory figures (", s.status().ToString(),
               "); the cache keeps its last ceiling");
      probe_error_logged_ = true;
    }
    return;
  }
  last_sample_ = *s;
  const size_t bs = rt_->block_size();
  BlockPool& pool = rt_->pool();
  const uint64_t held = uint64_t{pool.held()} * bs;
  budget_.Update(*s, held, rt_->UnrealizedBufferBytes());
  uint64_t allowance = budget_.allowance();
  if (board_ == nullptr && options_.use_board && s->cgroup_limited &&
      !probe_->cgroup_id().empty()) {
    auto b = CgroupBoard::Join(probe_->cgroup_id(), options_.board_dir);
    if (b.ok()) {
      board_ = *std::move(b);
    } else if (!probe_error_logged_) {
      UMAP_LOG(kWarn, "lazy sizing: no cgroup board (", b.status().ToString(),
               "); this process takes the cgroup's free room as it finds it");
      probe_error_logged_ = true;
    }
  }
  if (board_ != nullptr && s->cgroup_limited) {
    // Ask for one more step when growth was blocked since the last period.
    const uint64_t blocked = blocked_.load(std::memory_order_relaxed);
    const uint32_t limit = pool.limit();
    const uint64_t demand = (uint64_t{limit} + (blocked != blocked_seen_ ? step(limit) : 0)) * bs;
    blocked_seen_ = blocked;
    const uint64_t margin = budget_.margin(), reserved = budget_.reserved();
    const CgroupBoard::View v = board_->Publish(held, demand, now_us, [&](uint64_t caches) {
      // Room for all caches: the limit less the margin and what is used outside them.
      const uint64_t outside = s->used > caches ? s->used - caches : 0;
      const uint64_t taken = margin + outside + reserved;
      return s->limit > taken ? s->limit - taken : 0;
    });
    board_runtimes_.store(v.runtimes, std::memory_order_relaxed);
    allowance = v.share;
  }
  allowance_blocks_.store(ToBlocks(allowance, bs), std::memory_order_relaxed);
}

}  // namespace umap::runtime
