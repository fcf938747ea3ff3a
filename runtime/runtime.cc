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
#include "runtime/fault/fault_signal.h"
#include "runtime/fault/mapping.h"
#include "runtime/sizing/system_memory_probe.h"
#include "runtime/umap_c_internal.h"
#include "runtime/writeback/guarded_write_back.h"
#include "runtime/writeback/journal_write_back.h"

namespace umap::runtime {
namespace {

constexpr int kMsgBatch = 16;
constexpr auto kPoolWaitBudget = std::chrono::seconds(kFillWaitSeconds);
// How long a fill waits for a cache block before it gives up with SIGBUS. Long enough for
// write-backs to drain on a slow DFS, short enough that a stall is reported, not hidden.


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
    : MappingHost(pool_, shadows_, refs_, counters_, options.env ? options.env : Env::Default(),
                  options_, geo_, static_cast<size_t>(::sysconf(_SC_PAGESIZE)), signal_mode),
      options_(options),
      geo_(geo),
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
  if (signal_mode()) {
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
    ASSIGN_OR_RETURN(uffd_, Uffd::Open(signal_mode()));
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
  auto manager = io::IoManager::Create(io, env());
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
  if (!signal_mode()) {
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
    auto p = StatsPublisher::Start(&view_, options_.stats_period_ms);
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
  if (!signal_mode() && io_ != nullptr && io_->channel_count() > 0) {
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
  if (signal_mode()) UnmapBuffer(staging_arena_, size_t{kStagingBuffers} * geo_.block_size);
  if (signal_mode()) UnmapBuffer(run_arena_, size_t{kRunBuffers} * kRunBytes);
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
  if (absl::Status s = env()->RemoveTree(remove); !s.ok()) {
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
    if (int err = uffd_->Wake(reinterpret_cast<void*>(addr & ~(page_size() - 1)), page_size())) {
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
  if (!signal_mode()) return false;
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
  s.fault_mode = signal_mode() ? UMAP_FAULT_SIGNAL : UMAP_FAULT_HANDLER;
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
