// Env: the one interface that carries every byte between Umap and a mapped file.
//
// All file system calls of the runtime, journal applies and recovery go through an Env
// (POSIX implementation in base/env_posix.cc). Fault injection (faultinject/) wraps an Env
// with EnvWrapper and overrides only what it breaks, so tests run the production code.
//
// Durability, in plain words:
//   File::WriteAt  -- the bytes are handed to the OS (or the DFS client). A crash of the
//                     process keeps them; a node crash or DFS client loss may drop them.
//   File::Sync     -- fdatasync: when it returns OK, every byte written before it survives a
//                     node crash. A failed Sync poisons nothing in the file object, but the
//                     caller must treat every unsynced byte as lost (never retry a failed
//                     fsync and assume success: the kernel may have dropped dirty pages).
// Errors: every error of a system call carries its errno as a payload (base/posix_error.h:
// ErrnoFromStatus), and the C API hands that errno to the caller. Its absl code is the one
// absl::ErrnoToStatus picks and says little about what to do next (ENOTCONN from a dropped
// mount is kFailedPrecondition, EIO kUnknown): decide by the errno (ClassifyErrno), never by
// the code.
// Thread safety: File methods may be called concurrently from several threads.
#ifndef UMAP_ENV_H_
#define UMAP_ENV_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

struct io_uring_sqe;
struct iovec;

namespace umap {

// What tells a file apart from one created later at the same path, with the same device
// and inode number (ext4 hands a freed inode number to the next file it creates): its
// birth time (statx), or, where the file system keeps none, the random id Umap wrote into
// its extended attribute user.umap.id at its first writable map (File::StampIdentity).
enum class FileBirth : uint8_t { kUnknown = 0, kBirthTime = 1, kIdXattr = 2 };

// Who a file is: recovery refuses to write into a file whose identity changed.
struct FileIdentity {
  std::string path;     // absolute path when known (from /proc/self/fd), else empty
  uint64_t device = 0;  // st_dev
  uint64_t inode = 0;   // st_ino
  uint64_t size = 0;    // st_size at the time of the query
  FileBirth birth = FileBirth::kUnknown;
  uint64_t birth_a = 0;  // kBirthTime: stx_btime seconds; kIdXattr: the id's first 8 bytes
  uint64_t birth_b = 0;  // kBirthTime: stx_btime nanoseconds; kIdXattr: its last 8 bytes
  friend bool operator==(const FileIdentity&, const FileIdentity&) = default;
};

enum class OpenMode { kReadOnly, kReadWrite };

class File {
 public:
  virtual ~File() = default;

  // Reads up to dst.size() bytes at `offset`; returns the count. Short only at end of file.
  // Retries EINTR and short reads internally. Errors: the errno of the failed read (EIO,
  // ENOTCONN, ESTALE, ETIMEDOUT, ...).
  virtual absl::StatusOr<size_t> ReadAt(uint64_t offset, absl::Span<char> dst) = 0;
  // Writes all of src at `offset` or returns the errno of the failed write (ENOSPC, EDQUOT,
  // EIO, ...).
  virtual absl::Status WriteAt(uint64_t offset, absl::Span<const char> src) = 0;
  // fdatasync. See the header comment for what a failure means.
  virtual absl::Status Sync() = 0;
  virtual absl::StatusOr<uint64_t> Size() = 0;
  virtual absl::StatusOr<FileIdentity> Identify() = 0;
  // The OS descriptor, for what is not I/O (the file system's kind, locks, a change made
  // by another process); -1 when there is none (memory env, fault-injecting wrappers).
  // Never used to move bytes: reads and writes go through this interface, the io_uring
  // ones through the four calls below.
  virtual int fd() const { return -1; }

