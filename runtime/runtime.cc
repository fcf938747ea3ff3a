#include "runtime/runtime.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/fs_kind.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/private_dir.h"
#include "base/status_macros.h"
#include "recovery/recovery.h"
#include "runtime/fault_signal.h"
#include "runtime/guarded_write_back.h"
#include "runtime/journal_write_back.h"
#include "runtime/mapping.h"
#include "runtime/system_memory_probe.h"
#include "runtime/umap_c_internal.h"

namespace umap::runtime {
namespace {

constexpr int kMsgBatch = 16;
// How long a fill waits for a cache block before it gives up with SIGBUS. Long enough for
// write-backs to drain on a slow DFS, short enough that a stall is reported, not hidden.
constexpr auto kPoolWaitBudget = std::chrono::seconds(kFillWaitSeconds);

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Adds the figures of an I/O manager's counters to *s (Stats() sums the live manager's and
// those of the managers earlier quiesces closed).
void AddIoFigures(io::IoManager& manager, umap_stats* s) {
  io::IoCounters& io = manager.counters();
  s->io_reads += io.reads.load();
  s->io_bytes += io.bytes.load();
  s->io_queue_wait_us += io.queue_wait_us.load();
  s->io_timeouts += io.timeouts.load();
  s->io_retries += io.retries.load();
  s->io_read_failures += io.errors.load();
  WriteCounters& wc = manager.writer().counters();
  s->io_writes += wc.writes.load();
  s->io_write_bytes += wc.write_bytes.load();
  s->io_write_timeouts += wc.write_timeouts.load();
  for (int k = 0; k < UMAP_IO_SIZE_BUCKETS && k < io::kSizeBuckets; ++k) {
    s->io_size_hist[k] += io.size_hist[k].load();
  }
  s->io_inline_reads += io.inline_reads.load();
  s->io_engine = manager.engine() == io::Engine::kUring ? UMAP_IO_URING : UMAP_IO_POSIX;
}

// The I/O channel the current thread drives (a handler thread with io_uring), or -1.
// Initial-exec TLS: it is read inside the SIGBUS handler, where a first access to lazily
// allocated TLS (a dlopen'ed library's) could call malloc.
__attribute__((tls_model("initial-exec"))) thread_local int t_channel = -1;

// The calling thread's id for signal-mode faults, read once per thread instead of one
// gettid(2) per miss (same TLS model, for the same reason). A fork() child's only thread
// inherits its parent's value: the child handler below forgets it.
__attribute__((tls_model("initial-exec"))) thread_local pid_t t_tid = 0;
// The address of this thread's last fault retried because its range had been handed to the
// kernel (Runtime::WasHandedOff): a second fault there is the kernel's own SIGBUS.
__attribute__((tls_model("initial-exec"))) thread_local uint64_t t_handed_off_retry = 0;
// fork(): the process-wide locks are held across it, so the child finds them free; in the
// child its thread has a new id, and the parent's runtimes, whose threads did not come
// along, must never be reached (umap_c.cc, fault_signal.cc).
void BeforeFork() {
  c_api::LockForFork();
  LockFaultSignalForFork();
}
void AfterForkInParent() {
  UnlockFaultSignalAfterFork(/*child=*/false);
  c_api::UnlockAfterFork(/*child=*/false);
}
void AfterForkInChild() {
  t_tid = 0;
  UnlockFaultSignalAfterFork(/*child=*/true);
  c_api::UnlockAfterFork(/*child=*/true);
}
pid_t CurrentTid() {
  if (t_tid == 0) [[unlikely]] {
    t_tid = static_cast<pid_t>(::syscall(SYS_gettid));
  }
  return t_tid;
}

}  // namespace

struct Runtime::HandlerCtx {
  char* staging = nullptr;
};

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const RuntimeOptions& options) {
  ASSIGN_OR_RETURN(Geometry geo, ComputeGeometry(options));
  const bool signal_mode = options.fault_mode != UMAP_FAULT_HANDLER;
  ASSIGN_OR_RETURN(std::unique_ptr<Uffd> uffd, Uffd::Open(signal_mode));
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    // Once per process; a warning when it changes what programs may do (EFAULT).
    const std::string how =
        absl::StrCat("userfaultfd through ", UffdAccessName(uffd->access()), ", faults resolved ",
                     signal_mode ? "in the faulting thread (signal mode)" : "by handler threads");
    if (uffd->access() == UffdAccess::kUserModeOnly) {
      UMAP_LOG(kWarn, how,
               "; system calls given a non-resident Umap buffer fail with EFAULT "
               "(docs/operations.md: how a site grants /dev/userfaultfd)");
    } else {
      UMAP_LOG(kInfo, how);
    }
  }
  std::unique_ptr<Runtime> rt(new Runtime(options, geo, std::move(uffd), signal_mode));
  RETURN_IF_ERROR(rt->Start());
  return rt;
}

Runtime::Runtime(const RuntimeOptions& options, const Geometry& geo, std::unique_ptr<Uffd> uffd,
                 bool signal_mode)
    : options_(options),
      geo_(geo),
      page_size_(static_cast<size_t>(::sysconf(_SC_PAGESIZE))),
      signal_mode_(signal_mode),
      env_(options.env ? options.env : Env::Default()),
      uffd_(std::move(uffd)),
      pool_(geo.cache_blocks),
      refs_(&pool_),
      shadows_(geo.shadow_blocks, geo.block_size),
      fill_tids_(geo.cache_blocks),
      prefetch_blocks_(static_cast<uint32_t>(
          std::min<size_t>(options.prefetch_bytes / geo.block_size, geo.cache_blocks / 4))) {}

absl::Status Runtime::Start() {
  if (shadows_.at(0).data == nullptr) return PosixError(ENOMEM, "allocating shadow buffers");
  if (!pool_.ok() || !fill_tids_.ok()) {
    return PosixError(
        ENOMEM, absl::StrCat("reserving the metadata of ", geo_.cache_blocks, " cache blocks"));
  }
  if (signal_mode_) {
    // No handler threads: the faulting threads resolve their faults, the I/O manager drives
    // its channels (read-ahead, descriptor-less files) with threads of its own.
    staging_arena_ = MapBuffer(size_t{kStagingBuffers} * geo_.block_size);
    if (staging_arena_ == nullptr) {
      return PosixError(ENOMEM, "allocating the fault staging buffers");
    }
    staging_free_ = std::make_unique<IndexStack>(kStagingBuffers);
    for (uint32_t i = 0; i < kStagingBuffers; ++i) staging_free_->Push(i);
    static std::once_flag atfork;
    std::call_once(atfork, [] {
      if (int err = ::pthread_atfork(BeforeFork, AfterForkInParent, AfterForkInChild)) {
        // Only a fork() child that faults on a runtime of its own would notice: its
        // references would be kept under its parent's thread id until reclaimed as dead.
        UMAP_LOG(kWarn, "pthread_atfork failed (errno ", err,
                 "); thread ids of forked "
                 "children's faults may be their parent's");
      }
    });
    // Run buffers (the start of a sequential stream is read with its first read-ahead
    // window). Without them every stream goes through the I/O channels.
    if (kRunBytes / geo_.block_size >= 2) {
      run_arena_ = MapBuffer(size_t{kRunBuffers} * kRunBytes);
      if (run_arena_ != nullptr) {
        run_blocks_ = static_cast<uint32_t>(kRunBytes / geo_.block_size);
        run_free_ = std::make_unique<IndexStack>(kRunBuffers);
        for (uint32_t i = 0; i < kRunBuffers; ++i) run_free_->Push(i);
      }
    }
  }
  // Every runtime is known to the signal dispatcher: signal mode resolves its faults there,
  // and in both modes a thread touching a quiesced mapping waits there (fault_signal.h).
  RETURN_IF_ERROR(AttachFaultSignal(this));
  return StartMachinery();
}

