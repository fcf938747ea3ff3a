#include "runtime/preload/node_files.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/internal_io.h"
#include "base/log.h"
#include "runtime/preload/shim.h"  // FdPath, ReentryGuard

namespace umap::preload {
namespace {

constexpr char kDir[] = "/dev/shm/umap-files";
constexpr int kUmapByte = 0;    // held by every process that maps the file with Umap
constexpr int kKernelByte = 1;  // held by every process that maps it with the kernel

// The node-local lock file of a mapped file, opened read-write (write locks need it).
// Anyone may create it (mode 0666 in a sticky directory); one that is not a regular file,
// or that this user cannot open, is refused (the caller maps the file with the kernel).
int OpenLockFile(const FileKey& key) {
  if (::mkdir(kDir, 01777) == 0) ::chmod(kDir, 01777);  // the umask must not narrow it
  const std::string path = absl::StrCat(kDir, "/", key.dev, ".", key.ino);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) return -1;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  if (st.st_uid == ::geteuid()) ::fchmod(fd, 0666);
  return fd;
}

struct flock Byte(int byte, short type) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = byte;
  fl.l_len = 1;
  return fl;
}

// fcntl on a lock file: Umap's own lock, which the shim's fcntl must not take for the
// program's (it would look the file up again, under mu_).
int LockCall(int fd, int cmd, struct flock* fl) {
  InternalIo internal;
  return ::fcntl(fd, cmd, fl);
}

}  // namespace

NodeFiles::Fingerprint NodeFiles::Of(const struct stat& st) {
  return {static_cast<uint64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
          static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

NodeFiles::File* NodeFiles::Find(const FileKey& key) {
  for (File& f : files_) {
    if (f.used && f.key.dev == key.dev && f.key.ino == key.ino) return &f;
  }
  return nullptr;
}

bool NodeFiles::OthersHold(int lock_fd, int byte, bool write_lock) const {
  struct flock fl = Byte(byte, write_lock ? F_WRLCK : F_RDLCK);
  if (LockCall(lock_fd, F_OFD_GETLK, &fl) != 0) return true;  // cannot tell: assume so
  return fl.l_type != F_UNLCK;
}

void NodeFiles::Lock(int lock_fd, int byte, short type) const {
  struct flock fl = Byte(byte, type);
  LockCall(lock_fd, F_OFD_SETLK, &fl);  // best effort: a failure only weakens what others see
}

bool NodeFiles::StartWatcher() {
  if (inotify_fd_ >= 0) return true;
  if (stopped_) return false;
  inotify_fd_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (inotify_fd_ < 0 || stop_fd_ < 0) {
    if (inotify_fd_ >= 0) ::close(inotify_fd_);
    if (stop_fd_ >= 0) ::close(stop_fd_);
    inotify_fd_ = stop_fd_ = -1;
    return false;
  }
  watcher_ = std::thread([this] { WatchLoop(); });
  return true;
}

void NodeFiles::Stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
    if (!watcher_.joinable()) return;
    const uint64_t one = 1;
    if (::write(stop_fd_, &one, sizeof one) < 0) return;  // it would not stop: leave it
    t = std::move(watcher_);
  }
  if (t.get_id() != std::this_thread::get_id()) t.join();
}

void NodeFiles::Watch(File* f, int fd) {
  const std::string lock_path = absl::StrCat(kDir, "/", f->key.dev, ".", f->key.ino);
  f->lock_wd = ::inotify_add_watch(inotify_fd_, lock_path.c_str(), IN_MODIFY);
  const std::string data_path = absl::StrCat("/proc/self/fd/", fd);
  f->data_wd = ::inotify_add_watch(inotify_fd_, data_path.c_str(), IN_MODIFY | IN_ATTRIB);
}

NodeFiles::File* NodeFiles::Open(const FileKey& key, int fd) {
  if (File* f = Find(key)) return f;
  File* slot = nullptr;
  for (File& f : files_) {
    if (!f.used) {
      slot = &f;
      break;
    }
  }
  if (slot == nullptr) {
    errno = ENFILE;
    return nullptr;
  }
  const int lock_fd = OpenLockFile(key);
  if (lock_fd < 0 || !StartWatcher()) {
    if (lock_fd >= 0) ::close(lock_fd);
    return nullptr;
  }
  *slot = File{};
  slot->key = key;
  slot->used = true;
  slot->lock_fd = lock_fd;
  Watch(slot, fd);
  struct stat st;
  if (::fstat(fd, &st) == 0) slot->seen = Of(st);
  return slot;
}