  // --- io_uring, behind this seam ---
  // The runtime's I/O channels (merged reads) and the write engine (merged, concurrent
  // writes) submit to io_uring through these calls, never through a descriptor of their
  // own, so that a wrapper (fault injection) sees every byte the fast path moves. False:
  // the file cannot be read or written through io_uring, and the callers use ReadAt and
  // WriteAt instead.
  virtual bool SupportsRing() const { return false; }
  // Fills `sqe` with a read of `len` bytes at `offset` into `buf`. REQUIRES: SupportsRing().
  virtual void PrepareRead(io_uring_sqe* sqe, uint64_t offset, char* buf, uint32_t len);
  // What the caller gets for that read, from the kernel's result `res` (bytes, or -errno):
  // `res` itself, unless a wrapper changes it (a fault).
  virtual int FinishRead(uint64_t offset, char* buf, uint32_t len, int res);
  // Fills `sqe` with a write of the `n` buffers of `iov` at `offset`; they stay valid until
  // FinishWritev. REQUIRES: SupportsRing().
  virtual void PrepareWritev(io_uring_sqe* sqe, const struct iovec* iov, unsigned n,
                             uint64_t offset);
  // What the caller gets for that write, from the kernel's result `res`.
  virtual int FinishWritev(uint64_t offset, const struct iovec* iov, unsigned n, int res);
  // A second, read-only handle on the same file that bypasses the kernel page cache
  // (O_DIRECT), so that data cached by Umap is not cached twice. Reads through it must be
  // aligned (offsets and lengths multiples of 4 KiB, page-aligned buffers). kUnimplemented
  // where the file or file system has no such mode.
  virtual absl::StatusOr<std::unique_ptr<File>> OpenDirectReader() {
    return absl::UnimplementedError("no direct I/O for " + name());
  }
  // A second, write-only handle on the same file that bypasses the kernel page cache
  // (O_DIRECT): recovery writes whole aligned blocks through it, as a disk's own sequential
  // writer does, without copying them into the page cache and writing them back. The same
  // alignment rules; Sync() on either handle makes its writes durable. kUnimplemented where
  // the file or file system has no such mode.
  virtual absl::StatusOr<std::unique_ptr<File>> OpenDirectWriter() {
    return absl::UnimplementedError("no direct I/O for " + name());
  }
  // Gives a file whose file system records no birth time (Identify says FileBirth::kUnknown)
  // an identity of its own: a random id in its extended attribute user.umap.id, made durable
  // (fsync) before this returns; a file that has one keeps it. kUnimplemented where files
  // have no such attributes; else the file system's errno (EOPNOTSUPP, EACCES, EROFS, ...).
  virtual absl::Status StampIdentity() {
    return absl::UnimplementedError("no extended attributes for " + name());
  }
  // The name used in error messages.
  virtual const std::string& name() const = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX Env. Never deleted.
  static Env* Default();

  virtual absl::StatusOr<std::unique_ptr<File>> OpenFile(const std::string& path,
                                                         OpenMode mode) = 0;
  // Wraps a duplicate of `fd` (the caller keeps its own descriptor).
  virtual absl::StatusOr<std::unique_ptr<File>> AdoptFd(int fd, OpenMode mode) = 0;
  virtual absl::Status CreateDir(const std::string& path, mode_t mode) = 0;
  virtual absl::Status SyncDir(const std::string& path) = 0;
  // Removes path and everything below it; OK if it does not exist.
  virtual absl::Status RemoveTree(const std::string& path) = 0;
  virtual absl::StatusOr<FileIdentity> IdentifyPath(const std::string& path) = 0;
  virtual uint64_t NowMicros() = 0;
};

// Forwards every call to a target Env. Fault wrappers derive from it and override only
// what they break. Add the forwarder in the same change as any new Env method.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  absl::StatusOr<std::unique_ptr<File>> OpenFile(const std::string& path,
                                                 OpenMode mode) override {
    return target_->OpenFile(path, mode);
  }
  absl::StatusOr<std::unique_ptr<File>> AdoptFd(int fd, OpenMode mode) override {
    return target_->AdoptFd(fd, mode);
  }
  absl::Status CreateDir(const std::string& path, mode_t mode) override {
    return target_->CreateDir(path, mode);
  }
  absl::Status SyncDir(const std::string& path) override { return target_->SyncDir(path); }
  absl::Status RemoveTree(const std::string& path) override { return target_->RemoveTree(path); }
  absl::StatusOr<FileIdentity> IdentifyPath(const std::string& path) override {
    return target_->IdentifyPath(path);
  }
  uint64_t NowMicros() override { return target_->NowMicros(); }

 private:
  Env* const target_;
};

}  // namespace umap

#endif  // UMAP_ENV_H_
