// Runtime::Quiesce and Runtime::Resume: the runtime's side of a checkpoint (CRIU). The
// protocol, what survives a dump and what is re-created: docs/design.md "Quiesce and resume".
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "recovery/recovery.h"
#include "runtime/fault/fault_signal.h"
#include "runtime/fault/mapping.h"
#include "runtime/runtime.h"

namespace umap::runtime {
namespace {

// How long a quiesce waits for the kernel's io_uring worker threads to exit after the rings
// closed (they go within a few milliseconds when idle).
constexpr auto kIoWorkerBudget = std::chrono::seconds(5);

// Names of the threads of this process that belong to io_uring (io-wq workers "iou-wrk-N",
// SQPOLL threads "iou-sqp-N"): CRIU cannot dump a process that has any.
std::vector<std::string> IoUringThreads() {
  std::vector<std::string> found;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return found;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = absl::StrCat("/proc/self/task/", e->d_name, "/comm");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // the thread exited meanwhile
    char comm[32] = {};
    const ssize_t n = ::read(fd, comm, sizeof(comm) - 1);
    ::close(fd);
    if (n > 0 && std::strncmp(comm, "iou-", 4) == 0) {
      found.emplace_back(comm, static_cast<size_t>(n) - (comm[n - 1] == '\n' ? 1 : 0));
    }
  }
  ::closedir(d);
  return found;
}

absl::Status Annotate(const absl::Status& s, absl::string_view what) {
  return WithErrno(absl::Status(s.code(), absl::StrCat(what, ": ", s.message())),
                   ErrnoFromStatus(s));
}

}  // namespace

