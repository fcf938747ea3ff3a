#include "runtime/io/io_manager.h"

#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/deadline.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/status_macros.h"

namespace umap::runtime::io {
namespace {

enum SlotState : int { kIdle = 0, kBusy = 1, kAbandoned = 2 };

constexpr uint64_t kCancelTag = ~0ull - 1;

uint64_t BackoffUs(uint32_t attempt) {
  return std::min<uint64_t>(10'000ull << std::min<uint32_t>(attempt, 7), 1'000'000);
}

int SizeBucket(size_t bytes) {
  int k = 0;
  for (size_t s = bytes >> 13; s != 0 && k < kSizeBuckets - 1; s >>= 1) ++k;
  return k;
}

constexpr size_t kHugePage = size_t{2} << 20;

// The read buffers, starting on a huge-page boundary (the slack around them is unmapped),
// so that AdviseHugePages can put whole slots in transparent huge pages.
absl::StatusOr<char*> MapAlignedBuffers(size_t len) {
  const size_t mapped = len + kHugePage;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return PosixError(errno, absl::StrCat("allocating ", len, " bytes of I/O buffers"));
  }
  char* const raw = static_cast<char*>(p);
  char* const start = reinterpret_cast<char*>(
      (reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) & ~uintptr_t{kHugePage - 1});
  const size_t head = static_cast<size_t>(start - raw);
  // Unmapping part of a fresh private mapping does not fail; if it did, the slack would
  // only stay mapped, never touched.
  if (head > 0) ::munmap(raw, head);
  if (mapped - head > len) ::munmap(start + len, mapped - head - len);
  return start;
}

}  // namespace

struct IoManager::QueueState : IoQueue {
  explicit QueueState(IoFileClient* c) : IoQueue(c), client(c) {}
  IoFileClient* const client;
  std::atomic<int64_t> outstanding{0};  // blocks queued, in flight or waiting for a retry
  // Reads issued on the file and not yet returned, abandoned ones included: the file and
  // the client must outlive them (a stalled call resumes into them when the DFS answers).
  std::atomic<int64_t> calls{0};
  std::atomic<bool> closing{false};
};

IoManager::QueueState* IoManager::StateOf(IoQueue* q) const { return static_cast<QueueState*>(q); }

// One io_uring. Slots carry one merged read each. The channel's eventfd is registered with
// the ring, so every completion makes it readable: whoever drives the channel polls it
// beside its other descriptors and calls Pump.
class IoManager::UringChannel {
 public:
  UringChannel(IoManager* m, char* buffers) : m_(m), buffers_(buffers) {}
  ~UringChannel() {
    if (ring_ok_) io_uring_queue_exit(&ring_);
    if (efd_ >= 0) ::close(efd_);
  }

  absl::Status Init() {
    const unsigned depth = m_->options_.depth;
    // Room for every slot's read and its cancellation.
    int r = io_uring_queue_init(2 * depth + 2, &ring_, 0);
    if (r < 0) return PosixError(-r, "io_uring_queue_init");
    ring_ok_ = true;
    efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd_ < 0) return PosixError(errno, "eventfd for an I/O channel");
    r = io_uring_register_eventfd(&ring_, efd_);
    if (r < 0) return PosixError(-r, "io_uring_register_eventfd");
    slots_.resize(depth);
    pub_.reset(new PublishedIo[depth]);
    slots_count_ = depth;
    for (unsigned i = 0; i < depth; ++i) {
      slots_[i].buf = buffers_ + i * m_->options_.max_io_bytes;
      free_[i / 64] |= uint64_t{1} << (i % 64);
    }
    return absl::OkStatus();
  }

  int event_fd() const { return efd_; }
  // Adds this channel's reads in flight to *out (any thread, lock-free).
  void CollectInFlight(InFlight* out) const;
  // Every slot holds a read (in flight or abandoned): the channel can take nothing.
  bool full() const { return busy_count_.load(std::memory_order_relaxed) == slots_count_; }

  // Makes the driver's poll return (new work it should take, a retry, shutdown).
  void Wake() {
    uint64_t one = 1;
    if (::write(efd_, &one, sizeof(one)) < 0 && errno != EAGAIN) {
      UMAP_LOG(kError, "I/O channel eventfd write failed: errno ", errno);
    }
  }

  // One pass: reap completions, abandon expired reads, issue queued work, submit. Returns
  // the poll timeout in ms until the next deadline or due retry (-1: none).
  int Pump();
  bool idle() {
    absl::MutexLock l(&mu_);
    return busy_ == 0;
  }

