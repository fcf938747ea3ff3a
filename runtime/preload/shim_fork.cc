// Shim: fork() (docs/preload.md, "fork, exec, exit").
//
// A forked child gets no Umap mapping from the kernel (the runtime's regions are
// MADV_DONTFORK, and its threads do not exist in the child). What it must see is the
// parent's data as of the fork, so:
//   before the fork (parent): every writable Umap mapping is written back (umsync), so the
//     file holds what the parent's mappings showed;
//   in the child, at once: each mapping becomes the kernel's read-only MAP_SHARED view of
//     its file at the same address (async-signal-safe work only);
//   in the child, at its first interposed call from a single-threaded state: each becomes
//     a read-only Umap mapping again, in a runtime of the child's own, within the same
//     memory budget (AdoptInChild). A child with threads by then keeps the kernel's views.
// A store by the child into such a mapping raises SIGSEGV (logged by the runtime's write
// refusals once adopted): per-process caches cannot show one process's stores to another.
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/keep_locks.h"
#include "base/log.h"
#include "runtime/fault/fault_signal.h"
#include "runtime/preload/real_calls.h"
#include "runtime/preload/shim.h"
#include "runtime/preload/umap_c_api.h"

namespace umap::preload {
namespace {

// Threads of this process (entries of /proc/self/task), or -1.
int ThreadCount() {
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

}  // namespace

void Shim::BeforeForkInParent() {
  Shim* s = Get();
  if (s == nullptr || ReentryGuard::active() ||
      !s->runtime_touched_.load(std::memory_order_seq_cst) || s->registry_.live() == 0) {
    return;
  }
  ReentryGuard guard;
  s->registry_.ForEachLive([](int, const ShimMapping& m) {
    if (!m.writable()) return;
    if (c_api::umsync(reinterpret_cast<void*>(m.base), m.map_len, MS_SYNC) != 0) {
      // fork() cannot fail for it: the child may see what the file held before.
      UMAP_LOG(kError, "libumap_preload: writing a mapping back before fork() failed (",
               std::strerror(errno),
               "); the child may read older bytes of it than the "
               "parent shows");
    }
  });
}

void Shim::ChildBeforeRuntime() {
  // A parent that never started a runtime has no Umap state the child could inherit
  // half-made: the child keeps the shim, as its own.
  Shim* s = active_.load(std::memory_order_acquire);
  if (s != nullptr && !s->runtime_touched_.load(std::memory_order_seq_cst)) {
    s->pid_.store(::getpid(), std::memory_order_relaxed);
  }
}

void Shim::AfterForkInChild() {
  // Runs in the child of fork(), where only async-signal-safe calls are allowed and the
  // runtime's threads do not exist: no locks, no allocation.
  Shim* s = active_.load(std::memory_order_acquire);
  if (s == nullptr || !s->runtime_touched_.load(std::memory_order_seq_cst)) return;
  // Every call goes to libc until the child adopts its mappings; each Umap mapping is a
  // plain read-only view of its file meanwhile. SIGBUS goes back to the program's own
  // disposition: the parent's runtime (copied into the child, its threads gone) must never
  // serve a fault.
  active_.store(nullptr, std::memory_order_release);
  s->sigbus_.RestoreProgramDisposition();
  runtime::FaultSignalDispositionRestored();
  s->registry_.ForEachLive([](int, const ShimMapping& m) {
    // If this fails the range stays unmapped: SIGSEGV on access, never zeros.
    RealMmap(reinterpret_cast<void*>(m.base), m.map_len, PROT_READ, MAP_SHARED | MAP_FIXED, m.fd,
             static_cast<off_t>(m.map_offset));
  });
  if (s->registry_.live() > 0) adopt_.store(s, std::memory_order_release);
}

Shim* Shim::Adopt() {
  Shim* s = adopt_.exchange(nullptr, std::memory_order_acq_rel);
  if (s == nullptr) return Get();
  ReentryGuard guard;
  // Fresh state for the child's own runtime: the parent's lives on in this memory, untouched.
  new (&s->runtime_mu_) std::mutex();
  new (&s->views_mu_) std::mutex();
  s->runtime_ = nullptr;
  s->runtime_errno_ = 0;
  s->runtime_touched_.store(false, std::memory_order_relaxed);
  s->pid_.store(::getpid(), std::memory_order_relaxed);
  s->nodes_.AfterForkInChild();
  if (ThreadCount() != 1) {
    // Another thread may be reading a mapping right now; replacing it under that thread
    // could show it a moment of an empty range. The kernel's views stay (correct bytes).
    UMAP_LOG(kWarn,
             "libumap_preload: this fork() child has threads already; the kernel keeps "
             "serving the ",
             s->registry_.live(), " mappings it inherited");
    s->registry_.ForEachLive([&](int index, const ShimMapping& m) {
      if (s->registry_.Claim(index, m)) s->registry_.Remove(index);
    });
    active_.store(s, std::memory_order_release);
    return s;
  }
  s->registry_.ForEachLive([&](int index, const ShimMapping& m) {
    if (!s->registry_.Claim(index, m)) return;
    if (!s->AdoptMapping(index, m)) {
      s->registry_.Remove(index);
      CloseKeepingLocks(m.fd);
    }
  });
  active_.store(s, std::memory_order_release);
  return s;
}

bool Shim::AdoptMapping(int index, const ShimMapping& m) {
  umap_runtime* rt = Runtime();
  void* p = rt == nullptr
                ? MAP_FAILED
                : c_api::umap_ex(rt, reinterpret_cast<void*>(m.base), m.map_len, PROT_READ,
                                 MAP_SHARED | MAP_FIXED, m.fd, static_cast<off_t>(m.map_offset));
  if (p != reinterpret_cast<void*>(m.base)) {
    // The range is still the kernel's read-only view, or, if Umap's attempt replaced it,
    // map that view again: never an empty range.
    if (p == MAP_FAILED) {
      RealMmap(reinterpret_cast<void*>(m.base), m.map_len, PROT_READ, MAP_SHARED | MAP_FIXED, m.fd,
               static_cast<off_t>(m.map_offset));
    }
    UMAP_LOG(kWarn, "libumap_preload: declining ", FdPath(m.fd),
             ": this fork() child cannot "
             "map it with Umap again (",
             std::strerror(errno), "); the kernel serves it");
    return false;
  }
  registry_.SetProt(index, PROT_READ);
  registry_.Release(index);
  nodes_.Rewatch({m.dev, m.ino}, m.fd);  // the parent's later write-backs are seen here
  UMAP_LOG(kInfo, "libumap_preload: Umap serves ", FdPath(m.fd), " [", m.map_offset, ", ",
           m.map_offset + m.map_len, ") at 0x", absl::Hex(m.user),
           " (read-only, inherited by this fork() child)");
  RegisterAtExit(/*writable=*/false);
  return true;
}

}  // namespace umap::preload