NodeFiles::Answer NodeFiles::BeforeMap(const FileKey& key, int fd, bool writable) {
  const char* why = nullptr;
  {
    std::lock_guard<std::mutex> l(mu_);
    File* f = Open(key, fd);
    if (f == nullptr) {
      UMAP_LOG(kWarn, "libumap_preload: cannot coordinate ", FdPath(fd),
               " with the node's other processes (", kDir, ": ", std::strerror(errno),
               "); mapping it with the kernel");
      return Answer::kKernel;
    }
    if (f->kernel) return Answer::kKernel;
    if (OthersHold(f->lock_fd, kKernelByte, /*write_lock=*/true)) {
      why = "another process of this node maps it with the kernel";
    } else {
      const bool write = writable || f->writer;
      struct flock fl = Byte(kUmapByte, write ? F_WRLCK : F_RDLCK);
      if (LockCall(f->lock_fd, F_OFD_SETLK, &fl) == 0) {
        f->writer = write;
        return Answer::kUmap;
      }
      why = write ? "another process of this node maps it with Umap, and this mapping is writable"
                  : "another process of this node maps it writable with Umap";
    }
  }
  return Conflict(key, why, FdPath(fd));
}

int NodeFiles::BeforeFileWrite(const FileKey& key) {
  {
    std::lock_guard<std::mutex> l(mu_);
    File* f = Find(key);
    if (f == nullptr || f->kernel || !OthersHold(f->lock_fd, kUmapByte, /*write_lock=*/true)) {
      return 0;
    }
  }
  return Conflict(key, "this process writes it while another process maps it with Umap") ==
                 Answer::kFailed
             ? -1
             : 0;
}

NodeFiles::Answer NodeFiles::Conflict(const FileKey& key, const char* why,
                                      const std::string& path) {
  int lock_fd;
  {
    std::lock_guard<std::mutex> l(mu_);
    File* f = Find(key);
    if (f == nullptr) return Answer::kKernel;
    f->kernel = true;
    lock_fd = f->lock_fd;
    Lock(lock_fd, kKernelByte, F_RDLCK);
  }
  // Ours first (outside mu_: the hand-off writes back, and the watcher may want mu_).
  if (owner_->GiveToKernel(key, why, path) != 0) return Answer::kFailed;
  Lock(lock_fd, kUmapByte, F_UNLCK);
  // Then the others': a write to the lock file is their watchers' signal.
  const uint64_t one = 1;
  if (::pwrite(lock_fd, &one, sizeof one, 8) < 0) {
    UMAP_LOG(kWarn, "libumap_preload: cannot signal the other processes (", std::strerror(errno),
             ")");
  }
  const auto deadline = std::chrono::steady_clock::now() + kAnswerTimeout;
  while (OthersHold(lock_fd, kUmapByte, /*write_lock=*/true)) {
    if (std::chrono::steady_clock::now() > deadline) {
      UMAP_LOG(kError, "libumap_preload: other processes of this node still map ",
               "a file this process needs with the kernel after ",
               std::chrono::duration_cast<std::chrono::seconds>(kAnswerTimeout).count(), " s (",
               why, "); the call fails with EBUSY rather than show two copies");
      errno = EBUSY;
      return Answer::kFailed;
    }
    ::usleep(2000);
  }
  return Answer::kKernel;
}

void NodeFiles::Unmapped(const FileKey& key) {
  std::lock_guard<std::mutex> l(mu_);
  File* f = Find(key);
  if (f == nullptr || f->kernel) return;  // a kernel mapper keeps saying so
  Lock(f->lock_fd, kUmapByte, F_UNLCK);
  f->writer = false;
}

void NodeFiles::Wrote(const FileKey& key, const struct stat& now) {
  std::lock_guard<std::mutex> l(mu_);
  if (File* f = Find(key)) f->seen = Of(now);
}

void NodeFiles::CheckChanged(const FileKey& key, const struct stat& now) {
  const Fingerprint fp = Of(now);
  {
    std::lock_guard<std::mutex> l(mu_);
    File* f = Find(key);
    if (f == nullptr || f->kernel) return;
    if (fp.size == f->seen.size && fp.mtime_ns == f->seen.mtime_ns &&
        fp.ctime_ns == f->seen.ctime_ns) {
      return;
    }
    f->seen = fp;
  }
  owner_->ChangedElsewhere(key, now);
}