 private:
  struct Slot {
    int state = kIdle;
    Run run;
    uint64_t started_us = 0;
    char* buf = nullptr;
  };
  io_uring_sqe* GetSqe() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // The ring has room for every slot's read and cancellation; still, submit if full. Null
    // when the submission queue stays full (the kernel refuses to take entries): the caller
    // leaves the work for the next pump instead of spinning here.
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    for (int i = 0; sqe == nullptr && i < 3; ++i) {
      SubmitChecked();
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }
  // io_uring_submit with its result checked: entries the kernel did not take stay in the
  // submission queue and go with the next submit; their deadlines run meanwhile, so a ring
  // that keeps refusing ends in retries and ETIMEDOUT, never a hang. Logged once per errno.
  void SubmitChecked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int rc = io_uring_submit(&ring_);
    if (rc >= 0 || rc == -EAGAIN || rc == -EBUSY || rc == -EINTR) return;
    if (logged_submit_errno_ != -rc) {
      logged_submit_errno_ = -rc;
      UMAP_LOG(kError, "io_uring_submit of reads failed: errno ", -rc,
               "; they stay queued and are retried (their deadlines run)");
    }
  }
  void Issue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Reap(io_uring_cqe* cqe) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckDeadlines() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  IoManager* const m_;
  char* const buffers_;
  // One driver at a time (a handler thread, or the manager's own thread); uncontended.
  absl::Mutex mu_;
  io_uring ring_{};
  bool ring_ok_ = false;
  int efd_ = -1;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  // The lowest free slot is taken first (LowestFree), so that the buffers touched are the
  // first ones, as few as the reads in flight need.
  int LowestFree() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (unsigned w = 0; w < kFreeWords; ++w) {
      if (free_[w] != 0) return static_cast<int>(w * 64 + std::countr_zero(free_[w]));
    }
    return -1;
  }
  bool any_free() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return LowestFree() >= 0; }
  static constexpr unsigned kFreeWords = 256 / 64;  // depth <= 256 (Create checks)
  uint64_t free_[kFreeWords] ABSL_GUARDED_BY(mu_) = {};
  unsigned busy_ ABSL_GUARDED_BY(mu_) = 0;  // slots in state kBusy or kAbandoned
  std::atomic<unsigned> busy_count_{0};     // busy_, readable by the watchdog
  unsigned slots_count_ = 0;                // const after Init
  int logged_submit_errno_ ABSL_GUARDED_BY(mu_) = 0;
  // Per slot, what InFlightNow reports: published at issue, cleared when the kernel returns
  // the read (an abandoned read stays: the call is still out there).
  std::unique_ptr<PublishedIo[]> pub_;  // allocated in Init, never resized
};

void IoManager::UringChannel::CollectInFlight(InFlight* out) const {
  for (unsigned i = 0; i < slots_count_; ++i) {
    InFlightRequest r;
    if (!pub_[i].Read(&r)) continue;
    out->reads++;
    if (out->oldest_read.started_us == 0 || r.started_us < out->oldest_read.started_us) {
      out->oldest_read = r;
    }
  }
}

void IoManager::UringChannel::Issue() {
  const uint64_t bs = m_->options_.block_size;
  for (;;) {
    const int i = LowestFree();
    if (i < 0) return;
    // Past the large-read slots (SetReadCap), only short reads: the buffer memory of a
    // small cache's reads stays near its cap.
    const uint32_t max_blocks =
        static_cast<unsigned>(i) < m_->large_read_slots() ? m_->max_blocks_ : m_->short_blocks_;
    Run r;
    if (!m_->sched_.Next(max_blocks, m_->Now(), IoScheduler::Taker::kAsync, &r)) return;
    QueueState* qs = m_->StateOf(r.queue);
    if (qs->closing.load(std::memory_order_acquire)) {
      m_->Fail(r, absl::CancelledError("mapping is being removed"));
      continue;
    }
    if (r.attempt == 0) {
      m_->counters_.queue_wait_us.fetch_add(m_->Now() - r.enqueued_us, std::memory_order_relaxed);
    }
    File* f = qs->client->read_file();
    if (!f->SupportsRing()) {
      // Not through io_uring (memory env, a wrapper that does not offer it): a synchronous
      // helper reads it through File::ReadAt.
      r.sync_only = true;
      m_->sched_.Requeue(r, 0);
      continue;
    }
    io_uring_sqe* sqe = GetSqe();
    if (sqe == nullptr) {
      m_->sched_.Requeue(r, m_->Now() + 1000);  // the ring is full: the next pump issues it
      return;
    }
    free_[i / 64] &= ~(uint64_t{1} << (i % 64));
    Slot& s = slots_[i];
    s.state = kBusy;
    s.run = r;
    s.started_us = m_->Now();
    ++busy_;
    busy_count_.store(busy_, std::memory_order_relaxed);
    qs->calls.fetch_add(1, std::memory_order_relaxed);
    pub_[i].Publish(qs, qs->client->ByteOffset(r.first), r.count * bs, r.attempt, s.started_us);
    f->PrepareRead(sqe, qs->client->ByteOffset(r.first), s.buf,
                   static_cast<uint32_t>(r.count * bs));
    io_uring_sqe_set_data64(sqe, i);
  }
}

