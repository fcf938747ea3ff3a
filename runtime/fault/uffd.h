// Uffd: the userfaultfd file descriptor and its ioctls; with region.cc the only code that
// issues userfaultfd or mmap system calls.
//
// Thread safety: every method may be called from any thread concurrently (the kernel
// serialises what needs it). Methods return errno values (0 = success) rather than Status
// because they sit on the fault path, where building a Status message would allocate; the
// slow paths that report errors wrap them with PosixError.
#ifndef UMAP_RUNTIME_FAULT_UFFD_H_
#define UMAP_RUNTIME_FAULT_UFFD_H_

#include <linux/userfaultfd.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace umap::runtime {

// How the process got its userfaultfd, best first:
//   kSyscall       userfaultfd(2) with kernel faults served (root, CAP_SYS_PTRACE, or
//                  vm.unprivileged_userfaultfd = 1);
//   kDevice        /dev/userfaultfd (the same features; access is the device file's mode,
//                  which a site can grant to a group);
//   kUserModeOnly  userfaultfd(UFFD_USER_MODE_ONLY): any user, but faults taken inside the
//                  kernel (read(2) into a non-resident page, for example) fail with EFAULT
//                  instead of being served.
enum class UffdAccess { kSyscall = 0, kDevice = 1, kUserModeOnly = 2 };
const char* UffdAccessName(UffdAccess a);

class Uffd {
 public:
  // Opens a non-blocking, close-on-exec userfaultfd, the best way the process may (see
  // UffdAccess), and negotiates PAGEFAULT_FLAG_WP and THREAD_ID, plus POISON when the
  // kernel has it and SIGBUS when `sigbus` (faults then raise SIGBUS in the faulting thread
  // instead of queueing messages). Fails with the errno of the last attempt when no way
  // works, saying what a site can grant.
  static absl::StatusOr<std::unique_ptr<Uffd>> Open(bool sigbus);
  ~Uffd();

  int fd() const { return fd_; }
  bool has_poison() const { return (features_ & kPoisonBit) != 0; }
  bool sigbus() const { return (features_ & UFFD_FEATURE_SIGBUS) != 0; }
  uint64_t features() const { return features_; }
  UffdAccess access() const { return access_; }

  // Registers [addr, addr+len) for MISSING faults, and WP faults when `write_protect`.
  int Register(void* addr, size_t len, bool write_protect);
  int Unregister(void* addr, size_t len);

  // Installs len bytes from src at dst (page-aligned); with `write_protect` the pages are
  // installed read-only so the first write faults. Wakes the faulting threads unless
  // `dont_wake`. EEXIST when a page is already there.
  int Copy(void* dst, const void* src, size_t len, bool write_protect, bool dont_wake = false);
  // Sets or clears write protection on a range; clearing wakes threads blocked on it.
  int WriteProtect(void* addr, size_t len, bool protect);
  int Wake(void* addr, size_t len);
  // Makes accesses to the (missing) pages raise SIGBUS; wakes the blocked threads.
  int Poison(void* addr, size_t len);

  // Reads up to `max` pending messages without blocking; returns the count, 0 when none,
  // or -errno.
  int Read(uffd_msg* msgs, int max);

 private:
  static constexpr uint64_t kPoisonBit = 1ull << 14;
  Uffd(int fd, uint64_t features, UffdAccess access)
      : fd_(fd), features_(features), access_(access) {}
  const int fd_;
  const uint64_t features_;
  const UffdAccess access_;
};

// Address-space helpers (the only mmap/madvise calls of the runtime).
// Reserves an anonymous private region for a mapping: never inherited by fork() children
// (MADV_DONTFORK), no transparent huge pages. `fixed` maps exactly at addr.
absl::StatusOr<char*> ReserveRegion(void* addr, size_t len, int prot, bool fixed);
void ReleaseRegion(char* base, size_t len);
// Changes the protection of a reserved region (a quiesce makes it PROT_NONE, so that an
// access faults into Umap's SIGSEGV handler instead of finding zero pages once the range is
// no longer registered). Returns 0 or the errno.
int ProtectRegion(char* base, size_t len, int prot);
// Page-aligned private buffers of the runtime itself (staging, stash): allocated once, so
// the fault path never allocates. Null when the memory is not there.
char* MapBuffer(size_t len);
void UnmapBuffer(char* p, size_t len);
// Drops the pages of [addr, addr+len) (MADV_DONTNEED): the next access faults again.
int DiscardPages(void* addr, size_t len);
// Changes the protection of part of a region (mprotect); 0 or the errno.
int ProtectPages(void* addr, size_t len, int prot);

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_FAULT_UFFD_H_
