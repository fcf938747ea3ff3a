#include "runtime/uffd.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "base/posix_error.h"
#include "runtime/uffd_compat.h"

namespace umap::runtime {
namespace {

inline int IoctlErrno(int fd, unsigned long req, void* arg) {
  for (;;) {
    if (::ioctl(fd, req, arg) == 0) return 0;
    if (errno != EINTR) return errno;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Uffd>> Uffd::Open() {
  int fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0) {
    int err = errno;
    return PosixError(err,
                      "userfaultfd() failed: Umap needs userfaultfd (kernel >= 5.7 with "
                      "CONFIG_USERFAULTFD; unprivileged use needs vm.unprivileged_userfaultfd=1 "
                      "or CAP_SYS_PTRACE)");
  }
  // Ask for everything we can use; drop optional bits the kernel refuses.
  const uint64_t required = UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_PAGEFAULT_FLAG_WP;
  uint64_t wanted = required | UFFD_FEATURE_POISON;
  for (int attempt = 0; attempt < 2; ++attempt) {
    struct uffdio_api api = {};
    api.api = UFFD_API;
    api.features = wanted;
    if (::ioctl(fd, UFFDIO_API, &api) == 0) {
      return std::unique_ptr<Uffd>(new Uffd(fd, api.features));
    }
    int err = errno;
    // UFFDIO_API may only succeed once per fd: retry on a fresh one without POISON.
    ::close(fd);
    if (attempt == 1 || err != EINVAL) {
      return PosixError(err, "UFFDIO_API: kernel lacks THREAD_ID or write-protect support");
    }
    wanted = required;
    fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (fd < 0) return PosixError(errno, "userfaultfd() failed on retry");
  }
  return PosixError(EINVAL, "UFFDIO_API negotiation failed");
}

Uffd::~Uffd() { ::close(fd_); }

int Uffd::Register(void* addr, size_t len, bool write_protect) {
  struct uffdio_register reg = {};
  reg.range.start = reinterpret_cast<uint64_t>(addr);
  reg.range.len = len;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING | (write_protect ? UFFDIO_REGISTER_MODE_WP : 0);
  return IoctlErrno(fd_, UFFDIO_REGISTER, &reg);
}

int Uffd::Unregister(void* addr, size_t len) {
  struct uffdio_range range = {reinterpret_cast<uint64_t>(addr), len};
  return IoctlErrno(fd_, UFFDIO_UNREGISTER, &range);
}

int Uffd::Copy(void* dst, const void* src, size_t len, bool write_protect, bool dont_wake) {
  struct uffdio_copy copy = {};
  copy.dst = reinterpret_cast<uint64_t>(dst);
  copy.src = reinterpret_cast<uint64_t>(src);
  copy.len = len;
  copy.mode = (write_protect ? UFFDIO_COPY_MODE_WP : 0) |
              (dont_wake ? UFFDIO_COPY_MODE_DONTWAKE : 0);
  for (;;) {
    if (::ioctl(fd_, UFFDIO_COPY, &copy) == 0) return 0;
    // EAGAIN: the mm changed under us (e.g. a concurrent madvise); retry the remainder.
    if (errno == EAGAIN || errno == EINTR) {
      if (copy.copy > 0) {
        copy.dst += static_cast<uint64_t>(copy.copy);
        copy.src += static_cast<uint64_t>(copy.copy);
        copy.len -= static_cast<uint64_t>(copy.copy);
      }
      copy.copy = 0;
      continue;
    }
    return errno;
  }
}

int Uffd::WriteProtect(void* addr, size_t len, bool protect) {
  struct uffdio_writeprotect wp = {};
  wp.range.start = reinterpret_cast<uint64_t>(addr);
  wp.range.len = len;
  wp.mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
  return IoctlErrno(fd_, UFFDIO_WRITEPROTECT, &wp);
}

int Uffd::Wake(void* addr, size_t len) {
  struct uffdio_range range = {reinterpret_cast<uint64_t>(addr), len};
  return IoctlErrno(fd_, UFFDIO_WAKE, &range);
}

int Uffd::Poison(void* addr, size_t len) {
  if (!has_poison()) return ENOSYS;
  struct uffdio_poison p = {};
  p.range.start = reinterpret_cast<uint64_t>(addr);
  p.range.len = len;
  int err = IoctlErrno(fd_, UFFDIO_POISON, &p);
  return err == EEXIST ? 0 : err;
}

int Uffd::Read(uffd_msg* msgs, int max) {
  for (;;) {
    ssize_t n = ::read(fd_, msgs, sizeof(uffd_msg) * static_cast<size_t>(max));
    if (n >= 0) return static_cast<int>(static_cast<size_t>(n) / sizeof(uffd_msg));
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return 0;
    return -errno;
  }
}

absl::StatusOr<char*> ReserveRegion(void* addr, size_t len, int prot, bool fixed) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (fixed ? MAP_FIXED : 0);
  void* p = ::mmap(addr, len, prot, flags, -1, 0);
  if (p == MAP_FAILED) return PosixError(errno, "mmap of the mapping's address range");
  // A fork child would see the anonymous region without our handler: zeros where the file
  // has data. Not inheriting it makes a child's access fail loudly (SIGSEGV) instead.
  if (::madvise(p, len, MADV_DONTFORK) != 0 || ::madvise(p, len, MADV_NOHUGEPAGE) != 0) {
    int err = errno;
    ::munmap(p, len);
    return PosixError(err, "madvise(DONTFORK/NOHUGEPAGE) on the mapping");
  }
  return static_cast<char*>(p);
}

void ReleaseRegion(char* base, size_t len) { ::munmap(base, len); }

int DiscardPages(void* addr, size_t len) {
  // The system call itself, not libc's madvise(): handler threads evict, and an LD_PRELOAD
  // shim (runtime/preload) answers an application's MADV_DONTNEED on a mapping by doing
  // nothing, which must never apply to the runtime's own discards.
  return ::syscall(SYS_madvise, addr, len, MADV_DONTNEED) == 0 ? 0 : errno;
}

}  // namespace umap::runtime
