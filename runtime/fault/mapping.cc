#include "runtime/fault/mapping.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/round.h"
#include "base/status_macros.h"
#include "runtime/fault/mapping_host.h"
#include "runtime/fault/mapping_internal.h"
#include "runtime/writeback/capture_spans.h"

namespace umap::runtime {

using Table = CacheEntryTable;
using mapping_internal::AddrHex;
using mapping_internal::IsFilled;

Mapping::Mapping(MappingHost* rt, const Params& p, std::unique_ptr<File> file)
    : rt_(rt),
      base_(p.base),
      length_(p.length),
      region_length_(p.region_length),
      block_size_(rt->geometry().block_size),
      file_offset_(p.file_offset),
      file_size_(p.file_size),
      writable_(p.writable),
      region_prot_(p.region_prot),
      signal_mode_(rt->signal_mode()),
      slot_(p.slot),
      file_(std::move(file)),
      table_(p.region_length / rt->geometry().block_size),
      write_back_(std::make_unique<DirectWriteBack>(file_.get(), block_size_)),
      stash_free_(kStashes) {
  // Read-ahead trigger buffers (allocated once: the fault path allocates nothing). Without
  // them read-ahead simply has no triggers.
  stash_arena_ = MapBuffer(size_t{kStashes} * block_size_);
  if (stash_arena_ != nullptr) {
    for (uint32_t i = 0; i < kStashes; ++i) stash_free_.Push(i);
  }
}

Mapping::~Mapping() {
  // The sink first: a background writer of its own (defer_file_sync) uses the file and the
  // coherence, which are destroyed after it.
  write_back_.reset();
  UnmapBuffer(stash_arena_, size_t{kStashes} * block_size_);
}

char* Mapping::StashBuffer(uint32_t i) const { return stash_arena_ + size_t{i} * block_size_; }

size_t Mapping::ValidBytes(uint64_t block) const {
  const uint64_t start = file_offset_ + block * block_size_;
  const uint64_t size = file_size();
  if (start >= size) return 0;
  return static_cast<size_t>(std::min<uint64_t>(block_size_, size - start));
}


void Mapping::RaiseSigbus(uint64_t block, uint64_t entry, pid_t tid, const absl::Status& why) {
  Counters& c = rt_->counters();
  c.sigbus.fetch_add(1, std::memory_order_relaxed);
  char* addr = BlockAddr(block);
  if (!why.ok()) {
    // Slow path: say what failed and where, once per failure.
    UMAP_LOG(kError, "SIGBUS to thread ", tid, " at ", AddrHex(addr), " (", file_->name(),
             " offset ", file_offset_ + block * block_size_, "): ", why.ToString());
  }
  int err = rt_->uffd().Poison(addr, block_size_);
  if (err != 0) {
    // No UFFDIO_POISON (kernel < 6.6): deliver the signal to the faulting thread directly.
    UMAP_LOG(kWarn, "UFFDIO_POISON unavailable (errno ", err, "); signalling thread ", tid);
    ::syscall(SYS_tgkill, ::getpid(), tid, SIGBUS);
  }
  table_.Unlock(block, entry | Table::kPoisoned);
}

Mapping::MissLock Mapping::LockMissing(uint64_t block, size_t valid, uint32_t* cache_block,
                                       Table::Entry* e) {
  *cache_block = BlockPool::kNone;
  // The cache block is acquired before the entry is locked: acquiring may wait for
  // write-back threads, and those take entry locks; holding one here could deadlock.
  for (;;) {
    if (valid > 0 && *cache_block == BlockPool::kNone) {
      Table::Entry pk = table_.Load(block);
      if (pk.filling()) return MissLock::kFilling;
      if (pk.stashed() || pk.parked()) {
        // Read ahead into a stash buffer, or parked: it owns its cache block already.
        *e = table_.Lock(block);
        if (e->stashed()) return MissLock::kStashed;
        if (e->parked()) return MissLock::kParked;
        table_.Unlock(block, e->v);
        continue;
      }
      if (!IsFilled(pk)) {
        *cache_block = rt_->AcquireBlock();
        if (*cache_block == BlockPool::kNone) break;  // reported by the caller, under the lock
      }
    }
    *e = table_.Lock(block);
    if (e->stashed() || e->parked()) {
      if (*cache_block != BlockPool::kNone) rt_->pool().Release(*cache_block);
      *cache_block = BlockPool::kNone;
      return e->stashed() ? MissLock::kStashed : MissLock::kParked;
    }
    if (IsFilled(*e) || e->filling()) {
      // Filled (or poisoned, or queued) by another thread after this fault was raised.
      const bool filling = e->filling();
      table_.Unlock(block, e->v);
      if (*cache_block != BlockPool::kNone) rt_->pool().Release(*cache_block);
      *cache_block = BlockPool::kNone;
      return filling ? MissLock::kFilling : MissLock::kResolved;
    }
    if (valid == 0 || *cache_block != BlockPool::kNone) return MissLock::kLocked;
    // Evicted between the peek and the lock: get a cache block without holding the lock.
    table_.Unlock(block, e->v);
  }
  *e = table_.Lock(block);
  if (e->stashed()) return MissLock::kStashed;
  if (e->parked()) return MissLock::kParked;
  if (IsFilled(*e) || e->filling()) {
    const bool filling = e->filling();
    table_.Unlock(block, e->v);
    return filling ? MissLock::kFilling : MissLock::kResolved;
  }
  return MissLock::kLocked;  // with no cache block
}

bool Mapping::ClaimQueuedFill(uint64_t block) {
  // A queued read-ahead fill marked as a trigger would not be installed: a thread now waits
  // for this block, so it must be (a thread blocked in the kernel, handler mode, is only
  // woken by the install). Clear the mark while the fill is still queued or in flight; if
  // the fill completed meanwhile (stashed, or installed), the caller handles it afresh.
  for (;;) {
    Table::Entry e = table_.Load(block);
    if (!e.filling()) return false;
    if (!(e.v & Table::kStash)) return true;
    if (table_.TryClear(block, Table::kFilling | Table::kStash, Table::kStash)) return true;
    std::this_thread::yield();  // locked by the completing channel for a moment
  }
}

void Mapping::ServeStash(uint64_t block, Table::Entry e, bool write, pid_t tid) {
  // Entry locked, stashed: install from the stash buffer; the cache block is its own.
  const uint32_t idx = e.stash_index();
  const uint32_t cache_block = e.cache_block();
  const size_t valid = ValidBytes(block);
  int err = InstallBlock(block, StashBuffer(idx), valid, write && writable_);
  const uint64_t v = Table::WithoutStash(e.v) & ~Table::kCbMask;
  stash_free_.Push(idx);
  if (err != 0) {
    rt_->pool().Release(cache_block);
    RaiseSigbus(block, v, tid, PosixError(err, "UFFDIO_COPY"));
    return;
  }
  PublishFilled(block, v, cache_block, write && writable_, tid);
}

void Mapping::DropStash(uint64_t block) {
  if (block >= table_.size()) return;
  Table::Entry e;
  if (!table_.TryLock(block, &e)) return;  // busy: left for its fault or the teardown
  if (!e.stashed()) {
    table_.Unlock(block, e.v);
    return;
  }
  rt_->pool().Release(e.cache_block());
  stash_free_.Push(e.stash_index());
  table_.Unlock(block, Table::WithoutStash(e.v) & ~Table::kCbMask);
}

void Mapping::WaitWhileFilling(uint64_t block) {
  for (;;) {
    Table::Entry e = table_.Load(block);
    if (!e.filling()) return;
    table_.WaitChange(block, e.v);
  }
}

bool Mapping::ResolveFault(uint64_t addr, bool write, pid_t tid) {
  const uint64_t block = BlockOf(addr);
  // Poisoned pages (past end of file, or a read that failed) raise SIGBUS for the
  // application; on kernels without memory-failure support they arrive looking like any
  // other userfaultfd SIGBUS, so the block's state decides.
  Table::Entry e = table_.Load(block);
  if (e.poisoned()) return false;
  // The pages of a resident last block that lie past end of file were poisoned with it.
  const uint64_t in_block = addr - reinterpret_cast<uint64_t>(BlockAddr(block));
  if (e.present() && in_block >= RoundUp(ValidBytes(block), rt_->page_size())) return false;
  // A resident block faults only when written while write-protected: its first write since
  // the last capture (a read, or a write to a dirty block, does not fault). Anything else is
  // a miss, or a fault that another thread resolved meanwhile (the retry then succeeds).
  if (e.present()) return writable_ ? HandleWriteProtect(block, tid) : true;
  HandleMissing(block, write, tid, /*staging=*/nullptr);
  return true;
}

void Mapping::HandleMissing(uint64_t block, bool write, pid_t tid, char* staging) {
  Counters& c = rt_->counters();
  faults_.fetch_add(1, std::memory_order_relaxed);
  char* addr = BlockAddr(block);
  const size_t valid = ValidBytes(block);
  NoteMiss(block, table_.Load(block));
  uint32_t cache_block;
  Table::Entry e;
  switch (LockMissing(block, valid, &cache_block, &e)) {
    case MissLock::kFilling:
      // A fill of this block is queued or in flight. A write fault is noted so the block is
      // installed writable (best effort: if the fill is already installing, the writer takes
      // one write-protect fault instead). Handler mode: the fill wakes every thread blocked
      // on the block. Signal mode: this thread waits for the fill itself.
      if (!ClaimQueuedFill(block)) {
        HandleMissing(block, write, tid, staging);  // it was stashed meanwhile
        return;
      }
      // Seen: an application waits for it (read-ahead alone does not make a block seen).
      table_.TryOr(block, Table::kFilling,
                   Table::kSeen | (write && writable_ ? Table::kFillWrite : 0));
      c.stale_faults.fetch_add(1, std::memory_order_relaxed);
      MaybePrefetch(block);
      if (signal_mode_) WaitWhileFilling(block);
      return;
    case MissLock::kStashed:
      ServeStash(block, e, write, tid);
      MaybePrefetch(block);  // the trigger: the next window starts while the reader goes on
      return;
    case MissLock::kParked:
      ServeParked(block, e, write, tid);
      return;
    case MissLock::kResolved:
      // Waking again is harmless and covers a race with the queue (handler mode only: in
      // signal mode the faulting thread simply retries its access).
      if (!signal_mode_) WakeOrLog(addr);
      c.stale_faults.fetch_add(1, std::memory_order_relaxed);
      return;
    case MissLock::kLocked:
      break;
  }
  if (valid == 0) {  // wholly past end of file: SIGBUS, as mmap gives
    RaiseSigbus(block, e.v, tid, absl::OkStatus());
    return;
  }
  if (cache_block == BlockPool::kNone) {
    RaiseNoCacheBlock(block, e, tid);
    return;
  }
  if (!e.shadow() && !e.staged()) {
    FillFromFile(block, e, cache_block, write, tid);
    return;
  }
  ServeEvicted(block, e, cache_block, write, tid, staging);
}

void Mapping::RaiseNoCacheBlock(uint64_t block, const CacheEntryTable::Entry& e, pid_t tid) {
  // Slow path: every cache block is dirty and cannot leave the cache. Say why and what to do.
  int wb = rt_->last_writeback_errno();
  if (wb == ESTALE || wb == ENOLCK) {
    RaiseSigbus(
        block, e.v, tid,
        PosixError(
            wb,
            absl::StrCat("no cache block can be freed: dirty blocks may not be written back any "
                         "more (",
                         std::strerror(wb),
                         ": the journal was taken over by another "
                         "process or node, or the mapping lost its locks; docs/consistency.md); "
                         "end the process")));
    return;
  }
  RaiseSigbus(
      block, e.v, tid,
      PosixError(
          ENOMEM,
          absl::StrCat("no cache block could be freed in time: dirty blocks cannot be written "
                       "back (last write-back error: ",
                       wb ? std::strerror(wb) : "none",
                       "). umsync more often, raise cache_bytes or the journal's staged quota, "
                       "free space on the journal disk, or use policy=relaxed")));
}

void Mapping::FillFromFile(uint64_t block, const CacheEntryTable::Entry& e,
                           uint32_t cache_block, bool write, pid_t tid) {
  // The common miss: the block comes from the file. Signal mode reads it here, in the
  // faulting thread, as the kernel's own fault path would; files that io_uring cannot read
  // (and handler mode) go through the I/O manager's queues, merged with queued neighbours.
  if (!signal_mode_) {
    QueueFill(block, e.v, cache_block, write, tid);
    MaybePrefetch(block);
    return;
  }
  if (read_file()->SupportsRing()) {
    const bool streams = rt_->prefetch_blocks() > 0;
    Stream* stream = streams ? FindStream(block) : nullptr;
    if (stream == nullptr) {
      // A random miss: nothing to merge it with. (It may start a stream.)
      const bool probe =
          streams && random_misses_.fetch_add(1, std::memory_order_relaxed) % kProbeEvery == 0;
      if (streams && !probe && run_score_.load(std::memory_order_relaxed) >= kReadAroundScore &&
          FillInlineRun(block, e.v, cache_block, write, tid, StartStream(block))) {
        return;  // read around it
      }
      FillInline(block, e.v, cache_block, write, tid);
      if (streams) {
        Stream* started = StartStream(block);
        if (probe) started->probe.store(true, std::memory_order_relaxed);
      }
      return;
    }
    // The stream's second miss: read its first window with it, here.
    if (stream->length.load(std::memory_order_relaxed) == 0 &&
        FillInlineRun(block, e.v, cache_block, write, tid, stream)) {
      return;
    }
  }
  // A miss that continues a sequential stream is queued with its read-ahead (read-ahead is
  // queued first, then this block, then the channels are told: one merged read), and so is
  // any miss on a file without a descriptor (its reads have deadlines in the channels).
  MaybePrefetch(block);
  QueueFill(block, e.v, cache_block, write, tid);
  WaitWhileFilling(block);
}

absl::Status Mapping::ReadBlock(uint64_t block, char* buf, size_t valid, uint32_t count) {
  // Shown by umap-stat while it runs (a stalled file system stalls this very call).
  struct Tracked {
    io::IoManager* io;
    int token;
    ~Tracked() { io->EndInlineRead(token); }
  } tracked{io_, io_->BeginInlineRead(ioq_, ByteOffset(block), valid)};
  // O_DIRECT reads whole blocks (aligned length); at end of file the read returns short.
  File* f = read_file();
  const bool direct = f != file_.get();
  auto n = f->ReadAt(ByteOffset(block),
                     absl::MakeSpan(buf, direct ? size_t{count} * block_size_ : valid));
  if (direct && !n.ok() && ErrnoFromStatus(n.status()) == EINVAL && FallBackToBuffered()) {
    n = file_->ReadAt(ByteOffset(block), absl::MakeSpan(buf, valid));
  }
  // Interrupted (a backend that does not retry EINTR itself): retried, as the I/O channels
  // do, a bounded number of times.
  auto interrupted = [&] {
    const int err = n.ok() ? 0 : ErrnoFromStatus(n.status());
    return err == EINTR || err == EAGAIN;
  };
  for (int i = 0; i < 100 && interrupted(); ++i) {
    n = file_->ReadAt(ByteOffset(block), absl::MakeSpan(buf, valid));
  }
  if (!n.ok()) return n.status();
  if (*n < valid) std::memset(buf + *n, 0, valid - *n);  // file shrank since map time
  return absl::OkStatus();
}

int Mapping::InstallBlock(uint64_t block, char* buf, size_t valid, bool writable_now) {
  const size_t pages = RoundUp(valid, rt_->page_size());
  if (pages > valid) std::memset(buf + valid, 0, pages - valid);
  char* addr = BlockAddr(block);
  // Signal mode: no thread is blocked in the kernel on this range, so nothing to wake.
  int err = rt_->uffd().Copy(addr, buf, pages, /*write_protect=*/writable_ && !writable_now,
                             /*dont_wake=*/signal_mode_);
  if (err != 0) return err;
  // Pages of the last block that lie wholly past end of file raise SIGBUS, as with mmap.
  if (pages < block_size_) {
    err = rt_->uffd().Poison(addr + pages, block_size_ - pages);
    if (err != 0 && err != ENOSYS) return err;
  }
  return 0;
}

void Mapping::NoteRead(uint32_t blocks, size_t bytes) {
  io_->NoteInlineRead(blocks, bytes);
  bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
  fills_.fetch_add(1, std::memory_order_relaxed);
  rt_->counters().blocks_read.fetch_add(blocks, std::memory_order_relaxed);
}

void Mapping::PublishFilled(uint64_t block, uint64_t entry, uint32_t cache_block, bool dirty,
                            pid_t tid) {
  rt_->pool().Publish(cache_block, Owner(block));
  // Seen: every caller serves an application's fault.
  const uint64_t v = (entry & (Table::kShadow | Table::kShadowMask | Table::kStaged)) |
                     Table::kPresent | Table::kSeen | cache_block | (dirty ? Table::kDirty : 0);
  // Counted before the entry is unlocked: a thread woken by the unlock (and whatever it
  // does next, a umap-stat reader included) must not see the block missing from the gauges.
  resident_.fetch_add(1, std::memory_order_relaxed);
  if (dirty) dirty_.fetch_add(1, std::memory_order_relaxed);
  table_.Unlock(block, v);
  rt_->refs().Touch(tid, cache_block);
  rt_->counters().faults_missing.fetch_add(1, std::memory_order_relaxed);
}

void Mapping::FillInline(uint64_t block, uint64_t entry, uint32_t cache_block, bool write,
                         pid_t tid) {
  Counters& c = rt_->counters();
  misses_.fetch_add(1, std::memory_order_relaxed);  // now: the read may stall
  const size_t valid = ValidBytes(block);
  char* buf = rt_->AcquireStaging();
  absl::Status st = ReadBlock(block, buf, valid);
  if (st.ok()) NoteRead(1, valid);  // before the install wakes the faulting thread
  int err = st.ok() ? InstallBlock(block, buf, valid, write && writable_) : 0;
  rt_->ReleaseStaging(buf);
  if (!st.ok() || err != 0) {
    rt_->pool().Release(cache_block);
    if (!st.ok()) c.io_errors.fetch_add(1, std::memory_order_relaxed);
    RaiseSigbus(block, entry, tid, st.ok() ? PosixError(err, "UFFDIO_COPY") : st);
    return;
  }
  PublishFilled(block, entry, cache_block, write && writable_, tid);
}

uint32_t Mapping::LockRunAfter(uint64_t block, uint32_t max, uint64_t* entries,
                               uint32_t* cache_blocks) {
  // As read-ahead does (MaybePrefetch): only blocks that are plainly missing, a cache block
  // each without waiting (the caller holds `block`'s entry lock), entries taken with
  // TryLock; the run ends at the first block that does not qualify. (A parked block holds
  // its cache block and its data already.)
  auto plain_missing = [](Table::Entry x) {
    return !(x.present() || x.poisoned() || x.filling() || x.shadow() || x.staged() ||
             x.stashed() || x.parked());
  };
  uint32_t n = 1;
  for (uint64_t p = block + 1; n < max && p < table_.size(); ++p, ++n) {
    const Table::Entry pe = table_.Load(p);
    if (pe.locked() || !plain_missing(pe) || ValidBytes(p) == 0) break;
    const uint32_t cache_block = rt_->TryAcquireBlock(/*bulk=*/true);
    if (cache_block == BlockPool::kNone) break;
    Table::Entry e;
    if (!table_.TryLock(p, &e)) {
      rt_->pool().Release(cache_block);
      break;
    }
    if (!plain_missing(e)) {
      table_.Unlock(p, e.v);
      rt_->pool().Release(cache_block);
      break;
    }
    entries[n] = e.v;
    cache_blocks[n] = cache_block;
  }
  return n;
}

bool Mapping::FillInlineRun(uint64_t block, uint64_t entry, uint32_t cache_block, bool write,
                            pid_t tid, Stream* s) {
  char* buf = rt_->TryAcquireRunBuffer();
  if (buf == nullptr) return false;
  Counters& c = rt_->counters();
  misses_.fetch_add(1, std::memory_order_relaxed);  // now: the read may stall
  // The stream's bookkeeping, as MaybePrefetch would do it for this miss: its first window.
  const uint32_t len = s->length.fetch_add(1, std::memory_order_relaxed) + 1;
  if (len == 1) NoteStreamStarted(s);
  s->next.store(block + 1, std::memory_order_relaxed);
  const uint64_t window =
      std::min<uint64_t>(rt_->prefetch_blocks(), 8ull << std::min<uint32_t>(len - 1, 16));
  constexpr uint32_t kMaxRun = 64;
  uint64_t entries[kMaxRun];
  uint32_t cache_blocks[kMaxRun];
  entries[0] = entry | (write && writable_ ? Table::kFillWrite : 0);
  cache_blocks[0] = cache_block;
  const uint32_t max =
      static_cast<uint32_t>(std::min<uint64_t>({window + 1, rt_->run_blocks(), uint64_t{kMaxRun}}));
  const uint32_t n = LockRunAfter(block, max, entries, cache_blocks);
  const uint64_t ahead = s->ahead.load(std::memory_order_relaxed);
  if (ahead < block + n) s->ahead.store(block + n, std::memory_order_relaxed);
  // One read and one UFFDIO_COPY per stretch of equal protection for the whole run.
  const size_t valid = ValidBytes(block, n);
  absl::Status st = ReadBlock(block, buf, valid, n);
  int err = 0;
  if (st.ok()) {
    NoteRead(n, valid);  // before the install wakes the faulting thread
    const size_t tail = RoundUp(valid, rt_->page_size());
    if (tail > valid) std::memset(buf + valid, 0, tail - valid);
    err = Install(block, n, buf, entries);
  }
  rt_->ReleaseRunBuffer(buf);
  if (!st.ok() || err != 0) {
    // Read-ahead that failed is forgotten; the faulting block gets its SIGBUS.
    for (uint32_t i = 1; i < n; ++i) {
      rt_->pool().Release(cache_blocks[i]);
      table_.Unlock(block + i, entries[i]);
    }
    rt_->pool().Release(cache_block);
    if (!st.ok()) c.io_errors.fetch_add(1, std::memory_order_relaxed);
    RaiseSigbus(block, entry, tid, st.ok() ? PosixError(err, "UFFDIO_COPY") : st);
    return true;
  }
  resident_.fetch_add(n - 1, std::memory_order_relaxed);  // before the unlocks (PublishFilled)
  for (uint32_t i = 1; i < n; ++i) {
    rt_->pool().Publish(cache_blocks[i], Owner(block + i));
    // Read ahead: not seen (no fault waited for it).
    table_.Unlock(block + i, (entries[i] & ~Table::kCbMask) | Table::kPresent | cache_blocks[i]);
    // Resident without a fault: the reuse tracker can no longer see its accesses.
    if (tracker_ != nullptr && tracker_->Sampled(block + i)) {
      tracker_->Record(block + i, ReuseTracker::Kind::kUnseen, 0);
    }
  }
  prefetched_.fetch_add(n - 1, std::memory_order_relaxed);
  PublishFilled(block, entry, cache_block, write && writable_, tid);
  return true;
}

void Mapping::ServeEvicted(uint64_t block, Table::Entry e, uint32_t cache_block, bool write,
                           pid_t tid, char* staging) {
  // An evicted version still in memory (shadow) or in the journal (staged).
  Counters& c = rt_->counters();
  const size_t valid = ValidBytes(block);
  char* buf = staging != nullptr ? staging : rt_->AcquireStaging();
  absl::Status status;
  bool from_file = false;
  if (e.shadow()) {
    std::memcpy(buf, rt_->shadows().at(e.shadow_index()).data, valid);
  } else {
    auto r = write_back_->ReadEvicted(first_file_block() + block, absl::MakeSpan(buf, valid));
    if (!r.ok()) status = r.status();
    if (status.ok() && !*r) {
      status = ReadBlock(block, buf, valid);
      from_file = true;
      if (status.ok()) {
        // Counted before the install wakes the faulting thread.
        c.blocks_read.fetch_add(1, std::memory_order_relaxed);
        misses_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  int err = status.ok() ? InstallBlock(block, buf, valid, write && writable_) : 0;
  if (staging == nullptr) rt_->ReleaseStaging(buf);
  if (!status.ok() || err != 0) {
    rt_->pool().Release(cache_block);
    if (!status.ok()) c.io_errors.fetch_add(1, std::memory_order_relaxed);
    RaiseSigbus(block, e.v, tid, status.ok() ? PosixError(err, "UFFDIO_COPY") : status);
    return;
  }
  // The sink held no version: the file has the newest, and no new one can appear while
  // this entry is locked (only a resident block is captured or evicted), so later misses
  // read the file directly.
  PublishFilled(block, from_file ? e.v & ~Table::kStaged : e.v, cache_block, write && writable_,
                tid);
}

uint32_t Mapping::QueuedCb(uint64_t block) const {
  if (block >= table_.size()) return io::kNoCb;
  Table::Entry e = table_.Load(block);
  return e.filling() ? e.cache_block() : io::kNoCb;
}

File* Mapping::read_file() {
  return use_direct_.load(std::memory_order_relaxed) ? direct_.get() : file_.get();
}

size_t Mapping::ValidBytes(uint64_t first, uint32_t count) const {
  const uint64_t start = file_offset_ + first * block_size_;
  const uint64_t size = file_size();
  if (start >= size) return 0;
  return static_cast<size_t>(std::min<uint64_t>(uint64_t{count} * block_size_, size - start));
}

bool Mapping::FallBackToBuffered() {
  if (!use_direct_.exchange(false)) return false;
  UMAP_LOG(kWarn, "O_DIRECT reads of ", file_->name(),
           " were refused (EINVAL); reading through the page cache instead");
  return true;
}

void Mapping::AttachIo(io::IoManager* io, bool direct) {
  io_ = io;
  ioq_ = io->AddQueue(this);
  if (!direct) return;
  auto d = file_->OpenDirectReader();
  if (!d.ok()) return;  // the file system has no direct I/O: buffered reads
  direct_ = *std::move(d);
  use_direct_.store(true);
}

void Mapping::DetachIo() {
  if (ioq_ == nullptr) return;
  io_->RemoveQueue(ioq_);
  ioq_ = nullptr;
}

int Mapping::Install(uint64_t first, uint32_t count, const char* buf, const uint64_t* entries) {
  const size_t page = rt_->page_size();
  uint32_t i = 0;
  while (i < count) {
    if (entries[i] & Table::kStash) {  // kept aside in a stash buffer by Complete
      ++i;
      continue;
    }
    const bool write = writable_ && (entries[i] & Table::kFillWrite);
    uint32_t j = i + 1;
    while (j < count && !(entries[j] & Table::kStash) &&
           (writable_ && (entries[j] & Table::kFillWrite)) == write && !StartsSegment(first + j)) {
      ++j;
    }
    // One copy for the stretch; the last block of the file may end inside it.
    const size_t valid_last = ValidBytes(first + j - 1);
    const size_t last_pages = RoundUp(valid_last, page);
    const size_t len = size_t{j - i - 1} * block_size_ + last_pages;
    int err = rt_->uffd().Copy(BlockAddr(first + i), buf + size_t{i} * block_size_, len,
                               /*write_protect=*/writable_ && !write, /*dont_wake=*/signal_mode_);
    if (err != 0) return err;
    if (last_pages < block_size_) {
      err = rt_->uffd().Poison(BlockAddr(first + j - 1) + last_pages, block_size_ - last_pages);
      if (err != 0 && err != ENOSYS) return err;
    }
    i = j;
  }
  return 0;
}

void Mapping::Complete(const io::Run& run, char* buf, const absl::Status& st) {
  Counters& c = rt_->counters();
  constexpr uint32_t kChunk = 64;
  uint64_t entries[kChunk];
  uint32_t stash_of_[kChunk];
  if (buf != nullptr) {
    // Bytes past end of file inside the last page read as zeros, as with mmap.
    const size_t valid = ValidBytes(run.first, run.count);
    const size_t tail = RoundUp(valid, rt_->page_size());
    if (tail > valid) std::memset(buf + valid, 0, tail - valid);
  }
  bool logged = false;
  if (!st.ok() && !absl::IsCancelled(st)) c.io_errors.fetch_add(1, std::memory_order_relaxed);
  if (st.ok()) {
    // Counted before any block is installed: a thread woken by the install (and whatever it
    // reads next, Stats() included) must find its block's read already counted.
    c.blocks_read.fetch_add(run.count, std::memory_order_relaxed);
    fills_.fetch_add(1, std::memory_order_relaxed);
    bytes_read_.fetch_add(ValidBytes(run.first, run.count), std::memory_order_relaxed);
  }
  for (uint32_t done = 0; done < run.count; done += kChunk) {
    const uint32_t n = std::min(kChunk, run.count - done);
    const uint64_t first = run.first + done;
    // Ascending order; nobody else holds two entry locks while waiting, so no deadlock.
    for (uint32_t i = 0; i < n; ++i) entries[i] = table_.Lock(first + i).v;
    // A read-ahead trigger goes to a stash buffer instead of the address space, unless a
    // writer waits for it (it is then an ordinary fill) or no buffer is free.
    for (uint32_t i = 0; i < n; ++i) {
      if (!(entries[i] & Table::kStash)) continue;
      if (!st.ok() || (entries[i] & Table::kFillWrite)) {
        entries[i] &= ~Table::kStash;
        continue;
      }
      const uint32_t idx = stash_free_.Pop();
      if (idx == IndexStack::kEmpty) {
        entries[i] &= ~Table::kStash;
        continue;
      }
      stash_of_[i] = idx;
      const size_t valid = ValidBytes(first + i);
      char* dst = StashBuffer(idx);
      std::memcpy(dst, buf + (size_t{done} + i) * block_size_, valid);
      if (valid < block_size_) std::memset(dst + valid, 0, block_size_ - valid);
    }
    int err = 0;
    if (st.ok()) err = Install(first, n, buf + size_t{done} * block_size_, entries);
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t b = first + i;
      const uint64_t v =
          entries[i] & ~(Table::kFilling | Table::kFillWrite | Table::kCbMask | Table::kStash);
      const uint32_t cache_block = static_cast<uint32_t>(entries[i] & Table::kCbMask);
      const pid_t tid = rt_->fill_tid(cache_block);
      if (entries[i] & Table::kStash) {
        if (err == 0) {
          // Stashed: not present, keeps its cache block; the reader's fault installs it.
          table_.Unlock(b, Table::WithStash(v, stash_of_[i]) | cache_block);
          continue;
        }
        stash_free_.Push(stash_of_[i]);  // the run failed: handled as an ordinary fill below
      }
      if (absl::IsCancelled(st)) {
        // The mapping is going away: nobody waits, nothing to install.
        rt_->pool().Release(cache_block);
        table_.Unlock(b, v);
        continue;
      }
      if (!st.ok() || err != 0) {
        rt_->pool().Release(cache_block);
        if (tid == 0) {
          // Read-ahead nobody waits for: forget it; a later fault reads the block again.
          table_.Unlock(b, v);
          continue;
        }
        // One log line for the run; every waiting block gets its SIGBUS.
        absl::Status why =
            logged ? absl::OkStatus() : (!st.ok() ? st : PosixError(err, "UFFDIO_COPY"));
        logged = true;
        RaiseSigbus(b, v, tid, why);
        continue;
      }
      const bool dirty = writable_ && (entries[i] & Table::kFillWrite);
      rt_->pool().Publish(cache_block, Owner(b));
      resident_.fetch_add(1, std::memory_order_relaxed);  // before the unlock (PublishFilled)
      if (dirty) dirty_.fetch_add(1, std::memory_order_relaxed);
      // Seen when a fault waits for it; read-ahead alone leaves it as it was.
      table_.Unlock(b, v | Table::kPresent | cache_block | (dirty ? Table::kDirty : 0) |
                           (tid != 0 ? Table::kSeen : 0));
      // Resident without a fault: the reuse tracker can no longer see its accesses.
      if (tid == 0 && tracker_ != nullptr && tracker_->Sampled(b)) {
        tracker_->Record(b, ReuseTracker::Kind::kUnseen, 0);
      }
      if (tid != 0) {
        rt_->refs().Touch(tid, cache_block);
        c.faults_missing.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
}

bool Mapping::HandleWriteProtect(uint64_t block, pid_t tid) {
  Counters& c = rt_->counters();
  Table::Entry e = table_.Lock(block);
  char* addr = BlockAddr(block);
  if (!e.present()) {
    // Stale: the block was evicted (the retry will be a MISSING fault).
    table_.Unlock(block, e.v);
    if (!signal_mode_) WakeOrLog(addr);
    c.stale_faults.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // Clean: the first write since the last capture; the block becomes dirty and writable.
  // Dirty: a umsync's capture protected its span while this block, dirtied after the
  // capture passed it, was writable (CaptureDirty): writable again, still dirty. (Or a
  // second fault on a block another thread's fault just unprotected: this clears nothing.)
  // Clearing the protection wakes the writer.
  const size_t len = RoundUp(ValidBytes(block), rt_->page_size());
  int err = rt_->uffd().WriteProtect(addr, len, false);
  for (int i = 0; err == EAGAIN && i < 3; ++i) err = rt_->uffd().WriteProtect(addr, len, false);
  if (err != 0) {
    // The writer would fault on this page for ever: it gets SIGBUS, with the reason.
    UMAP_LOG(kError, "UFFDIO_WRITEPROTECT(clear) failed at ", AddrHex(addr), " (block ", block,
             " of ", file_->name(), "): errno ", err, "; SIGBUS to the writer");
    table_.Unlock(block, e.v);
    c.sigbus.fetch_add(1, std::memory_order_relaxed);
    if (signal_mode_) return false;  // the dispatcher hands it to the previous handler
    if (tid > 0) ::syscall(SYS_tgkill, ::getpid(), tid, SIGBUS);
    return false;
  }
  if (e.dirty()) {
    table_.Unlock(block, e.v);
    c.stale_faults.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  table_.Unlock(block, e.v | Table::kDirty);
  dirty_.fetch_add(1, std::memory_order_relaxed);
  first_writes_.fetch_add(1, std::memory_order_relaxed);
  c.faults_wp.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Mapping::WakeOrLog(char* addr) {
  // A failed wake leaves the faulting thread blocked in the kernel: say so. (The fault is
  // raised again by the kernel if the thread is woken by anything else.)
  int err = rt_->uffd().Wake(addr, block_size_);
  if (err != 0) err = rt_->uffd().Wake(addr, block_size_);
  if (err != 0) {
    UMAP_LOG(kError, "UFFDIO_WAKE failed at ", AddrHex(addr), " of ", file_->name(), ": errno ",
             err, "; a faulting thread may stay blocked");
  }
}

}  // namespace umap::runtime
