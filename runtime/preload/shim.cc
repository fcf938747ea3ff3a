#include "runtime/preload/shim.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/keep_locks.h"
#include "base/log.h"
#include "base/round.h"
#include "runtime/options.h"
#include "runtime/preload/range_set.h"
#include "runtime/preload/real_calls.h"
#include "runtime/preload/umap_c_api.h"
#include "runtime/umap_c_internal.h"

namespace umap::preload {

using c_api::umap_config_init;
using c_api::umap_ex;
using c_api::umap_get_stats;
using c_api::umap_runtime_create;
using c_api::umap_runtime_destroy;
using c_api::umsync;
using c_api::uunmap;

thread_local bool ReentryGuard::inside_ = false;

std::string FdPath(int fd) {
  char link[64], path[4096];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : absl::StrCat("fd ", fd);
}
std::atomic<Shim*> Shim::active_{nullptr};
std::atomic<Shim*> Shim::adopt_{nullptr};

namespace {

umap_config LoadConfig(int* err) {
  umap_config c;
  *err = umap_config_init(&c) == 0 ? 0 : errno;
  return c;
}

// A chunk of a kernel access must stay resident while the call runs: a quarter of the
// cache, at most 16 MiB. With lazy sizing the cache may be as small as its start.
size_t ChunkBytes(const umap_config& c, size_t page) {
  const size_t cache = c.cache_bytes != 0 && !c.lazy_sizing
                           ? c.cache_bytes
                           : umap::runtime::RuntimeOptions().lazy_start_bytes;
  return std::max(page, std::min<size_t>(16u << 20, cache / 4) / page * page);
}

// Flags the kernel ignores for file mappings; Umap is not asked about them.
constexpr int kIgnoredFlags = MAP_NONBLOCK | MAP_STACK | MAP_DENYWRITE | MAP_EXECUTABLE;

int Fail(int err) {
  errno = err;
  return -1;
}

}  // namespace

Shim::Shim()
    : page_(static_cast<size_t>(::sysconf(_SC_PAGESIZE))),
      pid_(::getpid()),
      filter_(::getenv("UMAP_PATHS"), ::getenv("UMAP_FSTYPES")),
      config_(LoadConfig(&runtime_errno_)),
      kernel_access_(&registry_, ChunkBytes(config_, page_)) {
  if (const char* v = ::getenv("UMAP_PRELOAD_FALLBACK")) {
    if (std::strcmp(v, "kernel") == 0) {
      fallback_ = Fallback::kKernel;
    } else if (std::strcmp(v, "refuse") != 0) {
      UMAP_LOG(kError, "UMAP_PRELOAD_FALLBACK=", v, " must be refuse or kernel; using refuse");
    }
  }
  if (filter_.empty()) {
    UMAP_LOG(kInfo,
             "libumap_preload: neither UMAP_PATHS nor UMAP_FSTYPES is set; every "
             "mapping goes to the kernel");
  }
}

void Shim::Install() {
  ResolveRealCalls();
  static std::once_flag once;
  std::call_once(once, [] {
    ReentryGuard guard;
    Shim* shim = new Shim();  // never destroyed: calls arrive until the process is gone
    if (int err = ::pthread_atfork(nullptr, nullptr, &Shim::ChildBeforeRuntime); err != 0) {
      UMAP_LOG(kError, "libumap_preload: pthread_atfork failed (", std::strerror(err),
               "); disabled: every mapping goes to the kernel");
      return;
    }
    active_.store(shim, std::memory_order_release);
  });
}

umap_runtime* Shim::Runtime() {
  runtime_touched_.store(true, std::memory_order_seq_cst);
  std::lock_guard<std::mutex> l(runtime_mu_);
  if (runtime_ == nullptr && runtime_errno_ == 0) {
    sigbus_.BeforeRuntime();
    runtime_ = umap_runtime_create(&config_);
    // After the runtime's own fork handlers (fork() runs prepare handlers in reverse order
    // of registration, child handlers in order): the mappings are written back while the
    // runtime still runs, and the child's view is made once its locks are free again.
    static std::once_flag fork_handlers;
    std::call_once(fork_handlers, [] {
      c_api::SetCheckpointHooks({[] {
                                   if (Shim* s = Get()) s->nodes().ReleaseForCheckpoint();
                                 },
                                 [] {
                                   if (Shim* s = Get()) s->nodes().RelockAfterCheckpoint();
                                 }});
      if (int err = ::pthread_atfork(&Shim::BeforeForkInParent, nullptr, &Shim::AfterForkInChild)) {
        UMAP_LOG(kError, "libumap_preload: pthread_atfork failed (", std::strerror(err),
                 "): a fork() child of this process cannot touch its Umap mappings (SIGSEGV)");
      }
    });
    umap_stats st;
    if (runtime_ != nullptr && umap_get_stats(runtime_, &st) == 0 &&
        st.fault_mode == UMAP_FAULT_SIGNAL) {
      sigbus_.Activate();  // Umap's SIGBUS handler is installed now: keep it first
    }
    if (runtime_ == nullptr) {
      runtime_errno_ = errno ? errno : EINVAL;
      UMAP_LOG(kError, "libumap_preload: cannot start the Umap runtime (",
               std::strerror(runtime_errno_), "); the log above says why");
    }
  }
  if (runtime_ == nullptr) errno = runtime_errno_;
  return runtime_;
}

void* Shim::Mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  const int type = flags & MAP_TYPE;
  const bool umap_kind = fd >= 0 && (flags & MAP_ANONYMOUS) == 0 &&
                         (type == MAP_SHARED || type == MAP_SHARED_VALIDATE) &&
                         (prot & PROT_EXEC) == 0 && (prot & (PROT_READ | PROT_WRITE)) != 0;
  if (umap_kind && !exiting_.load(std::memory_order_acquire) && filter_.Matches(fd)) {
    return MapWithUmap(addr, len, prot, flags, fd, off);
  }
  // A fixed mapping replaces what it covers: whole Umap mappings are unmapped first (with
  // write-back), a part of one is refused.
  if ((flags & MAP_FIXED) != 0 &&
      ReleaseRange(reinterpret_cast<uintptr_t>(addr), len, "mmap(MAP_FIXED)") != 0) {
    return MAP_FAILED;
  }
  return RealMmap(addr, len, prot, flags, fd, off);
}