absl::Status WaitForIoUringThreadsToExit() {
  const auto deadline = std::chrono::steady_clock::now() + kIoWorkerBudget;
  for (;;) {
    std::vector<std::string> left = IoUringThreads();
    if (left.empty()) return absl::OkStatus();
    if (std::chrono::steady_clock::now() > deadline) {
      return PosixError(EBUSY,
                        absl::StrCat("kernel io_uring threads still run after Umap closed its "
                                     "rings: ",
                                     absl::StrJoin(left, ", "),
                                     " (another part of the program holds an io_uring?); "
                                     "CRIU cannot dump a process with them"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

const char* RuntimeStateName(RuntimeState s) {
  switch (s) {
    case RuntimeState::kRunning:
      return "running";
    case RuntimeState::kQuiescing:
      return "quiescing";
    case RuntimeState::kQuiesced:
      return "quiesced";
    case RuntimeState::kFenced:
      return "fenced";
  }
  return "?";
}

std::vector<Mapping*> Runtime::LiveMappings() {
  std::vector<Mapping*> maps;
  absl::MutexLock l(&mu_);
  for (uint32_t i = 0; i < slot_high_.load(); ++i) {
    if (Mapping* m = slots_[i].load()) maps.push_back(m);
  }
  return maps;
}

void Runtime::ReopenGate() {
  absl::MutexLock l(&gate_mu_);
  gate_open_ = true;
}

absl::Status Runtime::WriteBackForQuiesce(const std::vector<Mapping*>& maps, bool final) {
  for (Mapping* m : maps) {
    absl::Status s;
    if (!m->writable()) continue;
    if (m->write_back()->keeps_evicted()) {
      // Atomic policy: what was never synced must never reach the file, so the dirty
      // blocks are staged in the journal, uncommitted, as an eviction would. A restored
      // process reads them back and commits them with its next umsync; if the checkpoint is
      // never restored, recovery discards them and the file holds the last umsync. Staging
      // runs once, when no fault can dirty a block again.
      if (final) s = m->StageDirty();
    } else {
      s = m->Sync(0, m->blocks());  // relaxed (or no journal): written back, as evictions are
    }
    if (!s.ok()) return Annotate(s, absl::StrCat("write-back of ", m->file()->name()));
  }
  return absl::OkStatus();
}

absl::Status Runtime::CheckNothingPending(const std::vector<Mapping*>& maps) {
  auto snap = std::make_unique<QuiesceSnapshot>();
  for (Mapping* m : maps) {
    if (m->dirty_blocks() != 0) {
      return PosixError(EBUSY, absl::StrCat(m->dirty_blocks(), " blocks of ", m->file()->name(),
                                            " are still dirty after the final write-back"));
    }
    if (m->writable()) {
      if (absl::Status s = m->write_back()->Drain(); !s.ok()) {
        return Annotate(s, absl::StrCat("draining the journal of ", m->file()->name()));
      }
    }
    auto id = m->file()->Identify();
    if (!id.ok()) return Annotate(id.status(), absl::StrCat("identifying ", m->file()->name()));
    snap->files.emplace_back(m, *std::move(id));
  }
  if (shadows_.in_use() != 0) {
    return PosixError(EBUSY, absl::StrCat(shadows_.in_use(),
                                          " evicted blocks are still on their way to the file"));
  }
  absl::MutexLock l(&mu_);
  if (journal_ != nullptr) {
    auto st = journal_->Run(
        [](journal::Journal& j) -> absl::StatusOr<journal::Journal::Stats> { return j.stats(); });
    if (!st.ok()) return Annotate(st.status(), "reading the journal's state");
    if (st->pending_txns != 0) {
      return PosixError(EBUSY, absl::StrCat("journal ", journal_->dir(), " still holds ",
                                            st->pending_txns, " transactions"));
    }
    snap->journal = true;
    snap->staged_blocks = st->staged_blocks;
    snap->last_lsn = st->last_lsn;
    snap->last_mapping_id = st->last_mapping_id;
    snap->mapping_ids.assign(live_mapping_ids_.begin(), live_mapping_ids_.end());
  }
  snapshot_ = std::move(snap);
  return absl::OkStatus();
}

void Runtime::AbortQuiesce(const std::vector<Mapping*>& maps, bool detached) {
  for (Mapping* m : maps) {
    if (detached) m->AttachIo(io_.get(), options_.io_direct);
  }
  state_.store(static_cast<uint32_t>(RuntimeState::kRunning), std::memory_order_release);
  if (!signal_mode()) {
    // Handler mode: faults read while quiescing were left unanswered, their threads still
    // blocked in the kernel; woken, they fault again and are served.
    for (Mapping* m : maps) {
      if (int err = uffd_->Wake(m->base(), m->region_length())) {
        UMAP_LOG(kError, "UFFDIO_WAKE of ", m->file()->name(), " after a failed quiesce: errno ",
                 err);
      }
    }
  }
  if (sizer_ != nullptr) sizer_->Start();
  WakeParkedThreads();
  ReopenGate();
}

absl::Status Runtime::Quiesce() {
  absl::MutexLock cl(&checkpoint_mu_);
  if (state() == RuntimeState::kQuiesced) return absl::OkStatus();
  if (state() == RuntimeState::kFenced) {
    return PosixError(ESTALE, "umap_quiesce: the runtime is fenced");
  }
  RETURN_IF_ERROR(InstallQuiesceSignal());
  {
    absl::MutexLock l(&gate_mu_);
    gate_open_ = false;
    gate_mu_.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &operations_));
  }
  const std::vector<Mapping*> maps = LiveMappings();
  // 1. Write back what is dirty while faults are still served (relaxed policy), so that the
  // time in which faulting threads wait is only the final write-back's.
  absl::Status s = WriteBackForQuiesce(maps, /*final=*/false);
  bool detached = false;
  if (s.ok()) {
    // 2. From now on a fault waits (signal mode: parked in the SIGBUS handler; handler mode:
    // left unanswered in the kernel). Wait for resolutions already under way, then for the
    // fills in flight (their threads may write into what they install), then write back
    // the rest: nothing can become dirty after this capture.
    state_.store(static_cast<uint32_t>(RuntimeState::kQuiescing), std::memory_order_release);
    WaitForHandlers();
    // The sizer parks, expires and shrinks: none of that may change a block once the final
    // write-back has looked at it.
    if (sizer_ != nullptr) sizer_->Stop();
    for (Mapping* m : maps) m->DetachIo();
    detached = true;
    s = WriteBackForQuiesce(maps, /*final=*/true);
    if (s.ok()) s = CheckNothingPending(maps);
  }
  if (!s.ok()) {
    AbortQuiesce(maps, detached);
    UMAP_LOG(kWarn, "quiesce failed, running on: ", s.ToString());
    return Annotate(s, "umap_quiesce");
  }
  // 3. Nothing is dirty and nothing runs: drop the cache, make each range inaccessible
  // (before it is unregistered, so that no access can find a zero page), close the kernel
  // objects, then the journal.
  StopThreads();
  // The journal sinks' appliers too (defer_file_sync; Drain left them nothing): a checkpoint
  // dumps no umap thread. A sink's next commit starts its applier again.
  for (Mapping* m : maps) {
    if (m->write_back() != nullptr) m->write_back()->StopBackground();
  }
  int evacuate_err = 0;
  for (Mapping* m : maps) {
    int err = m->Evacuate();
    if (err == 0) err = ProtectRegion(m->base(), m->region_length(), PROT_NONE);
    if (err == 0) err = uffd_->Unregister(m->base(), m->region_length());
    if (err != 0 && evacuate_err == 0) {
      evacuate_err = err;
      s = PosixError(
          err, absl::StrCat("umap_quiesce: dropping the cached pages of ", m->file()->name()));
    }
  }
  // Every parked block went with its mapping's cache: the park buffers' copies go too.
  if (s.ok() && sizer_ != nullptr) sizer_->DropParkBuffers();
  ReleaseKernelObjects();
  if (s.ok()) {
    absl::MutexLock l(&mu_);
    if (journal_ != nullptr) s = journal_->Suspend();
  }
  if (!s.ok()) {
    // Everything was written back; bring the machinery up again and run on.
    absl::Status up = StartMachinery();
    if (up.ok()) {
      up = RegisterAgain(maps);
      if (!up.ok()) {
        // Left quiesced: nothing of the machinery may run (a resume starts it again).
        StopThreads();
        ReleaseKernelObjects();
      }
    }
    if (!up.ok()) {
      UMAP_LOG(kError, "after a failed quiesce (", s.ToString(),
               ") the runtime could not start again: ", up.ToString(),
               "; it stays quiesced, umap_resume may be retried");
      state_.store(static_cast<uint32_t>(RuntimeState::kQuiesced), std::memory_order_release);
      return Annotate(s, "umap_quiesce");
    }
    state_.store(static_cast<uint32_t>(RuntimeState::kRunning), std::memory_order_release);
    WakeParkedThreads();
    ReopenGate();
    UMAP_LOG(kWarn, "quiesce failed, running on: ", s.ToString());
    return Annotate(s, "umap_quiesce");
  }
  // Last: CRIU refuses to dump a process holding file locks. Nothing writes from here on.
  for (Mapping* m : maps) {
    if (m->coherence() != nullptr) m->coherence()->ReleaseForCheckpoint();
  }
  state_.store(static_cast<uint32_t>(RuntimeState::kQuiesced), std::memory_order_release);
  UMAP_LOG(kInfo, "quiesced for a checkpoint: ", maps.size(),
           " mappings written back and made inaccessible; userfaultfd, io_uring and journal "
           "closed");
  return absl::OkStatus();
}

absl::Status Runtime::RegisterAgain(const std::vector<Mapping*>& maps) {
  for (size_t i = 0; i < maps.size(); ++i) {
    Mapping* m = maps[i];
    int err = uffd_->Register(m->base(), m->region_length(), m->writable());
    if (err == 0) err = ProtectRegion(m->base(), m->region_length(), m->region_prot());
    if (err != 0) {
      // Undo the ones done: inaccessible and unregistered again.
      for (size_t k = 0; k <= i; ++k) {
        ProtectRegion(maps[k]->base(), maps[k]->region_length(), PROT_NONE);
        (void)uffd_->Unregister(maps[k]->base(), maps[k]->region_length());
        if (k < i) maps[k]->DetachIo();
      }
      return PosixError(err, absl::StrCat("registering ", m->file()->name(), " again"));
    }
    m->AttachIo(io_.get(), options_.io_direct);
    if (m->write_back() != nullptr) m->write_back()->set_io(io_.get());
  }
  return absl::OkStatus();
}

absl::Status Runtime::ValidateAfterRestore() {
  const QuiesceSnapshot& snap = *snapshot_;
  for (const auto& [m, before] : snap.files) {
    auto now = m->file()->Identify();
    if (!now.ok()) return Annotate(now.status(), absl::StrCat("identifying ", m->file()->name()));
    if (!recovery::SameFile(before, *now)) {
      return PosixError(ESTALE, absl::StrCat(m->file()->name(),
                                             " is no longer the file that was "
                                             "mapped at the checkpoint (inode ",
                                             before.inode, ", now ", now->inode, ")"));
    }
    if (now->size != before.size) {
      return PosixError(ESTALE, absl::StrCat(m->file()->name(),
                                             " changed size since the "
                                             "checkpoint (",
                                             before.size, " -> ", now->size,
                                             " bytes): another process wrote it"));
    }
  }
  if (!snap.journal) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  auto facts = journal_->Run(
      [&](journal::Journal& j)
          -> absl::StatusOr<std::pair<journal::Journal::Stats, std::vector<journal::MappingInfo>>> {
        return std::make_pair(j.stats(), j.Mappings());
      });
  if (!facts.ok()) return Annotate(facts.status(), "reading the journal");
  const auto& [st, registered] = *facts;
  const std::string& dir = journal_->dir();
  if (st.last_lsn != snap.last_lsn || st.last_mapping_id != snap.last_mapping_id) {
    return PosixError(ESTALE, absl::StrCat("journal ", dir,
                                           " was written after the checkpoint (highest "
                                           "LSN ",
                                           snap.last_lsn, " -> ", st.last_lsn, ", mapping id ",
                                           snap.last_mapping_id, " -> ", st.last_mapping_id,
                                           "): another process took it over, or "
                                           "this is an older checkpoint of the job"));
  }
  if (st.pending_txns != 0) {
    return PosixError(ESTALE, absl::StrCat("journal ", dir, " holds ", st.pending_txns,
                                           " transactions that were not there at the "
                                           "checkpoint"));
  }
  if (st.staged_blocks != snap.staged_blocks) {
    return PosixError(ESTALE,
                      absl::StrCat("journal ", dir, " holds ", st.staged_blocks,
                                   " staged blocks, the checkpoint left ", snap.staged_blocks,
                                   " (umap-recover or another process opened it and "
                                   "discarded them): this process's unsynced writes "
                                   "are gone"));
  }
  for (uint64_t id : snap.mapping_ids) {
    bool found = false;
    for (const journal::MappingInfo& r : registered) found = found || r.id == id;
    if (!found) {
      return PosixError(ESTALE, absl::StrCat("journal ", dir, " no longer registers mapping ", id,
                                             " of this process (umap-recover or another "
                                             "process removed it)"));
    }
  }
  return absl::OkStatus();
}

absl::Status Runtime::RelockAfterRestore(const std::vector<Mapping*>& maps) {
  for (Mapping* m : maps) {
    absl::Status s =
        m->coherence() != nullptr ? m->coherence()->RelockAfterCheckpoint() : absl::OkStatus();
    if (s.ok()) continue;
    // The caller gives back the locks taken so far. Another writer holds a range this
    // mapping writes: it may have changed those blocks.
    if (ErrnoFromStatus(s) == EBUSY) {
      return PosixError(ESTALE, absl::StrCat("another writer took a partitioned-write range "
                                             "of ", m->file()->name(),
                                             " during the checkpoint: ", s.message()));
    }
    return s;
  }
  return absl::OkStatus();
}

void Runtime::Fence(const std::vector<Mapping*>& maps, const absl::Status& why) {
  state_.store(static_cast<uint32_t>(RuntimeState::kFenced), std::memory_order_release);
  UMAP_LOG(kError, "resume refused, runtime fenced: ", why.message(), ". It will not write to ",
           maps.size(),
           " mappings or to the journal again; threads that touch the mappings "
           "get SIGSEGV, umsync and umap return ESTALE");
  WakeParkedThreads();
  ReopenGate();
}

absl::Status Runtime::Resume() {
  absl::MutexLock cl(&checkpoint_mu_);
  if (state() == RuntimeState::kRunning) return absl::OkStatus();
  if (state() == RuntimeState::kFenced) {
    return PosixError(ESTALE, "umap_resume: the runtime is fenced");
  }
  const std::vector<Mapping*> maps = LiveMappings();
  bool reopened = false;
  absl::Status reopen;
  {
    absl::MutexLock l(&mu_);
    if (journal_ != nullptr && journal_->suspended()) {
      reopen = journal_->Resume(env());
      reopened = reopen.ok();
    }
  }
  if (!reopen.ok()) {
    // ESTALE: another process took the journal over while this one was checkpointed.
    if (ErrnoFromStatus(reopen) == ESTALE) Fence(maps, reopen);
    return Annotate(reopen, "umap_resume: reopening the journal");
  }
  // A resume that cannot finish gives back what it took: the journal (stale or not, it is
  // not this runtime's to hold now: a fenced runtime never writes again, and a transient
  // failure is retried with a fresh open) and the partitioned-write locks (a runtime left
  // quiesced must stay dumpable, a fenced one must not block the writer that took over).
  auto give_back = [&] {
    for (Mapping* m : maps) {
      if (m->coherence() != nullptr) m->coherence()->ReleaseForCheckpoint();
    }
    absl::MutexLock l(&mu_);
    if (reopened) journal_->Suspend().IgnoreError();  // nothing was written since Resume
  };
  absl::Status s = ValidateAfterRestore();
  if (s.ok()) s = RelockAfterRestore(maps);
  if (!s.ok()) {
    give_back();
    if (ErrnoFromStatus(s) == ESTALE) Fence(maps, s);
    return Annotate(s, "umap_resume");
  }
  s = StartMachinery();
  if (s.ok()) {
    s = RegisterAgain(maps);
    if (!s.ok()) {
      StopThreads();
      ReleaseKernelObjects();
    }
  }
  if (!s.ok()) {
    give_back();
    return Annotate(s, "umap_resume");
  }
  state_.store(static_cast<uint32_t>(RuntimeState::kRunning), std::memory_order_release);
  WakeParkedThreads();
  ReopenGate();
  UMAP_LOG(kInfo, "resumed after a checkpoint: ", maps.size(), " mappings registered again");
  return absl::OkStatus();
}

}  // namespace umap::runtime