void IoManager::UringChannel::Reap(io_uring_cqe* cqe) {
  const uint64_t tag = io_uring_cqe_get_data64(cqe);
  if (tag == kCancelTag) return;
  Slot& s = slots_[tag];
  const int state = s.state;
  s.state = kIdle;
  pub_[tag].Clear();
  --busy_;
  busy_count_.store(busy_, std::memory_order_relaxed);
  free_[tag / 64] |= uint64_t{1} << (tag % 64);
  // An abandoned attempt was retried or failed already: its late result is dropped.
  QueueState* qs = m_->StateOf(s.run.queue);
  if (state == kBusy) {
    // The file sees its read's result (a fault-injecting wrapper may change it).
    const uint32_t len = static_cast<uint32_t>(s.run.count * m_->options_.block_size);
    const int res = qs->client->read_file()->FinishRead(qs->client->ByteOffset(s.run.first),
                                                        s.buf, len, cqe->res);
    m_->Finish(s.run, s.buf, res);
  }
  qs->calls.fetch_sub(1, std::memory_order_release);  // last touch of the queue
}

void IoManager::UringChannel::CheckDeadlines() {
  const uint64_t now = m_->Now();
  for (unsigned i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state != kBusy || !DeadlinePassed(s.started_us, m_->options_.timeout_us, now)) {
      continue;
    }
    s.state = kAbandoned;
    // Cancellation is best effort (an abandoned read keeps its slot and buffer until the
    // kernel returns it either way).
    if (io_uring_sqe* sqe = GetSqe()) {
      io_uring_prep_cancel64(sqe, i, 0);
      io_uring_sqe_set_data64(sqe, kCancelTag);
    }
    m_->RetryOrFail(s.run, "io_uring read", now - s.started_us);
  }
}

int IoManager::UringChannel::Pump() {
  absl::MutexLock l(&mu_);
  uint64_t counter;
  // Reset the eventfd before reaping: a completion after the reap makes it readable again.
  if (::read(efd_, &counter, sizeof(counter)) < 0 && errno != EAGAIN) {
    UMAP_LOG(kError, "I/O channel eventfd read failed: errno ", errno);
  }
  io_uring_cqe* cqe;
  unsigned head, seen = 0;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    Reap(cqe);
    ++seen;
  }
  io_uring_cq_advance(&ring_, seen);
  CheckDeadlines();
  Issue();
  SubmitChecked();
  // Work this channel had no slot for goes to the others.
  if (!any_free() && m_->sched_.backlog() > 0) m_->WakeChannels(this);
  uint64_t wake_at = m_->sched_.earliest_due_us();
  for (const Slot& sl : slots_) {
    if (sl.state == kBusy) {
      wake_at = std::min(wake_at, DeadlineOf(sl.started_us, m_->options_.timeout_us));
    }
  }
  return PollTimeoutMs(wake_at, m_->Now());
}

void IoManager::PublishedIo::Publish(const void* who, uint64_t off, uint64_t len, uint32_t att,
                                     uint64_t now) {
  started_us.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  owner.store(who, std::memory_order_relaxed);
  offset.store(off, std::memory_order_relaxed);
  length.store(len, std::memory_order_relaxed);
  attempt.store(att, std::memory_order_relaxed);
  started_us.store(now == 0 ? 1 : now, std::memory_order_release);
}