void* Shim::MapWithUmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (len == 0 || off < 0 || static_cast<size_t>(off) % page_ != 0) {
    errno = EINVAL;  // what the kernel says
    return MAP_FAILED;
  }
  const size_t bs = config_.block_size;
  const size_t delta = static_cast<size_t>(off) % bs;
  const bool fixed = (flags & (MAP_FIXED | MAP_FIXED_NOREPLACE)) != 0;
  if (fixed && (delta != 0 || RoundUp(len, bs) != RoundUp(len, page_))) {
    // Umap reserves whole blocks: a fixed mapping would also take addresses the caller did
    // not give it.
    UMAP_LOG(kWarn, "libumap_preload: mmap(MAP_FIXED) of ", FdPath(fd), " at offset ", off,
             " length ", len, " does not start and end on Umap's block size ", bs);
    return Refused(addr, len, prot, flags, fd, off, EINVAL);
  }
  if ((flags & MAP_FIXED) != 0 &&
      ReleaseRange(reinterpret_cast<uintptr_t>(addr), len, "mmap(MAP_FIXED)") != 0) {
    return MAP_FAILED;
  }
  umap_runtime* rt = Runtime();
  if (rt == nullptr) return Refused(addr, len, prot, flags, fd, off, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) return Refused(addr, len, prot, flags, fd, off, errno);
  // The process's other mappings of the file: one copy of each block (shim_views.cc).
  switch (void* view; SameFile(st, fd, off, len, prot, fixed, &view)) {
    case SameFileAnswer::kNone:
      break;
    case SameFileAnswer::kView:
      return view;
    case SameFileAnswer::kKernel:
      return RealMmap(addr, len, prot, flags, fd, off);
    case SameFileAnswer::kFailed:
      return MAP_FAILED;
  }
  const FileKey key{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  // A small file the program locks and maps writable is how programs share memory between
  // processes (LMDB's lock.mdb, SQLite's -shm): their stores must reach each other at once,
  // which per-process caches cannot do, and the file is too small for a cache to matter.
  if ((prot & PROT_WRITE) != 0 && static_cast<uint64_t>(st.st_size) < kSharedMemoryFileBytes &&
      ProcessHoldsPosixLock(fd)) {
    std::lock_guard<std::mutex> l(views_mu_);
    Decline(key,
            "the program locks it and maps it writable, and it is small: memory shared "
            "between processes, which the kernel's page cache gives and per-process caches "
            "cannot",
            FdPath(fd));
    nodes_.NowKernel(key);
    return RealMmap(addr, len, prot, flags, fd, off);
  }
  // The node's other processes' mappings of the file (node_files.h).
  switch (nodes_.BeforeMap(key, fd, (prot & PROT_WRITE) != 0)) {
    case NodeFiles::Answer::kUmap:
      break;
    case NodeFiles::Answer::kKernel: {
      std::lock_guard<std::mutex> l(views_mu_);
      Decline(key, "the node's other processes use it in a way per-process caches cannot follow",
              FdPath(fd));
      return RealMmap(addr, len, prot, flags, fd, off);
    }
    case NodeFiles::Answer::kFailed:
      return MAP_FAILED;
  }
  const int own_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own_fd < 0) return Refused(addr, len, prot, flags, fd, off, errno);
  void* hint = fixed ? addr : (addr != nullptr ? static_cast<char*>(addr) - delta : nullptr);
  void* p = umap_ex(rt, hint, len + delta, prot, flags & ~kIgnoredFlags, fd,
                    off - static_cast<off_t>(delta));
  if (p == MAP_FAILED) {
    const int err = errno;
    CloseKeepingLocks(own_fd);
    return Refused(addr, len, prot, flags, fd, off, err);
  }
  ShimMapping m;
  m.base = reinterpret_cast<uintptr_t>(p);
  m.user = m.base + delta;
  m.user_len = len;
  m.map_len = len + delta;
  m.region_len = RoundUp(len + delta, bs);
  m.map_offset = static_cast<uint64_t>(off) - delta;
  m.file_size = static_cast<uint64_t>(st.st_size);
  m.dev = static_cast<uint64_t>(st.st_dev);
  m.ino = static_cast<uint64_t>(st.st_ino);
  m.prot = prot;
  m.fd = own_fd;
  if (registry_.Add(m) < 0) {
    if (uunmap(p, m.map_len) != 0) {
      UMAP_LOG(kError, "libumap_preload: unmapping ", FdPath(fd),
               " failed: ", std::strerror(errno));
    }
    CloseKeepingLocks(own_fd);
    UMAP_LOG(kError, "libumap_preload: more than ", MappingRegistry::kCapacity, " Umap mappings");
    errno = ENOMEM;
    return MAP_FAILED;
  }
  RegisterAtExit((prot & PROT_WRITE) != 0);
  UMAP_LOG(kInfo, "libumap_preload: Umap serves ", FdPath(fd), " [", off, ", ",
           static_cast<uint64_t>(off) + len, ") at 0x", absl::Hex(m.user),
           (prot & PROT_WRITE) ? " (writable)" : " (read-only)");
  return reinterpret_cast<void*>(m.user);
}

