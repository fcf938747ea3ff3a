// Shim: the LD_PRELOAD shim's state and its mmap-family policy (docs/preload.md).
//
// A file mapping the application asks for goes to Umap when it is MAP_SHARED, readable,
// not executable, and its file passes the PathFilter (UMAP_PATHS / UMAP_FSTYPES); every
// other call goes to libc untouched. For Umap mappings:
//   mmap      umap_ex() from the offset rounded down to the block size; the application
//             gets the interior pointer. If Umap refuses the mapping the call fails with
//             Umap's errno (logged), or with UMAP_PRELOAD_FALLBACK=kernel goes to the kernel.
//   munmap    a range that covers whole Umap mappings unmaps them with write-back
//             (uunmap); a range that cuts a Umap mapping is refused with EINVAL (logged),
//             and nothing in it is unmapped. A write-back error fails munmap with its errno
//             and keeps the mapping (nothing is lost).
//   msync     MS_SYNC is umsync() of the overlapped part; MS_ASYNC does nothing (as on
//             Linux, where it schedules nothing either); MS_INVALIDATE is ignored (one cache
//             per process: there is no other copy to invalidate).
//   mremap    with MREMAP_MAYMOVE: umsync, a new mapping of the new length, uunmap of the
//             old one; without it (resizing in place) ENOMEM; MREMAP_FIXED/DONTUNMAP EINVAL.
//   madvise   advice about residency (NORMAL, RANDOM, SEQUENTIAL, WILLNEED, DONTNEED,
//             COLD, PAGEOUT, [NO]HUGEPAGE, DONTDUMP, DODUMP, DONTFORK) returns 0 and
//             changes nothing: Umap's cache decides residency, and dropping pages behind
//             its back would lose data. Anything else (FREE, REMOVE, DOFORK, WIPEONFORK,
//             MERGEABLE, ...) is refused with EINVAL.
//   mprotect  the mapping's own protection returns 0; any change is refused (EACCES to add
//             PROT_WRITE, EINVAL otherwise).
//   MAP_FIXED over part of a Umap mapping is refused (EINVAL); over whole ones it unmaps
//   them first.
// fork(): Umap mappings are not inherited (the runtime's threads do not exist in the
// child). The child gets, at the same addresses, a plain read-only MAP_SHARED mapping of
// each file: it reads what the file holds (the parent's synced data, not its unsynced
// changes), and a write raises SIGSEGV. Never silent zeros. Once the parent has started a
// runtime, the child's own calls all go to libc; a child forked before that keeps the shim
// and starts a runtime of its own when it maps a file.
// SIGBUS: in signal fault mode the program's own SIGBUS handlers are chained behind Umap's
// (SigbusChain).
// Exit: a process that calls exit() has its mappings unmapped with write-back, as the
// kernel writes back a MAP_SHARED mapping, and its runtime shut down. A process that dies
// by a signal or _exit() leaves its journal for umap-recover.
//
// Re-entry: while a thread is inside the shim (and so inside Umap, RocksDB, the runtime's
// own mmap calls), its interposed calls go straight to libc (ReentryGuard).
//
// Thread safety: every method may be called from any thread.
#ifndef UMAP_RUNTIME_PRELOAD_SHIM_H_
#define UMAP_RUNTIME_PRELOAD_SHIM_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "runtime/preload/file_api.h"
#include "runtime/preload/kernel_access.h"
#include "runtime/preload/mapping_registry.h"
#include "runtime/preload/node_files.h"
#include "runtime/preload/path_filter.h"
#include "runtime/preload/sigbus_chain.h"
#include "umap/umap_types.h"

namespace umap::preload {

// Per-thread: set while the thread runs shim code; interposed calls then go to libc.
class ReentryGuard {
 public:
  ReentryGuard() : was_(inside_) { inside_ = true; }
  ~ReentryGuard() { inside_ = was_; }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;
  static bool active() { return inside_; }

