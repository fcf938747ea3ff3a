#include "base/keep_locks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>

namespace umap {
namespace {

// Parked descriptors: a small fixed table (no allocation: ReleaseParked runs inside the
// shim's close(), which may be called anywhere). A full table closes instead of parking and
// says so: the program then loses its locks, as it would have without the table.
struct Parked {
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
};
constexpr int kMaxParked = 256;
std::mutex g_mu;
Parked g_parked[kMaxParked];
std::atomic<int> g_count{0};

// close(2) itself: inside the LD_PRELOAD shim, close() is the shim's, which calls
// ReleaseParked (and so would take g_mu again).
void RawClose(int fd) { ::syscall(SYS_close, fd); }

// The file of `fd` when it is a regular file (only those carry the program's locks).
bool RegularFile(int fd, dev_t* dev, ino_t* ino) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  *dev = st.st_dev;
  *ino = st.st_ino;
  return true;
}

// Closes the parked descriptors of (dev, ino). REQUIRES: g_mu held.
void CloseParkedLocked(dev_t dev, ino_t ino) {
  for (Parked& p : g_parked) {
    if (p.fd >= 0 && p.dev == dev && p.ino == ino) {
      RawClose(p.fd);
      p.fd = -1;
      g_count.fetch_sub(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace

bool ProcessHoldsPosixLock(int fd) {
  const pid_t self = ::getpid();
  uint64_t start = 0;
  // Each answer names one conflicting lock; the scan moves past it. A lock of ours hidden
  // behind an overlapping lock of someone else's is found when the scan reaches a stretch
  // where only ours remains, or not at all: then the process shares the bytes with a reader
  // of another process, and parking costs only a descriptor.
  for (int i = 0; i < 64; ++i) {
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(start);
    fl.l_len = 0;
    if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return errno != EINVAL && errno != EBADF;
    if (fl.l_type == F_UNLCK) return false;
    if (fl.l_pid == self) return true;
    if (fl.l_len == 0) return false;
    start = static_cast<uint64_t>(fl.l_start) + static_cast<uint64_t>(fl.l_len);
  }
  return true;
}

void CloseKeepingLocks(int fd) {
  if (fd < 0) return;
  dev_t dev;
  ino_t ino;
  if (!RegularFile(fd, &dev, &ino)) {
    RawClose(fd);
    return;
  }
  const bool held = ProcessHoldsPosixLock(fd);
  std::lock_guard<std::mutex> l(g_mu);
  if (!held) {
    CloseParkedLocked(dev, ino);
    RawClose(fd);
    return;
  }
  for (Parked& p : g_parked) {
    if (p.fd < 0) {
      p = {fd, dev, ino};
      g_count.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  RawClose(fd);  // no room: the locks go, as they would have without parking
}

void ReleaseParked(dev_t dev, ino_t ino) {
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> l(g_mu);
  CloseParkedLocked(dev, ino);
}

size_t ParkedDescriptors() { return static_cast<size_t>(g_count.load(std::memory_order_relaxed)); }

}  // namespace umap
