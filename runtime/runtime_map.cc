// Runtime: mapping a file (Map: the checks, the journal, the write-back sink, replay of what
// a crash left) and the calls on a mapping it owns (Lookup, Sync, Unmap).
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
#include "base/round.h"
#include "base/status_macros.h"
#include "recovery/recovery.h"
#include "runtime/fault/fault_signal.h"
#include "runtime/fault/mapping.h"
#include "runtime/sizing/system_memory_probe.h"
#include "runtime/umap_c_internal.h"
#include "runtime/writeback/guarded_write_back.h"
#include "runtime/writeback/journal_write_back.h"

namespace umap::runtime {

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
  if (fixed && (reinterpret_cast<uintptr_t>(addr) % page_size()) != 0) {
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
                   env()->AdoptFd(fd, writable ? OpenMode::kReadWrite : OpenMode::kReadOnly));
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
  o.env = env();
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
      jo.env = env();
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
    if (exact && (a != base || RoundUp(length, page_size()) != RoundUp(m->length(), page_size()))) {
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
  if (reinterpret_cast<uintptr_t>(addr) % page_size() != 0) {
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

}  // namespace umap::runtime
