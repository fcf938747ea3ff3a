// The POSIX Env: the only place where file system errno values become absl::Status.
#include <fcntl.h>
#include <liburing.h>
#include <limits.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/internal_io.h"
#include "base/keep_locks.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "umap/env.h"

namespace umap {

// A File that cannot use io_uring (SupportsRing() false) is never asked to prepare a
// submission; should it be, the request does nothing and reads or writes 0 bytes, which
// the callers treat as short and finish through ReadAt or WriteAt.
void File::PrepareRead(io_uring_sqe* sqe, uint64_t, char*, uint32_t) { io_uring_prep_nop(sqe); }
int File::FinishRead(uint64_t, char*, uint32_t, int res) { return res; }
void File::PrepareWritev(io_uring_sqe* sqe, const struct iovec*, unsigned, uint64_t) {
  io_uring_prep_nop(sqe);
}
int File::FinishWritev(uint64_t, const struct iovec*, unsigned, int res) { return res; }

thread_local bool InternalIo::active_ = false;

namespace {

// The extended attribute that holds the id of a file whose file system keeps no birth time.
constexpr char kIdXattr[] = "user.umap.id";
constexpr size_t kIdBytes = 16;

// An xattr call's errno that means "no id here": none set, or none kept by this file system.
bool NoIdXattr(int err) {
  return err == ENODATA || err == ENOTSUP || err == EOPNOTSUPP || err == ERANGE || err == ENOSYS;
}

// Fills id->birth: the birth time from statx(dirfd, path, flags), else the id that
// get_xattr(buf, size) reads (an ssize_t, -1 with errno set, as fgetxattr), else kUnknown.
template <typename GetXattr>
absl::Status FillBirth(int dirfd, const char* path, int flags, GetXattr get_xattr,
                       const std::string& name, FileIdentity* id) {
  struct statx stx;
  if (::statx(dirfd, path, flags, STATX_BTIME, &stx) == 0) {
    if ((stx.stx_mask & STATX_BTIME) != 0) {
      id->birth = FileBirth::kBirthTime;
      id->birth_a = static_cast<uint64_t>(stx.stx_btime.tv_sec);
      id->birth_b = stx.stx_btime.tv_nsec;
      return absl::OkStatus();
    }
  } else if (errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP) {
    return PosixError(errno, absl::StrCat("statx ", name));
  }
  char buf[kIdBytes];
  const ssize_t n = get_xattr(buf, sizeof(buf));
  if (n < 0) {
    if (NoIdXattr(errno)) return absl::OkStatus();
    return PosixError(errno, absl::StrCat("read ", kIdXattr, " of ", name));
  }
  if (static_cast<size_t>(n) != kIdBytes) return absl::OkStatus();  // not an id of ours
  id->birth = FileBirth::kIdXattr;
  std::memcpy(&id->birth_a, buf, 8);
  std::memcpy(&id->birth_b, buf + 8, 8);
  return absl::OkStatus();
}

class PosixFile final : public File {
 public:
  PosixFile(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  // A descriptor of a data file: closing it must not drop the program's own POSIX locks
  // on the file (base/keep_locks.h).
  ~PosixFile() override { CloseKeepingLocks(fd_); }

  absl::StatusOr<size_t> ReadAt(uint64_t offset, absl::Span<char> dst) override {
    InternalIo internal;
    size_t done = 0;
    // Short reads and EINTR are retried here, once for every caller; a 0 return is EOF.
    while (done < dst.size()) {
      ssize_t r = ::pread(fd_, dst.data() + done, dst.size() - done,
                          static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return PosixError(errno, absl::StrCat("pread ", name_, " at ", offset + done));
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

  absl::Status WriteAt(uint64_t offset, absl::Span<const char> src) override {
    InternalIo internal;
    size_t done = 0;
    while (done < src.size()) {
      ssize_t r = ::pwrite(fd_, src.data() + done, src.size() - done,
                           static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return PosixError(errno, absl::StrCat("pwrite ", name_, " at ", offset + done));
      }
      if (r == 0) return PosixError(EIO, absl::StrCat("pwrite ", name_, " wrote nothing"));
      done += static_cast<size_t>(r);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    InternalIo internal;
    if (::fdatasync(fd_) != 0) return PosixError(errno, absl::StrCat("fdatasync ", name_));
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return PosixError(errno, absl::StrCat("fstat ", name_));
    return static_cast<uint64_t>(st.st_size);
  }

  absl::StatusOr<FileIdentity> Identify() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return PosixError(errno, absl::StrCat("fstat ", name_));
    FileIdentity id;
    id.path = FdPath(fd_);
    id.device = static_cast<uint64_t>(st.st_dev);
    id.inode = static_cast<uint64_t>(st.st_ino);
    id.size = static_cast<uint64_t>(st.st_size);
    const int fd = fd_;
    RETURN_IF_ERROR(FillBirth(
        fd_, "", AT_EMPTY_PATH,
        [fd](char* buf, size_t size) { return ::fgetxattr(fd, kIdXattr, buf, size); }, name_, &id));
    return id;
  }

  absl::Status StampIdentity() override {
    char buf[kIdBytes];
    const ssize_t n = ::fgetxattr(fd_, kIdXattr, buf, sizeof(buf));
    if (n == static_cast<ssize_t>(kIdBytes)) return absl::OkStatus();
    if (n < 0 && errno != ENODATA) {
      return PosixError(errno, absl::StrCat("read ", kIdXattr, " of ", name_));
    }
    if (::getrandom(buf, sizeof(buf), 0) != static_cast<ssize_t>(sizeof(buf))) {
      return PosixError(errno, absl::StrCat("getrandom for the id of ", name_));
    }
    if (::fsetxattr(fd_, kIdXattr, buf, sizeof(buf), XATTR_CREATE) != 0 && errno != EEXIST) {
      return PosixError(errno, absl::StrCat("set ", kIdXattr, " of ", name_));
    }
    // The journal will name the id: it must not be lost in a crash that keeps the journal.
    if (::fsync(fd_) != 0) {
      return PosixError(errno, absl::StrCat("fsync ", name_, " after setting its ", kIdXattr));
    }
    return absl::OkStatus();
  }

  int fd() const override { return fd_; }
  const std::string& name() const override { return name_; }

  bool SupportsRing() const override { return fd_ >= 0; }
  void PrepareRead(io_uring_sqe* sqe, uint64_t offset, char* buf, uint32_t len) override {
    io_uring_prep_read(sqe, fd_, buf, len, offset);
  }
  void PrepareWritev(io_uring_sqe* sqe, const struct iovec* iov, unsigned n,
                     uint64_t offset) override {
    io_uring_prep_writev(sqe, fd_, iov, n, offset);
  }

  absl::StatusOr<std::unique_ptr<File>> OpenDirectReader() override {
    return OpenDirect(O_RDONLY);
  }
  absl::StatusOr<std::unique_ptr<File>> OpenDirectWriter() override {
    return OpenDirect(O_WRONLY);
  }

  // Through /proc/self/fd, so the same file is opened even if its path was renamed or
  // unlinked since; the new descriptor has its own O_DIRECT status flag.
  absl::StatusOr<std::unique_ptr<File>> OpenDirect(int access) {
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd_);
    int fd = ::open(link, access | O_DIRECT | O_CLOEXEC);
    if (fd < 0) return PosixError(errno, absl::StrCat("open O_DIRECT ", name_));
    return std::unique_ptr<File>(new PosixFile(fd, name_));
  }

  static std::string FdPath(int fd) {
    char link[64];
    char buf[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = ::readlink(link, buf, sizeof(buf) - 1);
    if (n <= 0) return std::string();
    return std::string(buf, static_cast<size_t>(n));
  }

 private:
  const int fd_;
  const std::string name_;
};

class PosixEnv final : public Env {
 public:
  absl::StatusOr<std::unique_ptr<File>> OpenFile(const std::string& path,
                                                 OpenMode mode) override {
    int flags = (mode == OpenMode::kReadWrite ? O_RDWR : O_RDONLY) | O_CLOEXEC;
    int fd = ::open(path.c_str(), flags);
    if (fd < 0) return PosixError(errno, absl::StrCat("open ", path));
    return std::unique_ptr<File>(new PosixFile(fd, path));
  }

  absl::StatusOr<std::unique_ptr<File>> AdoptFd(int fd, OpenMode mode) override {
    int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0) return PosixError(errno, absl::StrCat("fcntl(F_GETFL) fd ", fd));
    int acc = flags & O_ACCMODE;
    if (mode == OpenMode::kReadWrite && acc != O_RDWR) {
      return PosixError(EACCES, absl::StrCat("fd ", fd, " is not open for reading and writing"));
    }
    if (acc == O_WRONLY) {
      return PosixError(EACCES, absl::StrCat("fd ", fd, " is open write-only"));
    }
    int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return PosixError(errno, absl::StrCat("dup fd ", fd));
    std::string name = PosixFile::FdPath(dup);
    if (name.empty()) name = absl::StrCat("fd:", fd);
    return std::unique_ptr<File>(new PosixFile(dup, std::move(name)));
  }

  absl::Status CreateDir(const std::string& path, mode_t mode) override {
    if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
      return PosixError(errno, absl::StrCat("mkdir ", path));
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError(errno, absl::StrCat("open dir ", path));
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return PosixError(err, absl::StrCat("fsync dir ", path));
    return absl::OkStatus();
  }

  absl::Status RemoveTree(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return PosixError(ec.value(), absl::StrCat("remove ", path));
    return absl::OkStatus();
  }

  absl::StatusOr<FileIdentity> IdentifyPath(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PosixError(errno, absl::StrCat("stat ", path));
    char buf[PATH_MAX];
    FileIdentity id;
    id.path = ::realpath(path.c_str(), buf) ? std::string(buf) : path;
    id.device = static_cast<uint64_t>(st.st_dev);
    id.inode = static_cast<uint64_t>(st.st_ino);
    id.size = static_cast<uint64_t>(st.st_size);
    RETURN_IF_ERROR(FillBirth(
        AT_FDCWD, path.c_str(), 0,
        [&path](char* buf, size_t size) { return ::getxattr(path.c_str(), kIdXattr, buf, size); },
        path, &id));
    return id;
  }

  uint64_t NowMicros() override {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();
  return env;
}

}  // namespace umap