absl::Status Runtime::StartMachinery() {
  if (uffd_ == nullptr) {
    ASSIGN_OR_RETURN(uffd_, Uffd::Open(signal_mode_));
  }
  uffd_access_.store(static_cast<int>(uffd_->access()), std::memory_order_relaxed);
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));  // -1: madvise only
  io::IoOptions io;
  io.engine = options_.io_engine == UMAP_IO_URING   ? io::Engine::kUring
              : options_.io_engine == UMAP_IO_POSIX ? io::Engine::kPosix
                                                    : io::Engine::kAuto;
  io.channels = options_.io_channels;
  io.uring_channels = options_.handler_threads;  // each handler drives one ring
  io.depth = options_.io_depth;
  io.max_io_bytes = options_.io_max_bytes;
  io.block_size = geo_.block_size;
  io.cache_blocks = geo_.cache_blocks;
  io.max_queues = kMaxMappings;
  io.timeout_us = uint64_t{options_.io_timeout_ms} * 1000;
  io.retries = options_.io_retries;
  auto manager = io::IoManager::Create(io, env_);
  if (!manager.ok()) {
    ReleaseKernelObjects();
    return manager.status();
  }
  {
    absl::MutexLock l(&io_swap_mu_);
    io_ = *std::move(manager);
  }
  if (!sizing_started_) {
    // Once, before any thread reads sizer_; after the I/O manager, whose buffers a cache
    // fixed from the memory budget counts.
    if (absl::Status s = StartSizing(); !s.ok()) {
      ReleaseKernelObjects();
      return s;
    }
    sizing_started_ = true;
  }
  // Every start, a resume's too: its I/O manager is new (a fixed cache's limit never moves
  // again, and the sizer's next tick is up to 10 ms away).
  UpdateReadCap();
  stop_.store(false, std::memory_order_release);
  if (!signal_mode_) {
    if (io_->channel_count() > 0) io_->DriveChannelsExternally(true);
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd_ < 0) {
      const int err = errno;
      StopThreads();
      ReleaseKernelObjects();
      return PosixError(err, "eventfd for the handler threads");
    }
    for (unsigned i = 0; i < options_.handler_threads; ++i) {
      handlers_.emplace_back([this, i] { HandlerLoop(static_cast<int>(i)); });
    }
  }
  for (unsigned i = 0; i < options_.writeback_threads; ++i) {
    writers_.emplace_back([this] { WriteBackLoop(); });
  }
  if (sizer_ != nullptr) sizer_->Start();
  if (options_.stats_period_ms > 0) {
    auto p = StatsPublisher::Start(this, options_.stats_period_ms);
    if (p.ok()) {
      stats_ = *std::move(p);
    } else {
      // Statistics are for people watching; a runtime without them still works.
      UMAP_LOG(kWarn, "no stats segment for umap-stat: ", p.status().ToString());
    }
  }
  return absl::OkStatus();
}

void Runtime::StopThreads() {
  stats_.reset();  // its thread reads everything below
  // Before the write-back threads: the sizer's evictions may wait for them.
  if (sizer_ != nullptr) sizer_->Stop();
  stop_.store(true);
  uint64_t one = 1;
  if (stop_fd_ >= 0 && ::write(stop_fd_, &one, sizeof(one)) < 0) {
    UMAP_LOG(kError, "eventfd write failed: errno ", errno);
  }
  for (auto& t : handlers_) t.join();
  handlers_.clear();
  // Unmapping waits for reads in flight: the manager drives its rings again.
  if (!signal_mode_ && io_ != nullptr && io_->channel_count() > 0) {
    io_->DriveChannelsExternally(false);
  }
  shadows_.WakeAll();
  for (auto& t : writers_) t.join();
  writers_.clear();
}

void Runtime::ReleaseKernelObjects() {
  {
    absl::MutexLock l(&io_swap_mu_);
    // Its figures live on in Stats(): a resume starts a new manager.
    if (io_ != nullptr) AddIoFigures(*io_, &io_carried_);
    io_.reset();  // closes its rings and joins its threads
  }
  if (stop_fd_ >= 0) ::close(stop_fd_);
  stop_fd_ = -1;
  if (pidfd_ >= 0) ::close(pidfd_);
  pidfd_ = -1;
  uffd_.reset();
}

Runtime::~Runtime() {
  stats_.reset();                         // its thread reads everything below
  if (sizer_ != nullptr) sizer_->Stop();  // no more parking or shrinking
  std::vector<Mapping*> left;
  {
    absl::MutexLock l(&mu_);
    for (uint32_t i = 0; i < slot_high_.load(); ++i) {
      if (Mapping* m = slots_[i].load()) left.push_back(m);
    }
  }
  // A quiesced or fenced runtime wrote everything back when it quiesced.
  const bool running = state() == RuntimeState::kRunning;
  for (Mapping* m : running ? left : std::vector<Mapping*>()) {
    absl::Status s = m->Sync(0, m->blocks());
    if (s.ok()) {
      if (absl::Status d = m->write_back()->Drain(); !d.ok()) {
        UMAP_LOG(kError, "runtime destroyed with mapping of ", m->file()->name(),
                 " whose final file sync failed; the journal keeps its transactions for "
                 "recovery: ",
                 d.ToString());
      }
    }
    if (!s.ok()) {
      UMAP_LOG(kError, "runtime destroyed with mapping of ", m->file()->name(),
               " whose write-back failed; its unsynced changes are dropped: ", s.ToString());
    }
  }
  StopThreads();
  for (Mapping* m : left) {
    // Best effort; the data is in the file or journal.
    if (running) m->CloseWriteBack().IgnoreError();
    Destroy(m);
  }
  ReleaseKernelObjects();  // after the mappings: the I/O channels complete fills into them
  DetachFaultSignal(this);
  // Threads parked on a quiesced range retry their access, which now finds it unmapped.
  if (!running) WakeParkedThreads();
  if (signal_mode_) UnmapBuffer(staging_arena_, size_t{kStagingBuffers} * geo_.block_size);
  if (signal_mode_) UnmapBuffer(run_arena_, size_t{kRunBuffers} * kRunBytes);
  absl::MutexLock l(&mu_);
  CloseJournalLocked(/*only_if_idle=*/false);
}

