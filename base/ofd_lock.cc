#include "base/ofd_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/fs_kind.h"
#include "base/internal_io.h"
#include "base/keep_locks.h"
#include "base/posix_error.h"

namespace umap {
namespace {

constexpr char kOwnerPrefix[] = "user.umap.owner.";

struct flock MakeFlock(short type, uint64_t start, uint64_t length) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(start);
  fl.l_len = static_cast<off_t>(length);
  fl.l_pid = 0;  // must be 0 for the F_OFD_* commands
  return fl;
}

LockConflict FromFlock(const struct flock& fl) {
  LockConflict c;
  c.start = static_cast<uint64_t>(fl.l_start);
  c.length = static_cast<uint64_t>(fl.l_len);
  c.exclusive = fl.l_type == F_WRLCK;
  c.pid = fl.l_pid;
  return c;
}

std::string FdName(int fd) {
  char buf[4096];
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return link;
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

std::string LockConflict::Describe() const {
  return absl::StrCat(exclusive ? "a write lock" : "a read lock", " on bytes ",
                      length == 0 ? absl::StrCat("from ", start, " to the end of the file")
                                  : absl::StrCat("[", start, ", ", start + length, ")"));
}

absl::StatusOr<std::unique_ptr<OfdLockFile>> OfdLockFile::Reopen(int fd, bool write) {
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const std::string name = FdName(fd);
  const int nfd = ::open(link.c_str(), (write ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (nfd < 0) {
    return PosixError(errno, absl::StrCat("opening ", name, " again for its byte-range locks"));
  }
  return std::unique_ptr<OfdLockFile>(new OfdLockFile(nfd, -1, name));
}

absl::StatusOr<bool> OfdLockFile::PathNamesThisFile(const std::string& path) {
  struct stat mine, named;
  if (::fstat(fd_, &mine) != 0) return PosixError(errno, absl::StrCat("fstat ", name_));
  if (::stat(path.c_str(), &named) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return PosixError(errno, absl::StrCat("stat ", path));
  }
  return mine.st_dev == named.st_dev && mine.st_ino == named.st_ino;
}

absl::StatusOr<std::unique_ptr<OfdLockFile>> OfdLockFile::Open(const std::string& path,
                                                               bool create, bool direct) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0) return PosixError(errno, absl::StrCat("opening ", path));
  int dfd = -1;
  if (direct && OnSharedFileSystem(fd)) {
    // Where O_DIRECT is refused, the plain description serves ReadFresh.
    dfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  }
  return std::unique_ptr<OfdLockFile>(new OfdLockFile(fd, dfd, path));
}

OfdLockFile::~OfdLockFile() {
  // Descriptions of a mapped file: the program's own POSIX locks on it must survive.
  if (direct_fd_ >= 0) CloseKeepingLocks(direct_fd_);
  CloseKeepingLocks(fd_);
}

absl::StatusOr<std::optional<LockConflict>> OfdLockFile::TryLock(uint64_t start, uint64_t length,
                                                                 bool exclusive) {
  InternalIo internal;  // Umap's own lock: the LD_PRELOAD shim leaves it alone
  const short type = exclusive ? F_WRLCK : F_RDLCK;
  for (int attempt = 1;; ++attempt) {
    struct flock fl = MakeFlock(type, start, length);
    if (::fcntl(fd_, F_OFD_SETLK, &fl) == 0) return std::nullopt;
    const int err = errno;
    if (err == EINTR) continue;
    if (err != EAGAIN && err != EACCES) {
      return PosixError(
          err, absl::StrCat("F_OFD_SETLK on bytes [", start, ", ",
                            length == 0 ? std::string("end") : absl::StrCat(start + length),
                            ") of ", name_));
    }
    // Who is in the way. The holder may have let go meanwhile: then try again, a few times.
    absl::StatusOr<std::optional<LockConflict>> c = Test(start, length, exclusive);
    if (!c.ok()) return c.status();
    if (c->has_value()) return c;
    if (attempt >= 3) {
      LockConflict unknown;  // refused, but the file system shows no holder
      unknown.start = start;
      unknown.length = length;
      unknown.exclusive = true;
      return std::optional<LockConflict>(unknown);
    }
  }
}

absl::Status OfdLockFile::Unlock(uint64_t start, uint64_t length) {
  InternalIo internal;  // Umap's own lock: the LD_PRELOAD shim leaves it alone
  struct flock fl = MakeFlock(F_UNLCK, start, length);
  while (::fcntl(fd_, F_OFD_SETLK, &fl) != 0) {
    if (errno != EINTR) return PosixError(errno, absl::StrCat("unlocking ", name_));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<LockConflict>> OfdLockFile::Test(uint64_t start, uint64_t length,
                                                              bool exclusive) {
  struct flock fl = MakeFlock(exclusive ? F_WRLCK : F_RDLCK, start, length);
  while (::fcntl(fd_, F_OFD_GETLK, &fl) != 0) {
    if (errno != EINTR) return PosixError(errno, absl::StrCat("F_OFD_GETLK on ", name_));
    fl = MakeFlock(exclusive ? F_WRLCK : F_RDLCK, start, length);
  }
  if (fl.l_type == F_UNLCK) return std::nullopt;
  return std::optional<LockConflict>(FromFlock(fl));
}

absl::StatusOr<size_t> OfdLockFile::ReadFresh(uint64_t offset, absl::Span<char> dst) {
  InternalIo internal;
  const int fd = direct_fd_ >= 0 ? direct_fd_ : fd_;
  for (;;) {
    const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return PosixError(errno, absl::StrCat("reading ", name_));
  }
}

absl::Status OfdLockFile::WriteDurably(uint64_t offset, absl::Span<const char> src) {
  InternalIo internal;
  size_t done = 0;
  while (done < src.size()) {
    const ssize_t n =
        ::pwrite(fd_, src.data() + done, src.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return PosixError(n < 0 ? errno : EIO, absl::StrCat("writing ", name_));
    done += static_cast<size_t>(n);
  }
  while (::fdatasync(fd_) != 0) {
    if (errno != EINTR) return PosixError(errno, absl::StrCat("fdatasync of ", name_));
  }
  return absl::OkStatus();
}

absl::Status OfdLockFile::SetOwnerRecord(const std::string& id, const std::string& value) {
  const std::string key = kOwnerPrefix + id;
  if (::fsetxattr(fd_, key.c_str(), value.data(), value.size(), 0) != 0) {
    return PosixError(errno, absl::StrCat("setting ", key, " on ", name_));
  }
  return absl::OkStatus();
}

absl::Status OfdLockFile::RemoveOwnerRecord(const std::string& id) {
  const std::string key = kOwnerPrefix + id;
  if (::fremovexattr(fd_, key.c_str()) != 0 && errno != ENODATA) {
    return PosixError(errno, absl::StrCat("removing ", key, " from ", name_));
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::string>> OfdLockFile::OwnerRecords() {
  std::vector<std::pair<std::string, std::string>> out;
  std::string names(4096, '\0');
  ssize_t n = ::flistxattr(fd_, names.data(), names.size());
  if (n < 0 && errno == ERANGE) {
    const ssize_t need = ::flistxattr(fd_, nullptr, 0);
    if (need <= 0) return out;
    names.assign(static_cast<size_t>(need), '\0');
    n = ::flistxattr(fd_, names.data(), names.size());
  }
  if (n <= 0) return out;
  names.resize(static_cast<size_t>(n));
  for (absl::string_view key : absl::StrSplit(names, '\0', absl::SkipEmpty())) {
    if (!absl::StartsWith(key, kOwnerPrefix)) continue;
    const std::string k(key);
    char value[1024];
    const ssize_t v = ::fgetxattr(fd_, k.c_str(), value, sizeof(value));
    if (v < 0) continue;  // removed meanwhile, or too long to be ours
    out.emplace_back(k.substr(sizeof(kOwnerPrefix) - 1),
                     std::string(value, static_cast<size_t>(v)));
  }
  return out;
}

absl::StatusOr<LockCheck> CheckWriteLock(OfdLockFile& mine, OfdLockFile& probe, uint64_t start,
                                         uint64_t length) {
  LockCheck out;
  absl::StatusOr<std::optional<LockConflict>> seen = probe.Test(start, length, /*exclusive=*/true);
  if (!seen.ok()) return seen.status();
  if (!seen->has_value()) return out;  // nobody holds it
  absl::StatusOr<std::optional<LockConflict>> again = mine.TryLock(start, length, true);
  if (!again.ok()) return again.status();
  out.held = !again->has_value();
  out.other = *again;
  return out;
}

bool OnSharedFileSystem(int fd) {
  // Unknown types (and a failed fstatfs): assume the careful case.
  return FsKindOfFd(fd) != FsKind::kLocal;
}

std::string HostName() {
  struct utsname u;
  if (::uname(&u) != 0) return "?";
  return u.nodename;
}

uint64_t ProcessStartTicks(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return 0;
  // The command name (field 2) may hold spaces and parentheses: fields count from the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

std::string ThisProcessName() {
  return absl::StrCat("pid ", ::getpid(), " on ", HostName(), " (uid ", ::getuid(), ")");
}

}  // namespace umap
