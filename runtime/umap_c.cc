// The C API: thin wrappers that turn Status into errno and find the runtime of an address.
//
// The C functions are defined inside namespace umap::c_api with C linkage: their symbols are
// the plain C names, while in C++ the function umap() does not collide with namespace umap
// (a scope cannot hold both). Inside, the namespace is always spelled ::umap.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "runtime/control/checkpoint_control.h"
#include "runtime/fault/fault_signal.h"
#include "runtime/runtime.h"
#include "runtime/umap_c_internal.h"
#include "umap/umap_types.h"

struct umap_runtime {
  std::unique_ptr<::umap::runtime::Runtime> rt;
};

namespace umap::c_api {
namespace {

using ::umap::ErrnoFromStatus;

// Every live runtime, so that uunmap/umsync can find the one serving an address.
absl::Mutex g_mu;
std::vector<umap_runtime*>& Runtimes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  static auto* v = new std::vector<umap_runtime*>();
  return *v;
}

// Checkpoints: one umap_quiesce or umap_resume at a time, and no runtime is created or
// destroyed meanwhile; while the process is quiesced, creating a runtime waits for the
// resume (a new userfaultfd or io_uring would make the process undumpable).
absl::Mutex g_checkpoint_mu;
bool g_quiesced ABSL_GUARDED_BY(g_checkpoint_mu) = false;

std::vector<umap_runtime*> AllRuntimes() {
  absl::MutexLock l(&g_mu);
  return Runtimes();
}

// "running", "quiesced" or "fenced" when every runtime is in that state (or, with none, what
// a new one would be), else the count of each ("running 1, fenced 1").
std::string ProcessState() {
  absl::MutexLock l(&g_checkpoint_mu);
  using ::umap::runtime::RuntimeState;
  int count[4] = {};
  for (umap_runtime* r : AllRuntimes()) ++count[static_cast<int>(r->rt->state())];
  std::vector<std::string> parts;
  std::string only;
  for (int k = 0; k < 4; ++k) {
    if (count[k] == 0) continue;
    only = ::umap::runtime::RuntimeStateName(static_cast<RuntimeState>(k));
    parts.push_back(absl::StrCat(only, " ", count[k]));
  }
  if (parts.empty()) return g_quiesced ? "quiesced" : "running";
  return parts.size() == 1 ? only : absl::StrJoin(parts, ", ");
}

CheckpointHooks g_hooks;  // set once, by the LD_PRELOAD shim

absl::Status QuiesceAll() {
  absl::MutexLock l(&g_checkpoint_mu);
  std::vector<umap_runtime*> rts = AllRuntimes();
  g_quiesced = true;
  for (size_t i = 0; i < rts.size(); ++i) {
    absl::Status s = rts[i]->rt->Quiesce();
    if (s.ok()) continue;
    // All or nothing: the ones already quiesced run again.
    for (size_t k = 0; k < i; ++k) {
      if (absl::Status r = rts[k]->rt->Resume(); !r.ok()) {
        UMAP_LOG(kError, "umap_quiesce: undoing the quiesce of a runtime failed: ", r.ToString());
      }
    }
    g_quiesced = false;
    return s;
  }
  if (absl::Status s = ::umap::runtime::WaitForIoUringThreadsToExit(); !s.ok()) {
    for (umap_runtime* r : rts) {
      if (absl::Status up = r->rt->Resume(); !up.ok()) {
        UMAP_LOG(kError, "umap_quiesce: undoing the quiesce of a runtime failed: ", up.ToString());
      }
    }
    g_quiesced = false;
    return s;
  }
  if (g_hooks.after_quiesce != nullptr) g_hooks.after_quiesce();
  return absl::OkStatus();
}

absl::Status ResumeAll() {
  absl::MutexLock l(&g_checkpoint_mu);
  if (g_quiesced && g_hooks.before_resume != nullptr) g_hooks.before_resume();
  absl::Status first;
  bool any_quiesced = false;
  for (umap_runtime* r : AllRuntimes()) {
    absl::Status s = r->rt->Resume();
    if (!s.ok() && first.ok()) first = s;
    any_quiesced = any_quiesced || r->rt->state() == ::umap::runtime::RuntimeState::kQuiesced;
  }
  g_quiesced = any_quiesced;
  return first;
}

umap_runtime* FindRuntime(const void* addr, size_t len) {
  absl::MutexLock l(&g_mu);
  for (umap_runtime* r : Runtimes()) {
    if (r->rt->Owns(addr, len)) return r;
  }
  return nullptr;
}

void CloseIdleJournalsAtExit() {
  absl::MutexLock l(&g_mu);
  for (umap_runtime* r : Runtimes()) r->rt->CloseIdleJournal();
}

int Fail(const absl::Status& s) {
  errno = ErrnoFromStatus(s);
  UMAP_LOG(kInfo, s.ToString());
  return -1;
}

}  // namespace

