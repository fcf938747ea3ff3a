#include "base/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/posix_error.h"

namespace umap {

bool DirLock::Unsupported(int err) {
  return err == EOPNOTSUPP || err == ENOLCK || err == EINVAL || err == ENOSYS || err == EBADF;
}

absl::StatusOr<std::unique_ptr<DirLock>> DirLock::TryLock(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return PosixError(errno, absl::StrCat("opening directory ", dir, " to lock it"));
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return std::unique_ptr<DirLock>(new DirLock(fd));
  const int err = errno;
  struct stat st;
  const bool known = ::fstat(fd, &st) == 0;
  ::close(fd);
  if (err != EWOULDBLOCK) return PosixError(err, absl::StrCat("flock of directory ", dir));
  const pid_t holder = known ? FlockHolder(st.st_dev, st.st_ino) : 0;
  return WithErrno(absl::UnavailableError(absl::StrCat(
                       "directory ", dir, " is locked by ",
                       holder > 0 ? absl::StrCat("process ", holder)
                                  : std::string("another process (on another node, or not shown "
                                                "in /proc/locks)"))),
                   EBUSY);
}

DirLock::~DirLock() { ::close(fd_); }

void DirLock::TEST_Release() {
  if (::flock(fd_, LOCK_UN) != 0) UMAP_LOG(kWarn, "flock LOCK_UN: ", std::strerror(errno));
}

pid_t FlockHolder(dev_t device, ino_t inode) {
  // "1: FLOCK  ADVISORY  WRITE 4242 fe:00:10953123 0 EOF" (major and minor in hex).
  std::ifstream in("/proc/locks");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 6 || f[1] != "FLOCK") continue;
    std::vector<absl::string_view> id = absl::StrSplit(f[5], ':');
    uint32_t major_no = 0, minor_no = 0;
    uint64_t ino = 0;
    int64_t pid = 0;
    if (id.size() != 3 || !absl::SimpleHexAtoi(id[0], &major_no) ||
        !absl::SimpleHexAtoi(id[1], &minor_no) || !absl::SimpleAtoi(id[2], &ino) ||
        !absl::SimpleAtoi(f[4], &pid)) {
      continue;
    }
    if (makedev(major_no, minor_no) == device && ino == inode) return static_cast<pid_t>(pid);
  }
  return 0;
}

}  // namespace umap
