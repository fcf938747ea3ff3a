// KernelAccess: read/write-family system calls on buffers that lie in Umap mappings.
//
// Umap serves page faults in user space. A fault the kernel takes while it copies to or
// from a user buffer (read(2) into a non-resident Umap page, write(2) from one) is served
// too with full userfaultfd, but not in the kernel's user-mode-only userfaultfd mode, nor
// in any signal-based fault mode: there the system call fails with EFAULT. So before such a
// call the shim makes the buffer's Umap pages resident from user space, where faults are
// served, and then issues the call:
//   - kernel reads the buffer (write, pwrite, writev, pwritev, send, sendto): one byte of
//     each page is loaded;
//   - kernel writes the buffer (read, pread, readv, preadv, recv, recvfrom): one byte of
//     each page of a writable mapping is rewritten with an atomic add of zero, which makes
//     the page resident and writable (a first-write fault) without changing its contents.
//     Pages of a read-only mapping are only loaded: the kernel then refuses to write them
//     (EFAULT), exactly as it would for a read-only mmap().
// Pages past the file's end at map time are not touched (mmap gives SIGBUS there, and the
// kernel EFAULT): the call then fails as it would with mmap.
//
// A touched page can be evicted again before the kernel reaches it when the buffer is large
// compared with the cache. Calls on regular files are therefore split into chunks of at
// most `chunk_bytes` that are touched and issued one after the other (positional calls keep
// their offsets; read/write on a regular file advance the file offset chunk by chunk, so a
// concurrent reader of the same descriptor may interleave between chunks). Any call that
// still fails with EFAULT is touched and retried a few times before the EFAULT is returned.
// Calls on pipes and sockets are never split (their message boundaries matter).
//
// Thread safety: all methods may be called from any thread.
#ifndef UMAP_RUNTIME_PRELOAD_KERNEL_ACCESS_H_
#define UMAP_RUNTIME_PRELOAD_KERNEL_ACCESS_H_

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>

#include "runtime/preload/mapping_registry.h"

namespace umap::preload {

class KernelAccess {
 public:
  enum class Dir { kKernelReads, kKernelWrites };

  // `registry` must outlive this object. chunk_bytes > 0.
  KernelAccess(const MappingRegistry* registry, size_t chunk_bytes);

  // Touches the Umap pages of [buf, buf+len) for an access in direction d; false when the
  // range overlaps no shim mapping (nothing was touched).
  bool Touch(const void* buf, size_t len, Dir d) const;
  bool TouchIov(const struct iovec* iov, int iovcnt, Dir d) const;

  ssize_t Read(int fd, void* buf, size_t n) const;
  ssize_t Write(int fd, const void* buf, size_t n) const;
  ssize_t Pread(int fd, void* buf, size_t n, off_t off) const;
  ssize_t Pwrite(int fd, const void* buf, size_t n, off_t off) const;
  ssize_t Readv(int fd, const struct iovec* iov, int iovcnt) const;
  ssize_t Writev(int fd, const struct iovec* iov, int iovcnt) const;
  ssize_t Preadv(int fd, const struct iovec* iov, int iovcnt, off_t off) const;
  ssize_t Pwritev(int fd, const struct iovec* iov, int iovcnt, off_t off) const;
  ssize_t Recv(int fd, void* buf, size_t n, int flags) const;
  ssize_t Send(int fd, const void* buf, size_t n, int flags) const;
  ssize_t Recvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* from,
                   socklen_t* fromlen) const;
  ssize_t Sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* to,
                 socklen_t tolen) const;

  size_t chunk_bytes() const { return chunk_bytes_; }
  static constexpr int kAttempts = 8;

 private:
  bool Overlaps(const void* buf, size_t len) const;
  bool OverlapsIov(const struct iovec* iov, int iovcnt) const;
  // Calls op(p, len, done) over [buf, buf+n) in touched chunks; done = bytes so far.
  template <typename Op>
  ssize_t Chunked(int fd, const void* buf, size_t n, Dir d, Op op) const;
  // Touches, then calls op() (no arguments) on the whole buffer or vector.
  template <typename Op>
  ssize_t Whole(const void* buf, size_t n, Dir d, Op op) const;
  template <typename Op>
  ssize_t WholeIov(const struct iovec* iov, int iovcnt, Dir d, Op op) const;
  // Calls op() until it does not fail with EFAULT (touching again in between).
  template <typename Op, typename Retouch>
  static ssize_t Retried(Op op, Retouch retouch);

  const MappingRegistry* const registry_;
  const size_t chunk_bytes_;
  const size_t page_;
};

}  // namespace umap::preload

#endif  // UMAP_RUNTIME_PRELOAD_KERNEL_ACCESS_H_