void NodeFiles::AtLock(int fd) {
  struct stat first;
  if (::fstat(fd, &first) != 0 || !S_ISREG(first.st_mode)) return;
  {
    // Most locks are on files no Umap mapping serves (RocksDB's own, the program's
    // others): nothing more, and nothing to wait for.
    std::lock_guard<std::mutex> l(mu_);
    File* f = Find({static_cast<uint64_t>(first.st_dev), static_cast<uint64_t>(first.st_ino)});
    if (f == nullptr || f->kernel) return;
  }
  // The stat and what follows from it happen while no write of this process's own is
  // between its stat and its report (Owner::ExclusiveOfOwnWrites): a stale size would undo
  // the process's own resize.
  owner_->ExclusiveOfOwnWrites([&] {
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
    CheckChanged({static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)}, st);
  });
}

void NodeFiles::ReleaseForCheckpoint() {
  std::lock_guard<std::mutex> l(mu_);
  for (File& f : files_) {
    if (!f.used) continue;
    Lock(f.lock_fd, kUmapByte, F_UNLCK);
    Lock(f.lock_fd, kKernelByte, F_UNLCK);
  }
}

void NodeFiles::RelockAfterCheckpoint() {
  std::lock_guard<std::mutex> l(mu_);
  for (File& f : files_) {
    if (!f.used) continue;
    if (f.kernel) {
      Lock(f.lock_fd, kKernelByte, F_RDLCK);
      continue;
    }
    struct flock fl = Byte(kUmapByte, f.writer ? F_WRLCK : F_RDLCK);
    if (LockCall(f.lock_fd, F_OFD_SETLK, &fl) != 0) {
      // Another process mapped the file while this one was checkpointed: it is told at its
      // next write or mapping of it; this one's next use of the file finds the conflict.
      UMAP_LOG(kWarn,
               "libumap_preload: after the checkpoint another process of this node "
               "maps file ",
               f.key.dev, ":", f.key.ino, " in a way that conflicts");
    }
  }
}

void NodeFiles::AfterForkInChild() {
  // The parent's watcher thread did not come along; its inotify descriptor did, and is
  // shared with the parent: the child makes its own (Rewatch). The lock descriptions are
  // shared too, on purpose: parent and child never ask each other to give a file up.
  inotify_fd_ = stop_fd_ = -1;
  new (&watcher_) std::thread();
  new (&mu_) std::mutex();
  for (File& f : files_) f.lock_wd = f.data_wd = -1;
}

void NodeFiles::Rewatch(const FileKey& key, int fd) {
  std::lock_guard<std::mutex> l(mu_);
  File* f = Find(key);
  if (f == nullptr || f->lock_wd >= 0 || !StartWatcher()) return;
  Watch(f, fd);
}

void NodeFiles::NowKernel(const FileKey& key) {
  std::lock_guard<std::mutex> l(mu_);
  File* f = Find(key);
  if (f == nullptr || f->kernel) return;
  f->kernel = true;
  Lock(f->lock_fd, kKernelByte, F_RDLCK);
  Lock(f->lock_fd, kUmapByte, F_UNLCK);
}

void NodeFiles::WatchLoop() {
  ReentryGuard guard;  // this thread's own calls go straight to libc
  alignas(inotify_event) char buf[4096];
  for (;;) {
    struct pollfd p[2] = {{inotify_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
    if (p[1].revents != 0) return;
    const ssize_t n = ::read(inotify_fd_, buf, sizeof buf);
    for (ssize_t at = 0; at + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      FileKey key;
      bool request = false, changed = false;
      {
        std::lock_guard<std::mutex> l(mu_);
        for (File& f : files_) {
          if (!f.used || f.kernel) continue;
          if (e->wd == f.lock_wd) request = true;
          if (e->wd == f.data_wd) changed = true;
          if (request || changed) {
            key = f.key;
            break;
          }
        }
      }
      if (request) {
        Conflict(key, "another process of this node asked for it (it maps or writes it too)");
      } else if (changed) {
        struct stat st;
        owner_->ExclusiveOfOwnWrites([&] {
          if (owner_->StatOf(key, &st) == 0) CheckChanged(key, st);
        });
      }
    }
  }
}

}  // namespace umap::preload