 private:
  // initial-exec: reading it never calls __tls_get_addr (which may allocate).
  static thread_local bool inside_ __attribute__((tls_model("initial-exec")));
  const bool was_;
};

// The path of the file open on `fd` (for log lines), or "fd N".
std::string FdPath(int fd);

class Shim final : private NodeFiles::Owner {
 public:
  enum class Fallback { kRefuse, kKernel };

  // Builds the process's shim from the environment (UMAP_PATHS, UMAP_FSTYPES,
  // UMAP_PRELOAD_FALLBACK and the runtime's UMAP_* variables). Called once, from the
  // library's constructor; the object is never destroyed (calls arrive during exit).
  static void Install();
  // The shim, or null before Install() (or in a fork() child until it adopted its
  // mappings: AdoptInChild).
  static Shim* Get() { return active_.load(std::memory_order_acquire); }
  // A fork() child's first interposed call (from a thread not inside the shim): the
  // mappings it inherited, which the fork left as the kernel's read-only views of their
  // files, become Umap's again in a runtime of the child's own, at the same addresses,
  // read-only (docs/preload.md, "fork"). Null (nothing to adopt, or another thread is
  // adopting: its calls go to libc meanwhile) or the shim.
  static Shim* AdoptInChild() {
    return adopt_.load(std::memory_order_relaxed) == nullptr ? nullptr : Adopt();
  }

  void* Mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off);
  int Munmap(void* addr, size_t len);
  int Msync(void* addr, size_t len, int flags);
  void* Mremap(void* old_addr, size_t old_len, size_t new_len, int flags, void* new_addr);
  int Madvise(void* addr, size_t len, int advice);
  int Mprotect(void* addr, size_t len, int prot);

  const KernelAccess& kernel_access() const { return kernel_access_; }
  const FileApi& files() const { return files_; }
  NodeFiles& nodes() { return nodes_; }
  const MappingRegistry& registry() const { return registry_; }
  const PathFilter& filter() const { return filter_; }
  SigbusChain& sigbus() { return sigbus_; }

 private:
  Shim();
  // The runtime, created on the first Umap mapping; null (errno set) if that failed.
  umap_runtime* Runtime();
  // A file mapping that qualifies for Umap.
  void* MapWithUmap(void* addr, size_t len, int prot, int flags, int fd, off_t off);
  // The policy when Umap refused a mapping (errno = why).
  void* Refused(void* addr, size_t len, int prot, int flags, int fd, off_t off, int err);
  // Unmaps the shim mappings inside [addr, addr+len) for munmap or a MAP_FIXED over them;
  // EINVAL (nothing done) when one is only partly inside. Returns 0 or -1 with errno.
  int ReleaseRange(uintptr_t addr, size_t len, const char* what);
  // Unmaps one claimed entry with write-back and removes it; 0 or -1 with errno.
  int UnmapEntry(int index, const ShimMapping& m);

  // --- several mappings of one file (shim_views.cc) ---
  // The kernel gives a process one copy of each page of a file, however many times it maps
  // it; Umap's cache is one per mapping. So a second mmap() of bytes that a Umap mapping of
  // the file already holds, with a protection it allows, gets a view into that mapping (a
  // pointer to the same cache: kView, *view set); one that overlaps such a mapping any
  // other way hands the file's Umap mappings to the kernel (Runtime::HandOff: same
  // addresses, same bytes) and is mapped by the kernel too (kKernel), and so is every later
  // mapping of the file: all its mappings are then the kernel's, one copy again (logged
  // once, naming the file and why). kFailed: the hand-off failed (errno set; nothing lost).
  enum class SameFileAnswer { kNone, kView, kKernel, kFailed };
  SameFileAnswer SameFile(const struct stat& st, int fd, off_t off, size_t len, int prot,
                          bool fixed, void** view);
  // The file is the kernel's for good (SameFile); false when the table is full.
  // REQUIRES: views_mu_.
  bool Decline(const FileKey& key, const char* why, const std::string& path);
  bool Declined(const FileKey& key);
  // Hands every Umap mapping of the file to the kernel; 0 or -1 with errno.
  // REQUIRES: views_mu_.
  int HandOffFile(uint64_t dev, uint64_t ino);
  // NodeFiles::Owner (shim_views.cc and shim_node.cc).
  int GiveToKernel(const FileKey& key, const char* why, const std::string& path) override;
  void ChangedElsewhere(const FileKey& key, const struct stat& now) override;
  int StatOf(const FileKey& key, struct stat* out) override;
  void ExclusiveOfOwnWrites(absl::FunctionRef<void()> fn) override {
    std::unique_lock<std::shared_mutex> l(own_writes_mu_);
    fn();
  }