void Runtime::CloseIdleJournal() {
  absl::MutexLock l(&mu_);
  CloseJournalLocked(/*only_if_idle=*/true);
}

void Runtime::CloseJournalLocked(bool only_if_idle) {
  if (journal_ == nullptr || journal_->suspended()) return;
  // A map between taking the handle and registering its mapping uses it.
  if (only_if_idle && journal_users_ > 0) return;
  const std::string dir = journal_->dir();
  const bool idle = journal_
                        ->Run([](journal::Journal& j) {
                          journal::Journal::Stats st = j.stats();
                          return absl::Status(st.pending_txns == 0 && st.mappings == 0
                                                  ? absl::OkStatus()
                                                  : absl::FailedPreconditionError("pending"));
                        })
                        .ok();
  if (only_if_idle && !idle) return;
  journal_.reset();  // an idle journal compacts itself to its minimum as it closes
  // A journal we created and that holds nothing is removed, and with it the fallback parent
  // made for it alone (base/private_dir.h: a fresh .XXXXXX per runtime); anything else stays
  // for umap-recover.
  if (!journal_auto_ || !idle) return;
  std::string remove = dir;
  const std::string parent = dir.substr(0, dir.rfind('/'));
  if (absl::StrContains(parent.substr(parent.rfind('/') + 1),
                        absl::StrCat("umap-journal-", ::geteuid(), "."))) {
    remove = parent;
  }
  if (absl::Status s = env_->RemoveTree(remove); !s.ok()) {
    UMAP_LOG(kWarn, "could not remove the automatic journal ", remove, ": ", s.message());
  }
}

void Runtime::HandlerLoop(int id) {
  ::pthread_setname_np(::pthread_self(), "umap-fault");
  HandlerCtx ctx;
  // The staging buffer is allocated once per handler: the fault path never allocates.
  void* p = ::mmap(nullptr, geo_.block_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    UMAP_LOG(kError, "handler ", id, ": cannot allocate its staging buffer; exiting");
    return;
  }
  ctx.staging = static_cast<char*>(p);
  uffd_msg msgs[kMsgBatch];
  // With io_uring, this handler drives one I/O channel: it polls the channel's eventfd
  // (readable on completions) beside the userfaultfd, and pumps the channel after each
  // batch of faults, so the misses of one batch are merged and issued together.
  const bool drives = static_cast<unsigned>(id) < io_->channel_count();
  if (drives) t_channel = id;
  struct pollfd fds[3] = {{uffd_->fd(), POLLIN, 0},
                          {stop_fd_, POLLIN, 0},
                          {drives ? io_->ChannelEventFd(id) : -1, POLLIN, 0}};
  int timeout = -1;
  while (!stop_.load(std::memory_order_acquire)) {
    int r = ::poll(fds, drives ? 3 : 2, timeout);
    if (r < 0) {
      if (errno == EINTR) continue;
      UMAP_LOG(kError, "handler ", id, ": poll failed: errno ", errno);
      break;
    }
    if (fds[1].revents) break;
    if (fds[0].revents & POLLIN) {
      // Several handlers wake for one message; the others read nothing and go on.
      SrcuReadLock section(mapping_srcu_);
      int n = uffd_->Read(msgs, kMsgBatch);
      if (n < 0) UMAP_LOG(kError, "handler ", id, ": reading userfaultfd failed: errno ", -n);
      for (int i = 0; i < n; ++i) HandleFault(ctx, msgs[i]);
    }
    // Outside the epoch section: completions reach mappings whose removal waits for them.
    if (drives) timeout = io_->PumpChannel(id);
  }
  ::munmap(p, geo_.block_size);
}

void Runtime::HandleFault(HandlerCtx& ctx, const uffd_msg& msg) {
  if (msg.event != UFFD_EVENT_PAGEFAULT) return;
  const uint64_t addr = msg.arg.pagefault.address;
  const uint64_t flags = msg.arg.pagefault.flags;
  const pid_t tid = static_cast<pid_t>(msg.arg.pagefault.feat.ptid);
  Mapping* m = FindMapping(addr);
  if (m == nullptr) {
    // The range was unregistered after the fault was queued; let the thread retry.
    if (int err = uffd_->Wake(reinterpret_cast<void*>(addr & ~(page_size_ - 1)), page_size_)) {
      UMAP_LOG(kError, "UFFDIO_WAKE of a fault outside every mapping failed: errno ", err);
    }
    return;
  }
  // While a quiesce runs, the faulting thread stays blocked in the kernel: the quiesce
  // makes the range inaccessible before it closes the userfaultfd (which wakes the thread),
  // so its retried access waits in the SIGSEGV handler until Resume (fault_signal.h).
  if (state() != RuntimeState::kRunning) return;
  // Being handed to the kernel: the thread stays blocked until the kernel's mapping
  // replaced the range (HandOff wakes it).
  if (m->handing_off()) return;
  const uint64_t block = m->BlockOf(addr);
  if (flags & UFFD_PAGEFAULT_FLAG_WP) {
    m->HandleWriteProtect(block, tid);
  } else {
    m->HandleMissing(block, (flags & UFFD_PAGEFAULT_FLAG_WRITE) != 0, tid, ctx.staging);
  }
}

Mapping* Runtime::FindMapping(uint64_t addr) const {
  const uint32_t high = slot_high_.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < high; ++i) {
    Mapping* m = slots_[i].load(std::memory_order_acquire);
    if (m != nullptr && m->Contains(addr)) return m;
  }
  return nullptr;
}