void* Shim::Refused(void* addr, size_t len, int prot, int flags, int fd, off_t off, int err) {
  const bool kernel = fallback_ == Fallback::kKernel;
  UMAP_LOG(kWarn, "libumap_preload: Umap cannot map ", FdPath(fd), " (offset ", off, ", length ",
           len, "): ", std::strerror(err),
           kernel ? "; mapping it with the kernel instead (UMAP_PRELOAD_FALLBACK=kernel)"
                  : "; mmap fails (UMAP_PRELOAD_FALLBACK=kernel maps it with the kernel)");
  if (kernel) return RealMmap(addr, len, prot, flags, fd, off);
  errno = err;
  return MAP_FAILED;
}

int Shim::UnmapEntry(int index, const ShimMapping& m) {
  if (uunmap(reinterpret_cast<void*>(m.base), m.map_len) != 0) {
    const int err = errno;
    registry_.Release(index);
    UMAP_LOG(kError, "libumap_preload: write-back of ", FdPath(m.fd),
             " failed; the mapping stays (nothing is lost): ", std::strerror(err));
    return Fail(err);
  }
  CloseKeepingLocks(m.fd);  // the program's POSIX locks on the file stay
  registry_.Remove(index);
  AfterUnmap(m.dev, m.ino);
  return 0;
}

void Shim::RegisterAtExit(bool writable) {
  // Registered after the first mapping, that is after the runtime and the libraries it
  // uses have set up their own static state: exit() runs handlers in reverse order, so this
  // one runs while that state still exists. The journal (RocksDB, whose static state goes
  // with an exit handler of its own) opens with the first writable mapping, which may come
  // later: then once more. AtExit runs its work once.
  std::atomic<bool>& done = writable ? atexit_after_journal_ : atexit_registered_;
  if (done.exchange(true)) return;
  atexit_registered_.store(true);
  if (::atexit(&Shim::AtExit) != 0) {
    UMAP_LOG(kWarn,
             "libumap_preload: atexit failed; mappings left at exit are not written "
             "back (the last umsync'ed state stays)");
  }
}

void Shim::AtExit() {
  Shim* s = Get();
  // A vfork() child shares the parent's memory (and this object): its _exit must not unmap
  // the parent's mappings.
  if (s == nullptr || ::getpid() != s->pid_.load(std::memory_order_relaxed)) return;
  ReentryGuard guard;
  s->exiting_.store(true, std::memory_order_release);
  s->nodes_.Stop();  // no callback into the mappings while they go
  s->runtime_touched_.store(true, std::memory_order_seq_cst);
  s->registry_.ForEachLive([&](int index, const ShimMapping& m) {
    if (s->registry_.Claim(index, m)) s->UnmapEntry(index, m);  // logs its own failure
  });
  std::lock_guard<std::mutex> l(s->runtime_mu_);
  if (s->runtime_ != nullptr && umap_runtime_destroy(s->runtime_) != 0) {
    UMAP_LOG(kError, "libumap_preload: shutting the runtime down failed: ", std::strerror(errno));
  }
  s->runtime_ = nullptr;
  s->runtime_errno_ = ESHUTDOWN;
}

}  // namespace umap::preload