 public:
  // Held (shared) by a file API call on a mapped file from before its write to after the
  // mappings took it in (interpose_io.cc); exclusively by NodeFiles' checks.
  std::shared_mutex& own_writes_mu() { return own_writes_mu_; }

 private:
  std::shared_mutex own_writes_mu_;
  // The last Umap mapping of a file went: NodeFiles::Unmapped.
  void AfterUnmap(uint64_t dev, uint64_t ino);
  // Views beyond a mapping's own (the first mmap() that made it): a registry index and the
  // range the program got. A mapping is unmapped when its own view and all others are gone.
  struct View {
    int index = -1;  // -1: free
    uintptr_t user = 0;
    size_t len = 0;
  };
  static constexpr int kMaxViews = 1024;
  // Files smaller than this that the program locks and maps writable are shared memory.
  static constexpr uint64_t kSharedMemoryFileBytes = uint64_t{1} << 20;
  static constexpr int kMaxDeclined = 256;
  std::mutex views_mu_;  // views_, own_gone_, declined_: mmap/munmap paths only
  View views_[kMaxViews];
  bool own_gone_[MappingRegistry::kCapacity] = {};
  FileKey declined_[kMaxDeclined];
  int declined_count_ = 0;
  // Counts (does not allocate) the views of registry entry `index`.
  int ViewsOf(int index) const;
  void RegisterAtExit(bool writable);
  static void AtExit();

 public:
  // _exit(2)/_Exit: what exit() does through AtExit (every mapping written back, the
  // runtime shut down), for a process that ends without running atexit handlers.
  static void BeforeExit() { AtExit(); }

 private:
  // A child forked before the runtime started keeps the shim, and is its owner now.
  static void ChildBeforeRuntime();
  static void BeforeForkInParent();
  static void AfterForkInChild();
  static Shim* Adopt();
  // Re-makes each inherited mapping with the child's runtime; false leaves it the kernel's.
  bool AdoptMapping(int index, const ShimMapping& m);

  static std::atomic<Shim*> active_;
  static std::atomic<Shim*> adopt_;  // a fork() child's shim, until AdoptInChild ran

  const size_t page_;
  // The process the shim belongs to; a child forked before the runtime started keeps the
  // shim and becomes its owner. A vfork() child (same memory, another pid) never is.
  std::atomic<pid_t> pid_;
  PathFilter filter_;
  Fallback fallback_ = Fallback::kRefuse;
  umap_config config_{};
  MappingRegistry registry_;
  KernelAccess kernel_access_;
  NodeFiles nodes_{this};
  FileApi files_{&registry_, &nodes_};
  SigbusChain sigbus_;

  std::mutex runtime_mu_;
  umap_runtime* runtime_ = nullptr;  // guarded by runtime_mu_; lives until AtExit
  int runtime_errno_ = 0;            // guarded by runtime_mu_: why creation failed
  std::atomic<bool> exiting_{false};
  // Set before runtime_mu_ is first taken: a fork() child that sees it false knows no thread
  // held that lock or any runtime state at the fork, so it may keep using the shim.
  std::atomic<bool> runtime_touched_{false};
  std::atomic<bool> atexit_registered_{false};
  std::atomic<bool> atexit_after_journal_{false};
};

}  // namespace umap::preload

#endif  // UMAP_RUNTIME_PRELOAD_SHIM_H_