void SetCheckpointHooks(const CheckpointHooks& hooks) {
  absl::MutexLock l(&g_checkpoint_mu);
  g_hooks = hooks;
}

void LockForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  g_checkpoint_mu.Lock();
  g_mu.Lock();
}

void UnlockAfterFork(bool child) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // The parent's runtimes stay in the child's memory, never reached again: their threads
  // are gone.
  if (child) Runtimes().clear();
  g_mu.Unlock();
  g_checkpoint_mu.Unlock();
}

int PrepareFileChange(void* addr, size_t length, bool for_read) {
  umap_runtime* r = FindRuntime(addr, std::max<size_t>(length, 1));
  if (r == nullptr) {
    errno = ENOMEM;
    return -1;
  }
  absl::Status s = r->rt->PrepareFileChange(addr, length, for_read);
  return s.ok() ? 0 : Fail(s);
}

int64_t FileChanged(void* addr, size_t length, uint64_t file_size) {
  umap_runtime* r = FindRuntime(addr, std::max<size_t>(length, 1));
  if (r == nullptr) {
    errno = ENOMEM;
    return -1;
  }
  absl::StatusOr<uint64_t> kept = r->rt->FileChanged(addr, length, file_size);
  return kept.ok() ? static_cast<int64_t>(*kept) : Fail(kept.status());
}

int ForeignChange(void* addr, uint64_t file_size) {
  umap_runtime* r = FindRuntime(addr, 1);
  if (r == nullptr) {
    errno = ENOMEM;
    return -1;
  }
  absl::StatusOr<int> what = r->rt->ForeignChange(addr, file_size);
  return what.ok() ? *what : Fail(what.status());
}

int HandOff(void* addr, size_t length) {
  umap_runtime* r = FindRuntime(addr, length);
  if (r == nullptr) {
    errno = EINVAL;
    return -1;
  }
  absl::Status s = r->rt->HandOff(addr, length);
  return s.ok() ? 0 : Fail(s);
}