void Runtime::WriteBackLoop() {
  // Each round takes every queued shadow (up to a batch), groups them by mapping and hands
  // each group to its sink at once: one journal transaction (or staging batch) for many
  // evictions instead of one fsync each.
  ::pthread_setname_np(::pthread_self(), "umap-writeback");
  constexpr size_t kBatch = 64;
  std::vector<uint32_t> batch;
  std::vector<uint32_t> group;
  batch.reserve(kBatch);
  for (;;) {
    uint32_t s = shadows_.Dequeue(stop_);
    if (s == IndexStack::kEmpty) return;
    batch.clear();
    batch.push_back(s);
    while (batch.size() < kBatch && (s = shadows_.TryDequeue()) != IndexStack::kEmpty) {
      batch.push_back(s);
    }
    bool failed = false;
    while (!batch.empty()) {
      Mapping* m = shadows_.at(batch.front()).mapping;
      group.clear();
      // One block has at most one shadow in flight, so a group never holds a block twice.
      auto rest = std::partition(batch.begin(), batch.end(),
                                 [&](uint32_t i) { return shadows_.at(i).mapping != m; });
      group.assign(rest, batch.end());
      batch.erase(rest, batch.end());
      if (m->WriteShadows(group)) continue;
      failed = true;
      if (stop_.load(std::memory_order_acquire)) {
        UMAP_LOG(kError, "shutting down with ", group.size(), " evicted blocks of ",
                 m->file()->name(), " that could not be written back");
        continue;
      }
      for (uint32_t i : group) shadows_.Enqueue(i);
    }
    // After a failure, back off before the retry; the blocks stay readable from their
    // shadows and umsync reports the error meanwhile.
    if (failed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Runtime::EvictBatch(const uint32_t* cache_blocks, const uint64_t* owners, int n, bool* freed,
                         int pass, EvictionBatch& batch) {
  batch.count = 0;
  // Several mappings share the cache by marginal gain (cache_sizer.h): in the clock's first
  // sweep, a mapping within its share keeps its blocks while another is over its share.
  const bool quotas = pass == 0 && sizer_ != nullptr && sizer_->quotas_active();
  for (int i = 0; i < n; ++i) {
    freed[i] = false;
    Mapping* m = slots_[owners[i] >> 48].load(std::memory_order_acquire);
    // A mapping being unmapped frees its blocks in its own teardown.
    if (m == nullptr) continue;
    if (quotas && m->resident_blocks() <= m->quota()) continue;
    if (m->PrepareEvict(owners[i] & ((1ull << 48) - 1), cache_blocks[i], &batch)) {
      batch.victims[batch.count - 1].index = i;
    }
  }
  if (batch.count == 0) return;
  DiscardBatch(pidfd_, &batch);
  for (int k = 0; k < batch.count; ++k) {
    const EvictionBatch::Victim& v = batch.victims[k];
    v.mapping->FinishEvict(v);
    freed[v.index] = v.discarded;
  }
}

int Runtime::EvictBatchSize(bool bulk) const {
  // Evictions are batched so that one TLB flush covers many (eviction_batch.h). A batch's
  // victims leave before they must, and while the next misses take their blocks the cache
  // holds that much less: with a working set about the cache's size, batches of 1/8 of an
  // 8 MiB cache doubled the misses against 1/64. Read-ahead (bulk) takes blocks by the
  // window and re-reads nothing: its batches may be 1/8 of the cache, which lets a scan
  // through a small cache (lazy sizing keeps one at 8 MiB) flush a TLB per 256 evictions.
  return static_cast<int>(
      std::clamp<uint32_t>(pool_.limit() / (bulk ? 8 : 64), 1, EvictionScratch::kLargeBatch));
}

uint32_t Runtime::TryAcquireBlock(bool bulk) {
  // A free block needs no eviction buffers.
  const uint32_t free = pool_.TryTakeFree();
  if (free != BlockPool::kNone) return free;
  return eviction_scratch_.With([this, bulk](BlockPool::Victims* victims, EvictionBatch* batch) {
    return pool_.AcquireBatched([this, batch](const uint32_t* c, const uint64_t* o, int n, bool* f,
                                              int pass) { EvictBatch(c, o, n, f, pass, *batch); },
                                [this] { refs_.ReclaimDead(); }, victims, EvictBatchSize(bulk));
  });
}

uint32_t Runtime::ShrinkPool(uint32_t max_blocks) {
  return eviction_scratch_.With([&](BlockPool::Victims* victims, EvictionBatch* batch) {
    return pool_.Shrink([this, batch](const uint32_t* c, const uint64_t* o, int n, bool* f,
                                      int pass) { EvictBatch(c, o, n, f, pass, *batch); },
                        victims, EvictBatchSize(/*bulk=*/false), max_blocks);
  });
}

void Runtime::ReserveOutsideCache(uint64_t bytes) { AdjustOutsideCache(bytes, 0); }

void Runtime::ReleaseOutsideCache(uint64_t bytes) { AdjustOutsideCache(0, bytes); }

void Runtime::AdjustOutsideCache(uint64_t add, uint64_t remove) {
  if (sizer_ != nullptr) {
    if (add != 0) sizer_->Reserve(add);
    if (remove != 0) sizer_->Release(remove);
    return;
  }
  absl::MutexLock l(&outside_mu_);
  if (outside_reserved_ == 0) fixed_limit_ = pool_.limit();
  outside_reserved_ += add;
  outside_reserved_ -= std::min(outside_reserved_, remove);
  const uint64_t take = outside_reserved_ / geo_.block_size;
  pool_.set_limit(static_cast<uint32_t>(
      std::max<uint64_t>(SizingPolicy::kMinBlocks, fixed_limit_ > take ? fixed_limit_ - take : 0)));
  UpdateReadCap();
}

void Runtime::MakeRoom(uint32_t max_blocks) {
  if (sizer_ != nullptr || pool_.held() <= pool_.limit()) return;
  WhileMappingsPinned([&] { ShrinkPool(max_blocks); });
}

void Runtime::UpdateReadCap() {
  io_->SetReadCap(
      std::max<size_t>(io_->options().max_io_bytes, size_t{pool_.limit()} * geo_.block_size / 2));
}

absl::Status Runtime::StartSizing() {
  std::shared_ptr<MemoryProbe> probe = options_.memory_probe;
  if (!options_.lazy_sizing && options_.cache_bytes != 0) return absl::OkStatus();  // fixed
  // Without lazy sizing the budget is read once: no pressure trigger.
  if (probe == nullptr) probe = SystemMemoryProbe::Create("", options_.lazy_sizing);
  if (options_.lazy_sizing) {
    CacheSizer::Options o;
    o.start_blocks = geo_.start_blocks;
    o.min_step_blocks = static_cast<uint32_t>(std::max<size_t>(16, (1u << 20) / geo_.block_size));
    ASSIGN_OR_RETURN(sizer_, CacheSizer::Create(this, std::move(probe), o));
    return absl::OkStatus();
  }
  // Lazy sizing off, cache_bytes unset: a fixed cache of what the budget allows now.
  ASSIGN_OR_RETURN(MemorySample sample, probe->Sample());
  MemoryBudget budget;
  budget.Update(sample, 0, io_->UnrealizedBufferBytes());
  pool_.set_limit(static_cast<uint32_t>(std::min<uint64_t>(
      pool_.capacity(),
      std::max<uint64_t>(SizingPolicy::kMinBlocks, budget.allowance() / geo_.block_size))));
  UMAP_LOG(kInfo, "fixed cache of ", uint64_t{pool_.limit()} * geo_.block_size >> 20,
           " MiB from the memory budget (", probe->Describe(), ")");
  return absl::OkStatus();
}

uint32_t Runtime::AcquireBlock() {
  auto deadline = std::chrono::steady_clock::now() + kPoolWaitBudget;
  for (;;) {
    const uint32_t cache_block = TryAcquireBlock();
    if (cache_block != BlockPool::kNone) return cache_block;
    // A refusal that never ends (the journal was taken over, the locks were lost): no
    // write-back will free a block, so the fault fails now rather than in a minute.
    const int wb = last_writeback_errno();
    if (wb == ESTALE || wb == ENOLCK) return BlockPool::kNone;
    // Every candidate is busy, in a umsync, or dirty with no free shadow: write-backs are
    // behind. Wait for them rather than exceed the cache bound.
    counters_.pool_waits.fetch_add(1, std::memory_order_relaxed);
    // Busy blocks may be fills in flight on this handler's own channel: only this thread
    // reaps them, so reap while waiting (no entry lock is held here).
    if (t_channel >= 0) io_->PumpChannel(static_cast<unsigned>(t_channel));
    if (std::chrono::steady_clock::now() > deadline) return BlockPool::kNone;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

bool Runtime::HandleFaultSignal(uint64_t addr, bool write) {
  if (!signal_mode_) return false;
  uint32_t generation = ParkGeneration();
  {
    SrcuReadLock section(mapping_srcu_);
    Mapping* m = FindMapping(addr);
    if (m == nullptr) {
      // A fault raised while the range was Umap's, handled after it was handed to the
      // kernel: retry it once on the kernel's mapping. (Again at the same address: the
      // kernel's own SIGBUS, past the file's end, which is the application's.)
      if (!WasHandedOff(addr) || t_handed_off_retry == addr) return false;
      t_handed_off_retry = addr;
      return true;
    }
    t_handed_off_retry = 0;
    // A quiesce, or a hand-off of this mapping to the kernel (HandOff), waits for every
    // resolution that started before it (WaitForHandlers).
    if (state() == RuntimeState::kRunning && !m->handing_off()) {
      return m->ResolveFault(addr, write, CurrentTid());
    }
  }
  // Quiescing or handing off: wait outside the read section (both wait for sections, not
  // for parked threads), then retry the access, which faults again in whatever state is
  // next (a hand-off leaves the kernel's mapping there).
  ParkFaultingThread(generation);
  return true;
}

Runtime::QuiescedAccess Runtime::ClassifyQuiescedAccess(uint64_t addr, bool write) {
  SrcuReadLock section(mapping_srcu_);
  const Mapping* m = FindMapping(addr);
  if (m == nullptr) return QuiescedAccess::kNotOurs;
  switch (state()) {
    case RuntimeState::kRunning: {
      // A fault taken while the range was PROT_NONE and handled after the resume is
      // retried; one the running range's own protection forbids (a write to a read-only
      // mapping) is the application's, and must not be retried for ever.
      const int needed = write ? PROT_WRITE : PROT_READ;
      return (m->region_prot() & needed) != 0 ? QuiescedAccess::kRetry : QuiescedAccess::kNotOurs;
    }
    case RuntimeState::kFenced:
      return QuiescedAccess::kFenced;
    default:
      return QuiescedAccess::kPark;
  }
}

char* Runtime::AcquireStaging() {
  for (;;) {
    const uint32_t i = staging_free_->Pop();
    if (i != IndexStack::kEmpty) return staging_arena_ + size_t{i} * geo_.block_size;
    // More threads are resolving faults at once than there are buffers: wait for one.
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void Runtime::ReleaseStaging(char* buf) {
  staging_free_->Push(static_cast<uint32_t>((buf - staging_arena_) / geo_.block_size));
}

absl::Status Runtime::EnterOperation(bool fenced_ok) {
  absl::MutexLock l(&gate_mu_);
  gate_mu_.Await(absl::Condition(&gate_open_));
  if (!fenced_ok && state() == RuntimeState::kFenced) {
    return PosixError(ESTALE,
                      "umap: this runtime is fenced: after a checkpoint restore its "
                      "journal or files had been changed by another process "
                      "(see the log of umap_resume)");
  }
  ++operations_;
  return absl::OkStatus();
}

void Runtime::LeaveOperation() {
  absl::MutexLock l(&gate_mu_);
  --operations_;
}

char* Runtime::TryAcquireRunBuffer() {
  if (run_free_ == nullptr) return nullptr;
  const uint32_t i = run_free_->Pop();
  return i == IndexStack::kEmpty ? nullptr : run_arena_ + size_t{i} * kRunBytes;
}

void Runtime::ReleaseRunBuffer(char* buf) {
  run_free_->Push(static_cast<uint32_t>((buf - run_arena_) / kRunBytes));
}

absl::StatusOr<void*> Runtime::Map(void* addr, size_t length, int prot, int flags, int fd,
                                   off_t offset, const CoherenceRequest& coherence) {
  Operation op(this);
  RETURN_IF_ERROR(op.status());
  if (length == 0) return PosixError(EINVAL, "umap: length is 0");
  const int type = flags & MAP_TYPE;
  if (type != MAP_SHARED && type != MAP_SHARED_VALIDATE) {
    return PosixError(EINVAL, "umap: flags must include MAP_SHARED (MAP_PRIVATE is not offered)");
  }
  const int kKnownFlags = MAP_TYPE | MAP_FIXED | MAP_FIXED_NOREPLACE | MAP_NORESERVE | MAP_POPULATE;
  if ((flags & ~kKnownFlags) != 0) {
    return PosixError(EINVAL,
                      absl::StrCat("umap: unsupported flags 0x", absl::Hex(flags & ~kKnownFlags)));
  }
  if ((prot & ~(PROT_READ | PROT_WRITE)) != 0) {
    return PosixError(EINVAL, "umap: prot may contain only PROT_READ and PROT_WRITE");
  }
  if (offset < 0 || static_cast<uint64_t>(offset) % geo_.block_size != 0) {
    return PosixError(EINVAL,
                      absl::StrCat("umap: offset ", offset, " is not a multiple of the block size ",
                                   geo_.block_size));
  }
  const bool fixed = (flags & (MAP_FIXED | MAP_FIXED_NOREPLACE)) != 0;
  if (fixed && (reinterpret_cast<uintptr_t>(addr) % page_size_) != 0) {
    return PosixError(EINVAL, "umap: MAP_FIXED address is not page-aligned");
  }
  const bool prot_write = (prot & PROT_WRITE) != 0;
  const umap_coherence mode = Coherence::Resolve(coherence.mode, options_.coherence, prot_write);
  if (mode == UMAP_COHERENCE_PARTITIONED_WRITE && !prot_write) {
    return PosixError(EINVAL, "umap: partitioned-write needs PROT_WRITE");
  }
  // A read-only mapping never writes, whatever prot asked: its file is opened read-only.
  const bool writable = prot_write && mode != UMAP_COHERENCE_READ_ONLY;
  ASSIGN_OR_RETURN(std::unique_ptr<File> file,
                   env_->AdoptFd(fd, writable ? OpenMode::kReadWrite : OpenMode::kReadOnly));
  ASSIGN_OR_RETURN(uint64_t file_size, file->Size());
  const size_t region = RoundUp(length, geo_.block_size);
  // Locks first: a second writer fails before it reads or replays anything.
  const bool auto_mode =
      coherence.mode == UMAP_COHERENCE_AUTO && options_.coherence == UMAP_COHERENCE_AUTO;
  ASSIGN_OR_RETURN(
      std::unique_ptr<Coherence> coh,
      Coherence::Establish(mode, auto_mode, fd, file->name(), static_cast<uint64_t>(offset),
                           offset + region, geo_.block_size, coherence.write_ranges));
  std::unique_ptr<WriteBack> write_back;
  if (writable) {
    ASSIGN_OR_RETURN(write_back, MakeWriteBack(file.get()));
    write_back->set_io(io_.get());
    // Written back like it is read: with O_DIRECT, on a local file system. (On a FUSE or
    // network file system the client's own write-behind merges and pipelines the writes;
    // O_DIRECT would turn each into a synchronous round trip.)
    if (options_.io_direct && FsKindOfFd(file->fd()) == FsKind::kLocal) {
      write_back->UseDirectWrites(file.get());
    } else if (IsFuseFd(fd)) {
      // GlusterFS's client acknowledges writes early (write-behind) and can hold them for
      // good once they failed (a full brick): never more than its window unsynced. (The
      // caller's descriptor: `file` may be a wrapper without one.)
      write_back->BoundUnsyncedWrites(WriteBack::kFuseWriteBehindBytes);
    }
    if (coh->checks_writes()) {
      JournalHandle* journal;
      {
        absl::MutexLock l(&mu_);
        journal = journal_.get();  // set by MakeWriteBack unless journal_mode is off
      }
      auto guarded = std::make_unique<GuardedWriteBack>(std::move(write_back), coh.get(), journal);
      // A journal sink that writes in the background (defer_file_sync) checks the locks
      // before each of its rounds too.
      if (auto* j = dynamic_cast<JournalWriteBack*>(guarded->inner())) {
        j->set_apply_guard([g = guarded.get()] { return g->Check(); });
      }
      write_back = std::move(guarded);
    }
  }
  // A writable region must be readable for UFFDIO_COPY'd pages to make sense to the app.
  int region_prot = writable ? (PROT_READ | PROT_WRITE) : (prot & PROT_READ);
  ASSIGN_OR_RETURN(char* base, ReserveRegion(addr, region, region_prot, fixed));
  if (int err = uffd_->Register(base, region, writable)) {
    ReleaseRegion(base, region);
    return PosixError(err, "UFFDIO_REGISTER of the mapping");
  }
  if (absl::Status s = coh->Protect(base, region); !s.ok()) {
    (void)uffd_->Unregister(base, region);  // munmap unregisters it anyway
    ReleaseRegion(base, region);
    return s;
  }
  absl::MutexLock l(&mu_);
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else if (slot_high_.load() < kMaxMappings) {
    slot = slot_high_.load();
  } else {
    // munmap unregisters the range too; the result of the explicit call does not matter.
    (void)uffd_->Unregister(base, region);
    ReleaseRegion(base, region);
    return PosixError(ENOMEM, absl::StrCat("umap: more than ", kMaxMappings, " mappings"));
  }
  Mapping::Params p{base,      length,   region, static_cast<uint64_t>(offset),
                    file_size, writable, slot,   region_prot};
  auto* m = new Mapping(this, p, std::move(file));
  if (sizer_ != nullptr) {
    // Sampling is keyed by block and a per-mapping salt, so that mappings side by side do
    // not all sample the same offsets.
    auto tracker = std::make_unique<ReuseTracker>(m->blocks(), 0x9e3779b97f4a7c15ull * (slot + 1));
    if (!tracker->ok()) {
      UMAP_LOG(kWarn, "no reuse tracker for ", m->file()->name(),
               " (address space): its cache share follows its misses only");
    } else {
      m->set_tracker(std::move(tracker));
    }
  }
  if (write_back != nullptr) m->set_write_back(std::move(write_back));
  m->write_back()->set_io(io_.get());  // the default sink of a read-only mapping, unused
  m->set_protection_boundaries(coh->ProtectionBoundaries(region));
  m->set_coherence(std::move(coh));
  m->AttachIo(io_.get(), options_.io_direct);
  slots_[slot].store(m, std::memory_order_release);
  if (slot >= slot_high_.load()) slot_high_.store(slot + 1, std::memory_order_release);
  if (stats_ != nullptr) stats_->Kick();  // umap-stat lists the new mapping at once
  return static_cast<void*>(base);
}

absl::Status Runtime::CheckJournalOwner() {
  JournalHandle* handle;
  {
    absl::MutexLock l(&mu_);
    if (journal_ == nullptr) return absl::OkStatus();
    handle = journal_.get();
  }
  // Run reopens a poisoned journal first: a reopen keeps this epoch or fails fenced.
  return handle->Run([](journal::Journal& j) { return j.CheckOwner(); });
}

std::string Runtime::journal_dir() {
  absl::MutexLock l(&mu_);
  return journal_ ? journal_->dir() : std::string();
}

namespace {

// What the journal of a process in a limited memory cgroup writes back as it goes
// (journal::JournalOptions::sync_written_bytes).
constexpr uint64_t kCgroupSyncWrittenBytes = uint64_t{1} << 20;

// Whether a memory cgroup limit applies to this process (`given`: the options' probe).
bool InMemoryCgroup(const std::shared_ptr<MemoryProbe>& given) {
  std::shared_ptr<MemoryProbe> probe =
      given != nullptr ? given : std::shared_ptr<MemoryProbe>(SystemMemoryProbe::Create("", false));
  absl::StatusOr<MemorySample> sample = probe->Sample();
  return sample.ok() && sample->cgroup_limited;
}

// A journal that cannot be opened, worded for the person who set it up.
absl::Status JournalOpenError(const absl::Status& why, const std::string& dir, bool automatic) {
  const char* advice = "";
  switch (ErrnoFromStatus(why)) {
    case ENOTDIR:
      advice =
          "; it, or a directory on its path, is not a directory: point the journal at a "
          "directory";
      break;
    case ENOENT:
      advice =
          "; a directory on its path does not exist (the journal directory itself is "
          "created, its parents are not): create them, or choose another place";
      break;
    case EACCES:
    case EROFS:
      advice = "; this user may not create or write it: choose a writable place";
      break;
    case ENOSPC:
    case EDQUOT:
      advice = "; its disk is full: make room, or choose another place";
      break;
    default:
      break;
  }
  return Reword(
      why, absl::StrCat("journal directory ", dir,
                        automatic ? " (the automatic one)" : " (journal_dir, UMAP_JOURNAL_DIR)",
                        " cannot be used: ", why.message(), advice));
}

}  // namespace

absl::Status Runtime::RecoverPendingFor(JournalHandle* handle, File* file) {
  // A file mapped again while the journal still holds committed transactions for it (an
  // earlier run of this journal directory crashed before applying them) is brought up to
  // date first: otherwise this mapping would read blocks older than acknowledged umsyncs.
  // This runtime's own live mappings are left alone.
  ASSIGN_OR_RETURN(FileIdentity id, file->Identify());
  recovery::RecoverOptions o;
  o.env = env_;
  o.only_file = id;
  // The runtime's own write path: the same merged, deadline-bounded writes as its applies,
  // with this runtime's io_depth, io_max_bytes and io_timeout_ms.
  o.write_engine = &io_->writer();
  {
    absl::MutexLock l(&mu_);
    o.skip_mappings.assign(live_mapping_ids_.begin(), live_mapping_ids_.end());
  }
  auto report = handle->Run([&](journal::Journal& j) { return recovery::Recover(j, o); });
  if (!report.ok()) return report.status();
  const recovery::ExitCode code = recovery::ExitCodeOf(*report);
  if (code != recovery::ExitCode::kRefused && code != recovery::ExitCode::kIoError) {
    return absl::OkStatus();
  }
  // The first cause, so that the caller sees its errno: ENOSPC of a full journal or data
  // disk is worth waiting out (the records stay and the next map replays them); a refusal
  // (identity, size) or an I/O error is EIO.
  absl::Status cause = report->journal_status;
  for (const recovery::MappingReport& m : report->mappings) {
    if (!m.status.ok() && (m.state == recovery::MappingState::kIoError ||
                           m.state == recovery::MappingState::kRefused)) {
      cause = m.status;
      break;
    }
  }
  const int err =
      code == recovery::ExitCode::kIoError && ErrnoFromStatus(cause) == ENOSPC ? ENOSPC : EIO;
  return PosixError(err, absl::StrCat("umap: ", file->name(), " has committed journal records in ",
                                      handle->dir(), " that could not be replayed (",
                                      cause.ok() ? "see the log" : cause.message(),
                                      "); they are kept: map again, or run umap-recover "
                                      "--journal ",
                                      handle->dir()));
}

absl::StatusOr<std::unique_ptr<WriteBack>> Runtime::MakeWriteBack(File* file) {
  if (options_.journal_mode == UMAP_JOURNAL_OFF) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      UMAP_LOG(kWarn,
               "journal_mode=off: write-back goes straight to the file; a crash can "
               "leave torn or partial updates (benchmarks only)");
    }
    return std::unique_ptr<WriteBack>(new DirectWriteBack(file, geo_.block_size));
  }
  const journal::Policy policy =
      options_.policy == UMAP_POLICY_RELAXED ? journal::Policy::kRelaxed : journal::Policy::kAtomic;
  const journal::Contents contents = options_.journal_mode == UMAP_JOURNAL_INTENT
                                         ? journal::Contents::kIntent
                                         : journal::Contents::kData;
  if (policy == journal::Policy::kAtomic && contents == journal::Contents::kIntent) {
    return PosixError(EINVAL,
                      "journal_mode=intent needs policy=relaxed (atomic umsync needs "
                      "the block payloads in the journal)");
  }
  JournalHandle* handle;
  absl::Cleanup unuse = [this] {
    absl::MutexLock l(&mu_);
    --journal_users_;
  };
  {
    absl::MutexLock l(&mu_);
    ++journal_users_;
    if (journal_ == nullptr) {
      std::string dir = options_.journal_dir;
      bool automatic = dir.empty();
      if (automatic) {
        // One journal per runtime: RocksDB's lock keeps every other process out of it.
        // A private parent per user: /var/tmp/umap-journal-UID, or a fresh one if someone
        // else took that name (base/private_dir.h).
        ASSIGN_OR_RETURN(std::string root, AutomaticJournalRoot());
        static std::atomic<int> seq{0};
        dir = absl::StrCat(root, "/", ::getpid(), "-", seq.fetch_add(1));
      }
      journal::JournalOptions jo;
      jo.dir = dir;
      jo.env = env_;
      jo.fs = options_.journal_fs;
      jo.staged_quota_bytes = options_.journal_staged_quota;
      jo.commit_batch_bytes = options_.umsync_chunk_bytes;
      jo.sync_written_bytes = InMemoryCgroup(options_.memory_probe) ? kCgroupSyncWrittenBytes : 0;
      absl::StatusOr<std::unique_ptr<JournalHandle>> opened = JournalHandle::Open(jo);
      if (!opened.ok()) {
        // The caller sees an errno (umap_ex logs this message): name the directory, where it
        // came from, and what to do.
        return JournalOpenError(opened.status(), dir, automatic);
      }
      journal_ = *std::move(opened);
      journal_auto_ = automatic;
    }
    handle = journal_.get();
  }
  RETURN_IF_ERROR(RecoverPendingFor(handle, file));
  ASSIGN_OR_RETURN(std::unique_ptr<JournalWriteBack> wb,
                   JournalWriteBack::Create(handle, file, static_cast<uint32_t>(geo_.block_size),
                                            policy, contents, options_.defer_file_sync));
  {
    absl::MutexLock l(&mu_);
    live_mapping_ids_.insert(wb->mapping_id());
  }
  return std::unique_ptr<WriteBack>(std::move(wb));
}

absl::StatusOr<Mapping*> Runtime::Lookup(void* addr, size_t length, bool exact) {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  for (uint32_t i = 0; i < slot_high_.load(); ++i) {
    Mapping* m = slots_[i].load();
    if (m == nullptr || !m->Contains(a)) continue;
    const uint64_t base = reinterpret_cast<uint64_t>(m->base());
    if (exact && (a != base || RoundUp(length, page_size_) != RoundUp(m->length(), page_size_))) {
      return PosixError(EINVAL, "uunmap: addr/length must name one whole mapping");
    }
    if (a - base + length > m->region_length()) {
      return PosixError(ENOMEM, "range runs past the end of the mapping");
    }
    return m;
  }
  return PosixError(ENOMEM, "address is not in a umap mapping");
}

bool Runtime::Owns(const void* addr, size_t) {
  return FindMapping(reinterpret_cast<uint64_t>(addr)) != nullptr;
}

absl::Status Runtime::Sync(void* addr, size_t length) {
  if (reinterpret_cast<uintptr_t>(addr) % page_size_ != 0) {
    return PosixError(EINVAL, "umsync: addr is not page-aligned");
  }
  Operation op(this);
  RETURN_IF_ERROR(op.status());
  absl::ReaderMutexLock l(&mu_);
  ASSIGN_OR_RETURN(Mapping * m, Lookup(addr, length, /*exact=*/false));
  const uint64_t a = reinterpret_cast<uint64_t>(addr) - reinterpret_cast<uint64_t>(m->base());
  const size_t bs = geo_.block_size;
  return m->Sync(a / bs, (a + length + bs - 1) / bs);
}

absl::Status Runtime::Unmap(void* addr, size_t length) {
  // A fenced runtime's mappings may still be unmapped: it wrote everything back when it
  // quiesced, and writes nothing now.
  Operation op(this, /*fenced_ok=*/true);
  RETURN_IF_ERROR(op.status());
  Mapping* m;
  {
    absl::ReaderMutexLock l(&mu_);
    ASSIGN_OR_RETURN(m, Lookup(addr, length, /*exact=*/true));
  }
  const bool fenced = state() == RuntimeState::kFenced;
  // Write back first; on failure the mapping stays, so nothing is lost and the caller can
  // retry. (uunmap racing another uunmap of the same mapping is a caller error, as with
  // munmap; the per-mapping sync lock keeps even that from corrupting state.)
  if (!fenced) RETURN_IF_ERROR(m->Sync(0, m->blocks()));
  // Deferred file syncs (RuntimeOptions::defer_file_sync) and relaxed evictions applied
  // without one: fdatasync'ed and marked now, so that the journal keeps nothing of it.
  if (!fenced) RETURN_IF_ERROR(m->write_back()->Drain());
  if (absl::Status s = fenced ? absl::OkStatus() : m->CloseWriteBack(); !s.ok()) {
    // Everything is durable in the file; only the journal's mapping record lingers.
    UMAP_LOG(kWarn, "uunmap of ", m->file()->name(),
             ": journal record not removed: ", s.ToString());
  }
  {
    absl::MutexLock l(&mu_);
    if (slots_[m->slot()].load() != m) return PosixError(EINVAL, "uunmap: already unmapped");
    slots_[m->slot()].store(nullptr, std::memory_order_release);
  }
  Destroy(m);
  return absl::OkStatus();
}

void Runtime::Destroy(Mapping* m, bool keep_range) {
  slots_[m->slot()].store(nullptr, std::memory_order_release);
  // After this no handler holds `m`: the ones inside a section when the slot was cleared
  // have left it, and later ones cannot find it.
  WaitForHandlers();
  // Fills still queued are dropped and those in flight land while the range is still
  // registered; only then is it unregistered.
  m->DetachIo();
  // A quiesced or fenced runtime has no userfaultfd; its ranges were unregistered. A range
  // handed to the kernel is no longer registered (its mapping replaced Umap's).
  if (int err =
          uffd_ == nullptr || keep_range ? 0 : uffd_->Unregister(m->base(), m->region_length())) {
    // munmap below unregisters the range anyway; nothing is left registered.
    UMAP_LOG(kWarn, "UFFDIO_UNREGISTER of ", m->file()->name(), " failed: errno ", err,
             "; the range is unmapped regardless");
  }
  m->ReleaseAll();
  // The sink before the coherence: its background writer (defer_file_sync) checks the
  // locks until it stops.
  m->set_write_back(nullptr);
  // Before the range is released: its refusals must not explain a later mapping's faults.
  m->set_coherence(nullptr);
  if (!keep_range) ReleaseRegion(m->base(), m->region_length());
  const uint32_t slot = m->slot();
  delete m;
  if (stats_ != nullptr) stats_->Kick();
  absl::MutexLock l(&mu_);
  free_slots_.push_back(slot);
}

umap_stats Runtime::Stats() const {
  umap_stats s = {};
  s.faults_missing = counters_.faults_missing.load();
  s.faults_wp = counters_.faults_wp.load();
  s.blocks_read = counters_.blocks_read.load();
  s.blocks_written = counters_.blocks_written.load();
  s.evictions = counters_.evictions.load();
  s.dirty_evictions = counters_.dirty_evictions.load();
  s.io_errors = counters_.io_errors.load();
  s.sigbus_raised = counters_.sigbus.load();
  const uint64_t bs = geo_.block_size;
  s.cache_bytes_used =
      (static_cast<uint64_t>(pool_.resident()) + shadows_.in_use()) * geo_.block_size;
  s.lazy_sizing = sizer_ != nullptr ? 1 : 0;
  s.cache_capacity_bytes = uint64_t{pool_.limit()} * bs;
  s.cache_ceiling_bytes = s.cache_capacity_bytes;
  if (sizer_ != nullptr) {
    const CacheSizer::Figures f = sizer_->figures();
    s.cache_virtual_bytes = uint64_t{f.virtual_blocks} * bs;
    s.cache_ceiling_bytes = uint64_t{f.ceiling} * bs;
    s.memory_limit_bytes = sizer_->budget().limit();
    s.memory_used_bytes = sizer_->budget().used();
    s.cache_grows = f.grows;
    s.cache_shrunk_blocks = f.shrunk_blocks;
    s.memory_pressure_events = f.pressure_events;
  }
  s.cache_bytes_peak = static_cast<uint64_t>(pool_.peak_resident()) * geo_.block_size +
                       static_cast<uint64_t>(shadows_.count()) * geo_.block_size;
  s.cache_bytes_limit =
      (static_cast<uint64_t>(geo_.cache_blocks) + geo_.shadow_blocks) * geo_.block_size;
  {
    absl::MutexLock l(&io_swap_mu_);
    const umap_stats& c = io_carried_;
    s.io_reads = c.io_reads;
    s.io_bytes = c.io_bytes;
    s.io_queue_wait_us = c.io_queue_wait_us;
    s.io_timeouts = c.io_timeouts;
    s.io_retries = c.io_retries;
    s.io_read_failures = c.io_read_failures;
    s.io_writes = c.io_writes;
    s.io_write_bytes = c.io_write_bytes;
    s.io_write_timeouts = c.io_write_timeouts;
    s.io_inline_reads = c.io_inline_reads;
    for (int k = 0; k < UMAP_IO_SIZE_BUCKETS; ++k) s.io_size_hist[k] = c.io_size_hist[k];
    s.io_engine = c.io_engine;
    if (io_ != nullptr) AddIoFigures(*io_, &s);
  }
  s.fault_mode = signal_mode_ ? UMAP_FAULT_SIGNAL : UMAP_FAULT_HANDLER;
  s.uffd_access = uffd_access_.load(std::memory_order_relaxed);
  uint64_t prefetched = 0;
  const uint32_t high = slot_high_.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < high; ++i) {
    if (Mapping* m = slots_[i].load(std::memory_order_acquire)) {
      prefetched += m->prefetched();
      s.cache_remisses += m->remisses();
      s.sampled_hits += m->sampled_hits();
    }
  }
  s.prefetched_blocks = prefetched;
  s.umsyncs_shared = counters_.shared_syncs.load();
  return s;
}

void Runtime::WhileMappingsPinned(absl::FunctionRef<void()> fn) {
  SrcuReadLock section(mapping_srcu_);
  fn();
}

void Runtime::ForEachMapping(absl::FunctionRef<void(Mapping&)> fn) {
  const uint32_t high = slot_high_.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < high; ++i) {
    if (Mapping* m = slots_[i].load(std::memory_order_acquire)) fn(*m);
  }
}

bool Runtime::TryJournalStats(journal::Journal::Stats* out, bool* open, std::string* dir) {
  // Never waits: mu_ is held by a umsync for as long as it runs, and exclusively while a
  // journal opens; the handle's lock while the journal reopens.
  if (!mu_.ReaderTryLock()) return false;
  *open = journal_ != nullptr;
  const bool ok = !*open || journal_->TryStats(out);
  if (*open) *dir = journal_->dir();
  mu_.ReaderUnlock();
  return ok;
}

bool Runtime::MappingStats(const void* addr, umap_mapping_stats* out) {
  absl::ReaderMutexLock l(&mu_);
  auto m = Lookup(const_cast<void*>(addr), 1, /*exact=*/false);
  if (!m.ok()) return false;
  out->bytes_read = (*m)->bytes_read();
  out->reads = (*m)->fills();
  out->prefetched_blocks = (*m)->prefetched();
  out->direct_io = (*m)->direct_io() ? 1 : 0;
  const uint64_t bs = geo_.block_size;
  out->capacity_bytes = (*m)->resident_blocks() * bs;
  out->virtual_bytes = uint64_t{(*m)->virtual_blocks()} * bs;
  out->max_bytes = uint64_t{std::min((*m)->quota(), pool_.limit())} * bs;
  out->remisses = (*m)->remisses();
  out->working_set_bytes = uint64_t{(*m)->working_set_blocks()} * bs;
  return true;
}

}  // namespace umap::runtime