bool IoManager::PublishedIo::Read(InFlightRequest* out) const {
  const uint64_t s1 = started_us.load(std::memory_order_acquire);
  if (s1 == 0) return false;
  out->owner = owner.load(std::memory_order_relaxed);
  out->offset = offset.load(std::memory_order_relaxed);
  out->length = length.load(std::memory_order_relaxed);
  out->attempt = attempt.load(std::memory_order_relaxed);
  out->started_us = s1;
  std::atomic_thread_fence(std::memory_order_acquire);
  return started_us.load(std::memory_order_relaxed) == s1;
}

InFlight IoManager::InFlightNow() const {
  InFlight out;
  out.queued = sched_.backlog();
  for (const auto& ch : uring_) ch->CollectInFlight(&out);
  auto oldest = [](InFlightRequest* best, const InFlightRequest& r) {
    if (best->started_us == 0 || r.started_us < best->started_us) *best = r;
  };
  for (unsigned i = 0; i < sync_count_; ++i) {
    InFlightRequest r;
    if (!sync_slots_[i].pub.Read(&r)) continue;
    out.reads++;
    oldest(&out.oldest_read, r);
  }
  for (int i = 0; i < kInlineTrackers; ++i) {
    InFlightRequest r;
    if (!inline_pub_[i].Read(&r)) continue;
    out.reads++;
    oldest(&out.oldest_read, r);
  }
  for (int i = 0; i < kWriteTrackers; ++i) {
    InFlightRequest r;
    if (!write_pub_[i].Read(&r)) continue;
    out.writes++;
    oldest(&out.oldest_write, r);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<IoManager>> IoManager::Create(const IoOptions& options, Env* env) {
  if (options.channels == 0 || options.channels > 64) {
    return PosixError(EINVAL, absl::StrCat("io_channels ", options.channels, " must be in 1..64"));
  }
  if (options.uring_channels == 0 || options.uring_channels > 64) {
    return PosixError(
        EINVAL, absl::StrCat("io_uring channels ", options.uring_channels, " must be in 1..64"));
  }
  if (options.depth == 0 || options.depth > 256) {
    return PosixError(EINVAL, absl::StrCat("io_depth ", options.depth, " must be in 1..256"));
  }
  if (options.max_io_bytes < options.block_size || options.max_io_bytes > (64u << 20) ||
      options.max_io_bytes % options.block_size != 0) {
    return PosixError(EINVAL, absl::StrCat("io_max_bytes ", options.max_io_bytes,
                                           " must be a multiple of the block size ",
                                           options.block_size, " and at most 64 MiB"));
  }
  if (options.timeout_us == 0) return PosixError(EINVAL, "io_timeout_ms must be > 0");
  Engine engine = options.engine;
  if (engine == Engine::kAuto || engine == Engine::kUring) {
    io_uring probe;
    int r = io_uring_queue_init(4, &probe, 0);
    if (r == 0) {
      io_uring_queue_exit(&probe);
      engine = Engine::kUring;
    } else if (engine == Engine::kUring) {
      return PosixError(-r, "io_engine=uring but io_uring_queue_init failed");
    } else {
      UMAP_LOG(kWarn, "io_uring unavailable (errno ", -r, "); using synchronous I/O channels");
      engine = Engine::kPosix;
    }
  }
  std::unique_ptr<IoManager> m(new IoManager(options, env, engine));
  RETURN_IF_ERROR(m->Start());
  return m;
}

IoManager::IoManager(const IoOptions& options, Env* env, Engine engine)
    : options_(options),
      env_(env),
      engine_(engine),
      max_blocks_(static_cast<uint32_t>(options.max_io_bytes / options.block_size)),
      short_blocks_(static_cast<uint32_t>(std::clamp<size_t>(
          kShortReadBytes / options.block_size, 1, options.max_io_bytes / options.block_size))),
      large_slots_(options.depth),
      sched_(options.cache_blocks, options.max_queues),
      writer_(WriteEngineOptions{engine == Engine::kUring, options.depth, options.max_io_bytes,
                                 options.timeout_us},
              env) {}

size_t IoManager::UnrealizedBufferBytes() const {
  if (buffers_ == nullptr || buffers_len_ == 0) return 0;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t pages = (buffers_len_ + page - 1) / page;
  // The sizer's thread, every 100 ms: a small vector, not the fault path.
  std::vector<unsigned char> vec(pages);
  if (::mincore(buffers_, buffers_len_, vec.data()) != 0) return buffers_len_;
  size_t absent = 0;
  for (unsigned char v : vec) absent += (v & 1) ? 0 : 1;
  return absent * page;
}

void IoManager::SetReadCap(size_t bytes) {
  const unsigned depth = options_.depth;
  const size_t per_channel = bytes / std::max<size_t>(1, uring_.size());
  const unsigned large =
      bytes == 0 ? depth
                 : static_cast<unsigned>(
                       std::clamp<size_t>(per_channel / options_.max_io_bytes, 1, depth));
  large_slots_.store(large, std::memory_order_relaxed);
  AdviseHugePages(large);
}

void IoManager::AdviseHugePages(unsigned large) {
  absl::MutexLock l(&advice_mu_);
  if (buffers_ == nullptr || uring_.empty() || large == advised_large_) return;
  advised_large_ = large;
  // An O_DIRECT read into 4 KiB pages is one DMA segment per page, and a virtual disk
  // serves each segment as a piece of its own: measured on a virtio disk, 512 KiB reads,
  // 4 in flight, 0.9 GB/s into 4 KiB pages and 1.8 GB/s into huge pages. But a huge page
  // is realized whole at its first touch, which would break the read cap (slots past it
  // touch only their first kShortReadBytes). So only whole huge pages inside a channel's
  // large slots are advised; the rest is kept out of huge pages, also where the system
  // makes every anonymous mapping huge. Both are hints: without THP they change nothing.
  // Runs at Start and when the number of large slots changes (madvise takes the address
  // space's lock for writing: not on every sizing step).
  const size_t slot = options_.max_io_bytes;
  for (size_t c = 0; c < uring_.size(); ++c) {
    char* const base = buffers_ + c * options_.depth * slot;
    const uintptr_t lo = (reinterpret_cast<uintptr_t>(base) + kHugePage - 1) & ~(kHugePage - 1);
    const uintptr_t hi = reinterpret_cast<uintptr_t>(base + large * slot) & ~(kHugePage - 1);
    (void)::madvise(base, options_.depth * slot, MADV_NOHUGEPAGE);
    if (hi > lo) (void)::madvise(reinterpret_cast<char*>(lo), hi - lo, MADV_HUGEPAGE);
  }
}

absl::Status IoManager::Start() {
  const unsigned uring_slots =
      engine_ == Engine::kUring ? options_.uring_channels * options_.depth : 0;
  // Synchronous channels: the whole queue depth for the posix engine; beside io_uring, one
  // helper per channel for files without a descriptor.
  sync_count_ = engine_ == Engine::kPosix ? options_.channels * options_.depth : options_.channels;
  buffers_len_ = static_cast<size_t>(uring_slots + sync_count_) * options_.max_io_bytes;
  ASSIGN_OR_RETURN(buffers_, MapAlignedBuffers(buffers_len_));
  for (unsigned c = 0; c < uring_slots / options_.depth; ++c) {
    auto ch = std::make_unique<UringChannel>(
        this, buffers_ + static_cast<size_t>(c) * options_.depth * options_.max_io_bytes);
    RETURN_IF_ERROR(ch->Init());
    uring_.push_back(std::move(ch));
  }
  AdviseHugePages(large_slots_.load(std::memory_order_relaxed));
  sync_slots_.reset(new SyncSlot[sync_count_]);
  char* sync_bufs = buffers_ + static_cast<size_t>(uring_slots) * options_.max_io_bytes;
  for (unsigned i = 0; i < sync_count_; ++i) {
    sync_slots_[i].buf = sync_bufs + static_cast<size_t>(i) * options_.max_io_bytes;
  }
  DriveChannelsExternally(false);
  for (unsigned i = 0; i < sync_count_; ++i) {
    threads_.emplace_back([this, i] { SyncLoop(i); });
  }
  threads_.emplace_back([this] { WatchdogLoop(); });
  return absl::OkStatus();
}

IoManager::~IoManager() {
  {
    absl::MutexLock l(&watchdog_mu_);  // the watchdog's condition re-evaluates on release
    stop_.store(true, std::memory_order_release);
  }
  sched_.NotifyAll();
  for (auto& t : threads_) t.join();
  StopOwnChannelThreads();
  if (buffers_ != nullptr) ::munmap(buffers_, buffers_len_);
}

int IoManager::ChannelEventFd(unsigned i) const { return uring_[i]->event_fd(); }

int IoManager::PumpChannel(unsigned i) { return uring_[i]->Pump(); }

void IoManager::StopOwnChannelThreads() {
  stop_channel_threads_.store(true, std::memory_order_release);
  for (auto& ch : uring_) ch->Wake();
  for (auto& t : channel_threads_) t.join();
  channel_threads_.clear();
}

void IoManager::DriveChannelsExternally(bool external) {
  StopOwnChannelThreads();
  own_drivers_.store(!external, std::memory_order_release);
  if (external) return;
  stop_channel_threads_.store(false, std::memory_order_release);
  for (unsigned i = 0; i < uring_.size(); ++i) {
    channel_threads_.emplace_back([this, i] {
      ::pthread_setname_np(::pthread_self(), "umap-io");
      pollfd pfd = {uring_[i]->event_fd(), POLLIN, 0};
      for (;;) {
        const int timeout = uring_[i]->Pump();
        // Reads still in flight stay in the ring for the next driver.
        if (stop_channel_threads_.load(std::memory_order_acquire)) return;
        ::poll(&pfd, 1, timeout);
      }
    });
  }
}

IoQueue* IoManager::AddQueue(IoFileClient* client) { return new QueueState(client); }

void IoManager::RemoveQueue(IoQueue* queue) {
  QueueState* qs = StateOf(queue);
  qs->closing.store(true, std::memory_order_release);
  std::vector<std::pair<uint64_t, uint32_t>> dropped;
  sched_.Close(queue, &dropped);
  for (const auto& [block, cache_block] : dropped) {
    Run r;
    r.queue = queue;
    r.first = block;
    r.count = 1;
    Fail(r, absl::CancelledError("mapping is being removed"));
  }
  // Reads in flight (or waiting for a retry) finish or are dropped by their channels, and
  // abandoned calls return: a call stalled in the file system holds this up until the file
  // system answers (it cannot be taken back, and it uses the file).
  while (qs->outstanding.load(std::memory_order_acquire) > 0 ||
         qs->calls.load(std::memory_order_acquire) > 0) {
    WakeChannels();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  delete qs;
}

void IoManager::Submit(IoQueue* queue, uint64_t block, uint32_t cache_block, bool kick) {
  StateOf(queue)->outstanding.fetch_add(1, std::memory_order_relaxed);
  sched_.Push(queue, block, cache_block, Now());
  if (kick) Kick();
}

void IoManager::Kick() {
  // A submitting handler pumps its own channel after its batch of faults; only the
  // manager's own drivers (signal mode, or before handlers attach) need a wake-up.
  if (own_drivers_.load(std::memory_order_acquire)) WakeChannels();
}

void IoManager::NoteInlineRead(uint32_t blocks, size_t bytes) {
  counters_.reads.fetch_add(1, std::memory_order_relaxed);
  counters_.inline_reads.fetch_add(1, std::memory_order_relaxed);
  counters_.blocks.fetch_add(blocks, std::memory_order_relaxed);
  counters_.bytes.fetch_add(bytes, std::memory_order_relaxed);
  counters_.size_hist[SizeBucket(size_t{blocks} * options_.block_size)].fetch_add(
      1, std::memory_order_relaxed);
}

template <int N>
int IoManager::Track(PublishedIo (&pub)[N], std::atomic<bool> (&used)[N], const void* owner,
                     uint64_t offset, uint64_t length, uint32_t attempt) {
  for (int i = 0; i < N; ++i) {
    bool no = false;
    if (used[i].compare_exchange_strong(no, true, std::memory_order_acquire)) {
      pub[i].Publish(owner, offset, length, attempt, Now());
      return i;
    }
  }
  return -1;
}

int IoManager::BeginInlineRead(const IoQueue* queue, uint64_t offset, uint64_t length) {
  return Track(inline_pub_, inline_pub_used_, queue, offset, length, kInlineAttempt);
}

void IoManager::EndInlineRead(int token) {
  if (token < 0) return;
  inline_pub_[token].Clear();
  inline_pub_used_[token].store(false, std::memory_order_release);
}

void IoManager::WakeChannels(const UringChannel* except) {
  // Rare (retries, a channel out of slots, queue removal): drivers poll the eventfds.
  for (auto& ch : uring_) {
    if (ch.get() != except) ch->Wake();
  }
}

void IoManager::Finish(const Run& run, char* buf, int64_t res) {
  QueueState* qs = StateOf(run.queue);
  IoFileClient* c = qs->client;
  if (res == -EINVAL && c->FallBackToBuffered()) {
    sched_.Requeue(run, 0);
    WakeChannels();
    return;
  }
  if (res < 0 && RequeueIfInterrupted(run, static_cast<int>(-res))) return;
  const uint64_t off = c->ByteOffset(run.first);
  if (res < 0) {
    Fail(run, PosixError(static_cast<int>(-res),
                         absl::StrCat("read of ", run.count, " blocks of ", c->read_file()->name(),
                                      " at offset ", off)));
    return;
  }
  const size_t valid = c->ValidBytes(run.first, run.count);
  size_t got = static_cast<size_t>(res);
  if (got < valid) {
    // Short read: the rest is read synchronously (ReadAt loops to EOF); zeros only where
    // the file really ends (it shrank since map time).
    counters_.sync_reads.fetch_add(1, std::memory_order_relaxed);
    auto n = c->read_file()->ReadAt(off + got, absl::MakeSpan(buf + got, valid - got));
    if (!n.ok()) {
      if (!RequeueIfInterrupted(run, ErrnoFromStatus(n.status()))) Fail(run, n.status());
      return;
    }
    got += *n;
    if (got < valid) std::memset(buf + got, 0, valid - got);
  }
  counters_.reads.fetch_add(1, std::memory_order_relaxed);
  counters_.blocks.fetch_add(run.count, std::memory_order_relaxed);
  counters_.bytes.fetch_add(valid, std::memory_order_relaxed);
  counters_.size_hist[SizeBucket(static_cast<size_t>(run.count) * options_.block_size)].fetch_add(
      1, std::memory_order_relaxed);
  c->Complete(run, buf, absl::OkStatus());
  qs->outstanding.fetch_sub(run.count, std::memory_order_release);
}

bool IoManager::RequeueIfInterrupted(const Run& run, int err) {
  if (err != EINTR && err != EAGAIN) return false;
  // From a ring, or from a File::ReadAt that did not retry it itself (a DFS client wrapper):
  // an interrupted read is read again shortly, never a SIGBUS.
  counters_.interrupted.fetch_add(1, std::memory_order_relaxed);
  sched_.Requeue(run, Now() + 1000);
  WakeChannels();
  return true;
}

void IoManager::Fail(const Run& run, const absl::Status& st) {
  QueueState* qs = StateOf(run.queue);
  if (!absl::IsCancelled(st)) counters_.errors.fetch_add(1, std::memory_order_relaxed);
  qs->client->Complete(run, nullptr, st);
  qs->outstanding.fetch_sub(run.count, std::memory_order_release);
}

void IoManager::RetryOrFail(const Run& run, const char* what, uint64_t age_us) {
  counters_.timeouts.fetch_add(1, std::memory_order_relaxed);
  IoFileClient* c = StateOf(run.queue)->client;
  const uint64_t off = c->ByteOffset(run.first);
  // The watchdog's report: which file, where, how long, and what happens next.
  UMAP_LOG(kWarn, what, " of ", c->read_file()->name(), " offset ", off, " length ",
           static_cast<uint64_t>(run.count) * options_.block_size, " stalled for ", age_us / 1000,
           " ms (attempt ", run.attempt + 1, " of ", options_.retries + 1,
           run.attempt < options_.retries ? "); retrying" : "); giving up");
  if (run.attempt < options_.retries) {
    counters_.retries.fetch_add(1, std::memory_order_relaxed);
    Run again = run;
    again.attempt++;
    sched_.Requeue(again, Now() + BackoffUs(run.attempt));
    WakeChannels();
    return;
  }
  Fail(run, PosixError(ETIMEDOUT,
                       absl::StrCat("read of ", c->read_file()->name(), " at offset ", off,
                                    " timed out ", options_.retries + 1,
                                    " times (io_timeout_ms=", options_.timeout_us / 1000, ")")));
}

void IoManager::SyncLoop(unsigned index) {
  ::pthread_setname_np(::pthread_self(), "umap-io");
  SyncSlot& slot = sync_slots_[index];
  const IoScheduler::Taker who =
      engine_ == Engine::kPosix ? IoScheduler::Taker::kSync : IoScheduler::Taker::kSyncHelper;
  for (;;) {
    sched_.WaitForWork(&stop_, who, [this] { return Now(); });
    if (stop_.load(std::memory_order_acquire)) return;
    Run r;
    if (!sched_.Next(max_blocks_, Now(), who, &r)) continue;
    QueueState* qs = StateOf(r.queue);
    if (qs->closing.load(std::memory_order_acquire)) {
      Fail(r, absl::CancelledError("mapping is being removed"));
      continue;
    }
    if (r.attempt == 0 && !r.sync_only) {
      counters_.queue_wait_us.fetch_add(Now() - r.enqueued_us, std::memory_order_relaxed);
    }
    slot.run = r;
    slot.started_us.store(Now(), std::memory_order_relaxed);
    slot.state.store(kBusy, std::memory_order_release);
    IoFileClient* c = qs->client;
    const size_t valid = c->ValidBytes(r.first, r.count);
    qs->calls.fetch_add(1, std::memory_order_relaxed);
    slot.pub.Publish(qs, c->ByteOffset(r.first), valid, r.attempt,
                     slot.started_us.load(std::memory_order_relaxed));
    auto n = c->read_file()->ReadAt(c->ByteOffset(r.first), absl::MakeSpan(slot.buf, valid));
    slot.pub.Clear();
    int expected = kBusy;
    if (!slot.state.compare_exchange_strong(expected, kIdle, std::memory_order_acq_rel)) {
      // The watchdog abandoned this attempt (retried or failed it): drop the late result.
      slot.state.store(kIdle, std::memory_order_release);
    } else if (!n.ok()) {
      int err = ErrnoFromStatus(n.status());
      if (err == EINVAL && c->FallBackToBuffered()) {
        sched_.Requeue(r, 0);
      } else if (!RequeueIfInterrupted(r, err)) {
        Fail(r, n.status());
      }
    } else {
      Finish(r, slot.buf, static_cast<int64_t>(*n));
    }
    qs->calls.fetch_sub(1, std::memory_order_release);  // last touch of the queue
  }
}

void IoManager::WatchdogLoop() {
  ::pthread_setname_np(::pthread_self(), "umap-watchdog");
  // Deadlines of synchronous reads (io_uring channels watch their own slots).
  const auto period =
      std::chrono::microseconds(std::clamp<uint64_t>(options_.timeout_us / 4, 1000, 100'000));
  for (;;) {
    {
      // Woken early by the destructor, so that destroying a runtime never waits a period.
      absl::MutexLock l(&watchdog_mu_);
      watchdog_mu_.AwaitWithTimeout(
          absl::Condition(
              +[](std::atomic<bool>* stop) { return stop->load(std::memory_order_acquire); },
              &stop_),
          absl::FromChrono(period));
    }
    if (stop_.load(std::memory_order_acquire)) return;
    const uint64_t now = Now();
    for (unsigned i = 0; i < sync_count_; ++i) {
      SyncSlot& s = sync_slots_[i];
      if (s.state.load(std::memory_order_acquire) != kBusy) continue;
      const uint64_t started = s.started_us.load(std::memory_order_relaxed);
      if (!DeadlinePassed(started, options_.timeout_us, now)) continue;
      int expected = kBusy;
      if (!s.state.compare_exchange_strong(expected, kAbandoned, std::memory_order_acq_rel)) {
        continue;
      }
      RetryOrFail(s.run, "read", now - started);
    }
    // Runs that no channel took within a whole timeout while every channel that could read
    // them is stuck (on the same hung file system) count as timed out too, so the budget
    // still runs out and the fault gets its error instead of waiting for ever. Merely slow
    // channels (a busy CPU) are not stuck: a free slot anywhere means no verdict.
    bool sync_stuck = sync_count_ > 0;
    for (unsigned i = 0; i < sync_count_; ++i) {
      sync_stuck &= sync_slots_[i].state.load(std::memory_order_acquire) != kIdle;
    }
    bool async_stuck = !uring_.empty();
    for (auto& ch : uring_) async_stuck &= ch->full();
    Run r;
    while (now > options_.timeout_us && (sync_stuck || async_stuck) &&
           sched_.TakeOverdue(now - options_.timeout_us, sync_stuck, async_stuck, &r)) {
      RetryOrFail(r, "queued run", options_.timeout_us);
    }
  }
}

}  // namespace umap::runtime::io

namespace umap::runtime::io {

absl::Status IoManager::Write(File* file, absl::Span<const WritePiece> pieces,
                              absl::FunctionRef<void()> before_each) {
  // Reported by InFlightNow while this call runs (the whole write-back, from its first
  // offset); a call that finds every tracker taken is simply not reported.
  uint64_t total = 0;
  for (const WritePiece& p : pieces) total += p.len;
  const int tracker =
      pieces.empty() ? -1 : Track(write_pub_, write_pub_used_, file, pieces.front().offset, total);
  absl::Status s = writer_.Write(file, pieces, before_each);
  if (tracker >= 0) {
    write_pub_[tracker].Clear();
    write_pub_used_[tracker].store(false, std::memory_order_release);
  }
  return s;
}

}  // namespace umap::runtime::io