umap_runtime* TEST_AdoptRuntime(std::unique_ptr<::umap::runtime::Runtime> rt) {
  if (rt == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* r = new (std::nothrow) umap_runtime{std::move(rt)};
  if (r == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  absl::MutexLock l(&g_mu);
  Runtimes().push_back(r);
  return r;
}

extern "C" {

int umap_config_init(umap_config* config);

umap_runtime* umap_runtime_create(const umap_config* config) {
  if (config == nullptr) {
    errno = EINVAL;
    return nullptr;
  }

  if (config->checkpoint_control) {
    absl::Status s = ::umap::runtime::StartCheckpointControl(
        {[] { return QuiesceAll(); }, [] { return ResumeAll(); }, [] { return ProcessState(); }});
    if (!s.ok()) {
      UMAP_LOG(kError, "umap_runtime_create: checkpoint_control: ", s.ToString());
      errno = ErrnoFromStatus(s);
      return nullptr;
    }
  }
  absl::MutexLock cl(&g_checkpoint_mu);
  g_checkpoint_mu.Await(absl::Condition(
      +[](bool* quiesced) { return !*quiesced; }, &g_quiesced));
  auto rt = ::umap::runtime::Runtime::Create(::umap::runtime::RuntimeOptions::FromConfig(*config));
  if (!rt.ok()) {
    UMAP_LOG(kError, "umap_runtime_create: ", rt.status().ToString());
    errno = ErrnoFromStatus(rt.status());
    return nullptr;
  }
  auto* r = new (std::nothrow) umap_runtime{std::move(*rt)};
  if (r == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  absl::MutexLock l(&g_mu);
  Runtimes().push_back(r);
  return r;
}

int umap_runtime_destroy(umap_runtime* r) {
  if (r == nullptr) {
    errno = EINVAL;
    return -1;
  }
  absl::MutexLock cl(&g_checkpoint_mu);
  {
    absl::MutexLock l(&g_mu);
    auto& v = Runtimes();
    v.erase(std::remove(v.begin(), v.end(), r), v.end());
  }
  delete r;
  return 0;
}

int umap_quiesce(void) {
  absl::Status s = QuiesceAll();
  return s.ok() ? 0 : Fail(s);
}

int umap_resume(void) {
  absl::Status s = ResumeAll();
  return s.ok() ? 0 : Fail(s);
}

umap_runtime* umap_default_runtime(void) {
  static umap_runtime* def = [] {
    umap_config c;
    if (umap_config_init(&c) != 0) return static_cast<umap_runtime*>(nullptr);
    return umap_runtime_create(&c);
  }();
  if (def == nullptr) errno = errno ? errno : EINVAL;
  return def;
}

void* umap_ex2(umap_runtime* r, void* addr, size_t length, int prot, int flags, int fd,
               off_t offset, const umap_map_options* options) {
  if (r == nullptr ||
      (options != nullptr && options->write_range_count > 0 && options->write_ranges == nullptr)) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  ::umap::runtime::CoherenceRequest coherence;
  if (options != nullptr) {
    coherence.mode = options->coherence;
    coherence.write_ranges.assign(options->write_ranges,
                                  options->write_ranges + options->write_range_count);
  }
  auto p = r->rt->Map(addr, length, prot, flags, fd, offset, coherence);
  if (p.ok() && (prot & PROT_WRITE) != 0) {
    // A program that unmaps and returns from main never destroys its runtimes (umap()'s is
    // never destroyed at all): at exit, their idle journals are closed, and automatic ones
    // removed, so that a clean exit leaves nothing behind. Registered after the first
    // writable map opened a journal: exit handlers and static destructors run in reverse
    // order, and RocksDB's (its thread pools) must outlive this one.
    static std::once_flag at_exit;
    std::call_once(at_exit, [] {
      if (std::atexit(&CloseIdleJournalsAtExit) != 0) {
        UMAP_LOG(kWarn, "atexit failed: automatic journals are left behind at exit");
      }
    });
  }
  if (!p.ok()) {
    // A map is refused for a reason its caller sees only as an errno (EIO, EPERM, ENOTDIR):
    // the reason, with the path and what to do, goes to the log at the default level.
    errno = ErrnoFromStatus(p.status());
    UMAP_LOG(kError, "umap of fd ", fd, " failed (", std::strerror(errno),
             "): ", p.status().message());
    return MAP_FAILED;
  }
  return *p;
}

void* umap_ex(umap_runtime* r, void* addr, size_t length, int prot, int flags, int fd,
              off_t offset) {
  return umap_ex2(r, addr, length, prot, flags, fd, offset, nullptr);
}

void* umap(void* addr, size_t length, int prot, int flags, int fd, off_t offset) {
  umap_runtime* r = umap_default_runtime();
  if (r == nullptr) return MAP_FAILED;
  return umap_ex(r, addr, length, prot, flags, fd, offset);
}

int uunmap(void* addr, size_t length) {
  umap_runtime* r = FindRuntime(addr, length);
  if (r == nullptr) {
    errno = EINVAL;
    return -1;
  }
  absl::Status s = r->rt->Unmap(addr, length);
  return s.ok() ? 0 : Fail(s);
}

int umsync(void* addr, size_t length, int flags) {
  if ((flags & ~(MS_SYNC | MS_ASYNC)) != 0 || (flags & MS_SYNC && flags & MS_ASYNC)) {
    errno = EINVAL;
    return -1;
  }
  umap_runtime* r = FindRuntime(addr, length);
  if (r == nullptr) {
    errno = ENOMEM;
    return -1;
  }
  absl::Status s = r->rt->Sync(addr, length);
  return s.ok() ? 0 : Fail(s);
}

int umap_handle_signal(int sig, void* info, void* ucontext) {
  return ::umap::runtime::DispatchFaultSignal(sig, static_cast<siginfo_t*>(info), ucontext) ? 1 : 0;
}

int umap_touch(void* addr, size_t length, int write) {
  if (length == 0) return 0;
  umap_runtime* r = FindRuntime(addr, length);
  if (r == nullptr) {
    errno = ENOMEM;
    return -1;
  }
  // One access per page: a read, or a read-modify-write of the same byte (the page becomes
  // dirty, as a write(2)-from-the-kernel into it would make it).
  const size_t page = 4096;
  volatile char* p = static_cast<volatile char*>(addr);
  const uintptr_t first = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + length;
  for (uintptr_t a = std::max(first, reinterpret_cast<uintptr_t>(addr)); a < end;
       a = (a & ~(page - 1)) + page) {
    volatile char* q = p + (a - reinterpret_cast<uintptr_t>(addr));
    if (write) {
      *q = *q;
    } else {
      (void)*q;
    }
  }
  return 0;
}

int umap_get_stats(umap_runtime* r, umap_stats* out) {
  if (r == nullptr || out == nullptr) {
    errno = EINVAL;
    return -1;
  }
  *out = r->rt->Stats();
  return 0;
}

int umap_get_mapping_stats(const void* addr, umap_mapping_stats* out) {
  if (out == nullptr) {
    errno = EINVAL;
    return -1;
  }
  umap_runtime* r = FindRuntime(const_cast<void*>(addr), 1);
  if (r == nullptr || !r->rt->MappingStats(addr, out)) {
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

}  // extern "C"

}  // namespace umap::c_api
