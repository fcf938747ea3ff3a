#include "faultinject/fuse/fault_fuse_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <vector>

namespace umap::faultfuse {
namespace {

// Attributes and entries are never cached by the kernel: tests change backing files behind
// the mount's back, and a size the kernel remembered would cut reads short.
constexpr double kNoCache = 0.0;

const char* Rel(const std::string& path) { return path.empty() ? "." : path.c_str(); }

struct DirHandle {
  DIR* dp = nullptr;
  off_t offset = 0;
  dirent* entry = nullptr;
};

// Reads up to `len` bytes at `off` (fewer only at end of file); -errno on error.
int64_t PreadFully(int fd, char* buf, size_t len, uint64_t off) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd, buf + done, len - done, static_cast<off_t>(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<int64_t>(done);
}

// Writes all `len` bytes at `off`; -errno on error.
int64_t PwriteFully(int fd, const char* buf, size_t len, uint64_t off) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pwrite(fd, buf + done, len - done, static_cast<off_t>(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) return -EIO;
    done += static_cast<size_t>(n);
  }
  return static_cast<int64_t>(done);
}

}  // namespace

FaultFuseFs::FaultFuseFs(int backing_fd, DirectIo direct_io, bool async_dio,
                         unsigned max_background)
    : root_fd_(backing_fd),
      direct_io_(direct_io),
      async_dio_(async_dio),
      max_background_(max_background),
      stalls_(&book_, [this](HeldRequest& r, std::optional<int> error) {
        Finish(r, r.data.data(), error);
      }) {}

FaultFuseFs::~FaultFuseFs() {
  stalls_.Stop();
  ::close(root_fd_);
}

FaultFuseFs* FaultFuseFs::Of(fuse_req_t req) {
  return static_cast<FaultFuseFs*>(fuse_req_userdata(req));
}

FaultFuseFs::Handle* FaultFuseFs::HandleOf(const fuse_file_info* fi) {
  return reinterpret_cast<Handle*>(static_cast<uintptr_t>(fi->fh));
}

void FaultFuseFs::Init(fuse_conn_info* conn) {
  // Write-through, as the runtime's durability reasoning assumes of a DFS client: a write
  // the kernel acknowledged reached this daemon.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  if (!async_dio_) conn->want &= ~FUSE_CAP_ASYNC_DIO;
  // Past max_background outstanding asynchronous requests the kernel blocks the next
  // submitter (an io_uring_submit included) until one is answered.
  if (max_background_ != 0) {
    conn->max_background = max_background_;
    conn->congestion_threshold = max_background_ * 3 / 4;
  }
}

std::optional<std::string> FaultFuseFs::PathOrReply(fuse_req_t req, fuse_ino_t ino) {
  std::optional<std::string> path = inodes_.PathOf(ino);
  if (!path) fuse_reply_err(req, ESTALE);
  return path;
}

bool FaultFuseFs::FillEntry(const std::string& path, fuse_entry_param* e, int* err) {
  *e = {};
  if (::fstatat(root_fd_, Rel(path), &e->attr, AT_SYMLINK_NOFOLLOW) != 0) {
    *err = errno;
    return false;
  }
  e->ino = inodes_.Lookup(path);
  e->attr_timeout = kNoCache;
  e->entry_timeout = kNoCache;
  return true;
}

void FaultFuseFs::Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  std::optional<std::string> dir = PathOrReply(req, parent);
  if (!dir) return;
  fuse_entry_param e;
  int err;
  if (!FillEntry(InodeTable::Child(*dir, name), &e, &err)) {
    fuse_reply_err(req, err);
    return;
  }
  fuse_reply_entry(req, &e);
}

void FaultFuseFs::GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  struct stat st;
  int rc;
  if (fi != nullptr) {
    rc = ::fstat(HandleOf(fi)->fd, &st);
  } else {
    std::optional<std::string> path = PathOrReply(req, ino);
    if (!path) return;
    rc = ::fstatat(root_fd_, Rel(*path), &st, AT_SYMLINK_NOFOLLOW);
  }
  if (rc != 0) {
    fuse_reply_err(req, errno);
    return;
  }
  fuse_reply_attr(req, &st, kNoCache);
}

void FaultFuseFs::SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                          fuse_file_info* fi) {
  std::optional<std::string> path = PathOrReply(req, ino);
  if (!path) return;
  const int fd = fi != nullptr ? HandleOf(fi)->fd : -1;
  int rc = 0;
  if (to_set & FUSE_SET_ATTR_MODE) {
    rc = fd >= 0 ? ::fchmod(fd, attr->st_mode) : ::fchmodat(root_fd_, Rel(*path), attr->st_mode, 0);
  }
  if (rc == 0 && (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
    const uid_t uid = (to_set & FUSE_SET_ATTR_UID) ? attr->st_uid : static_cast<uid_t>(-1);
    const gid_t gid = (to_set & FUSE_SET_ATTR_GID) ? attr->st_gid : static_cast<gid_t>(-1);
    rc = ::fchownat(root_fd_, Rel(*path), uid, gid, AT_SYMLINK_NOFOLLOW);
  }
  if (rc == 0 && (to_set & FUSE_SET_ATTR_SIZE)) {
    if (fd >= 0) {
      rc = ::ftruncate(fd, attr->st_size);
    } else {
      const int tfd = ::openat(root_fd_, Rel(*path), O_WRONLY | O_CLOEXEC);
      rc = tfd < 0 ? -1 : ::ftruncate(tfd, attr->st_size);
      if (tfd >= 0) {
        const int saved = errno;
        ::close(tfd);
        errno = saved;
      }
    }
  }
  if (rc == 0 && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
    timespec tv[2];
    tv[0] = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? timespec{0, UTIME_NOW}
            : (to_set & FUSE_SET_ATTR_ATIME)   ? attr->st_atim
                                               : timespec{0, UTIME_OMIT};
    tv[1] = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? timespec{0, UTIME_NOW}
            : (to_set & FUSE_SET_ATTR_MTIME)   ? attr->st_mtim
                                               : timespec{0, UTIME_OMIT};
    rc = fd >= 0 ? ::futimens(fd, tv) : ::utimensat(root_fd_, Rel(*path), tv, AT_SYMLINK_NOFOLLOW);
  }
  if (rc != 0) {
    fuse_reply_err(req, errno);
    return;
  }
  GetAttr(req, ino, fi);
}

void FaultFuseFs::MkDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  std::optional<std::string> dir = PathOrReply(req, parent);
  if (!dir) return;
  const std::string path = InodeTable::Child(*dir, name);
  fuse_entry_param e;
  int err;
  if (::mkdirat(root_fd_, path.c_str(), mode) != 0) {
    fuse_reply_err(req, errno);
  } else if (!FillEntry(path, &e, &err)) {
    fuse_reply_err(req, err);
  } else {
    fuse_reply_entry(req, &e);
  }
}

void FaultFuseFs::Remove(fuse_req_t req, fuse_ino_t parent, const char* name, bool dir) {
  std::optional<std::string> parent_path = PathOrReply(req, parent);
  if (!parent_path) return;
  const std::string path = InodeTable::Child(*parent_path, name);
  if (::unlinkat(root_fd_, path.c_str(), dir ? AT_REMOVEDIR : 0) != 0) {
    fuse_reply_err(req, errno);
    return;
  }
  inodes_.Unlinked(path);
  fuse_reply_err(req, 0);
}

void FaultFuseFs::Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                         const char* newname, unsigned flags) {
  if (flags != 0) {  // RENAME_EXCHANGE / RENAME_NOREPLACE: not needed by any test
    fuse_reply_err(req, EINVAL);
    return;
  }
  std::optional<std::string> from_dir = PathOrReply(req, parent);
  if (!from_dir) return;
  std::optional<std::string> to_dir = PathOrReply(req, newparent);
  if (!to_dir) return;
  const std::string from = InodeTable::Child(*from_dir, name);
  const std::string to = InodeTable::Child(*to_dir, newname);
  if (::renameat(root_fd_, from.c_str(), root_fd_, to.c_str()) != 0) {
    fuse_reply_err(req, errno);
    return;
  }
  inodes_.Renamed(from, to);
  fuse_reply_err(req, 0);
}

void FaultFuseFs::Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  std::optional<std::string> path = PathOrReply(req, ino);
  if (!path) return;
  HeldRequest r;
  r.req = req;
  r.op = FuseOp::kOpen;
  r.path = *path;
  r.ino = ino;
  r.fi = *fi;
  Dispatch(r, nullptr, (fi->flags & O_DIRECT) != 0);
}

int64_t FaultFuseFs::FinishOpen(HeldRequest& r) {
  // The backing file never gets O_DIRECT: the caller's O_DIRECT is honoured by the kernel
  // side (FOPEN_DIRECT_IO), and the backing directory may be on a file system without it.
  const bool direct = (r.fi.flags & O_DIRECT) != 0;
  const int flags = (r.fi.flags & ~(O_DIRECT | O_CREAT | O_EXCL | O_NOCTTY)) | O_CLOEXEC;
  const int fd = ::openat(root_fd_, Rel(r.path), flags);
  if (fd < 0) {
    const int err = errno;
    book_.Replied(r.op, r.request, -err);
    fuse_reply_err(r.req, err);
    return -err;
  }
  r.fi.fh = reinterpret_cast<uintptr_t>(new Handle{fd, direct, r.path});
  r.fi.direct_io = direct_io_ == DirectIo::kAll || (direct_io_ == DirectIo::kODirect && direct);
  r.fi.keep_cache = 0;
  book_.Replied(r.op, r.request, 0);
  if (fuse_reply_open(r.req, &r.fi) != 0) {
    // The open was interrupted and the kernel forgot it: no release will come.
    Handle* h = HandleOf(&r.fi);
    ::close(h->fd);
    delete h;
  }
  return 0;
}

void FaultFuseFs::Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                         fuse_file_info* fi) {
  std::optional<std::string> dir = PathOrReply(req, parent);
  if (!dir) return;
  const std::string path = InodeTable::Child(*dir, name);
  const bool direct = (fi->flags & O_DIRECT) != 0;
  const int fd = ::openat(root_fd_, path.c_str(),
                          (fi->flags & ~(O_DIRECT | O_NOCTTY)) | O_CREAT | O_CLOEXEC, mode);
  if (fd < 0) {
    fuse_reply_err(req, errno);
    return;
  }
  fuse_entry_param e;
  int err;
  if (!FillEntry(path, &e, &err)) {
    ::close(fd);
    fuse_reply_err(req, err);
    return;
  }
  fi->fh = reinterpret_cast<uintptr_t>(new Handle{fd, direct, path});
  fi->direct_io = direct_io_ == DirectIo::kAll || (direct_io_ == DirectIo::kODirect && direct);
  fi->keep_cache = 0;
  if (fuse_reply_create(req, &e, fi) != 0) {
    Handle* h = HandleOf(fi);
    ::close(h->fd);
    delete h;
  }
}

void FaultFuseFs::Read(fuse_req_t req, size_t size, off_t off, fuse_file_info* fi) {
  Handle* h = HandleOf(fi);
  HeldRequest r;
  r.req = req;
  r.op = FuseOp::kRead;
  r.path = h->path;
  r.fi = *fi;
  r.offset = static_cast<uint64_t>(off);
  r.size = size;
  Dispatch(r, nullptr, h->direct);
}

void FaultFuseFs::Write(fuse_req_t req, const char* buf, size_t size, off_t off,
                        fuse_file_info* fi) {
  Handle* h = HandleOf(fi);
  HeldRequest r;
  r.req = req;
  r.op = FuseOp::kWrite;
  r.path = h->path;
  r.fi = *fi;
  r.offset = static_cast<uint64_t>(off);
  r.size = size;
  Dispatch(r, buf, h->direct);
}

void FaultFuseFs::Flush(fuse_req_t req, fuse_file_info* fi) {
  Handle* h = HandleOf(fi);
  HeldRequest r;
  r.req = req;
  r.op = FuseOp::kFlush;
  r.path = h->path;
  r.fi = *fi;
  Dispatch(r, nullptr, h->direct);
}

void FaultFuseFs::Fsync(fuse_req_t req, int datasync, fuse_file_info* fi) {
  Handle* h = HandleOf(fi);
  HeldRequest r;
  r.req = req;
  r.op = FuseOp::kFsync;
  r.path = h->path;
  r.fi = *fi;
  r.datasync = datasync;
  Dispatch(r, nullptr, h->direct);
}

void FaultFuseFs::Release(fuse_req_t req, fuse_file_info* fi) {
  // The kernel sends RELEASE only after every request on the handle has been answered, so
  // no held request still uses it.
  Handle* h = HandleOf(fi);
  ::close(h->fd);
  delete h;
  fuse_reply_err(req, 0);
}

void FaultFuseFs::Dispatch(HeldRequest& r, const char* data, bool direct) {
  const RuleBook::Decision d = book_.Arrive(r.op, r.path, r.offset, r.size, direct);
  r.request = d.request;
  r.outcome = d.outcome;
  if (r.op == FuseOp::kWrite && r.outcome.tear_bytes) {
    // A torn write: the prefix reaches the file now, whatever the stall does later, as when
    // a server crashes in the middle of a write.
    const size_t prefix = std::min<uint64_t>(*r.outcome.tear_bytes, r.size);
    const int64_t n = PwriteFully(HandleOf(&r.fi)->fd, data, prefix, r.offset);
    if (n < 0) r.outcome.error = static_cast<int>(-n);
  }
  if (r.outcome.stall == Outcome::Stall::kNone) {
    Finish(r, data, std::nullopt);
    return;
  }
  auto held = std::make_unique<HeldRequest>(r);
  if (r.op == FuseOp::kWrite && !r.outcome.tear_bytes) held->data.assign(data, r.size);
  stalls_.Hold(std::move(held));
}

void FaultFuseFs::Finish(HeldRequest& r, const char* data, std::optional<int> error) {
  int err = error.value_or(r.outcome.error);
  if (err == 0 && r.op == FuseOp::kWrite && r.outcome.tear_bytes) err = EIO;
  if (err != 0) {
    book_.Replied(r.op, r.request, -err);
    fuse_reply_err(r.req, err);
    return;
  }
  switch (r.op) {
    case FuseOp::kRead:
      FinishRead(r);
      return;
    case FuseOp::kWrite:
      FinishWrite(r, data);
      return;
    case FuseOp::kFsync:
      FinishFsync(r);
      return;
    case FuseOp::kOpen:
      FinishOpen(r);
      return;
    case FuseOp::kFlush:
      book_.Replied(r.op, r.request, 0);
      fuse_reply_err(r.req, 0);
      return;
  }
}

int64_t FaultFuseFs::FinishRead(HeldRequest& r) {
  const size_t want = std::min<uint64_t>(r.size, r.outcome.short_bytes.value_or(r.size));
  std::vector<char> buf(want);
  const int64_t n = PreadFully(HandleOf(&r.fi)->fd, buf.data(), want, r.offset);
  book_.Replied(r.op, r.request, n);
  if (n < 0) {
    fuse_reply_err(r.req, static_cast<int>(-n));
  } else {
    fuse_reply_buf(r.req, buf.data(), static_cast<size_t>(n));
  }
  return n;
}

int64_t FaultFuseFs::FinishWrite(HeldRequest& r, const char* data) {
  const size_t len = std::min<uint64_t>(r.size, r.outcome.short_bytes.value_or(r.size));
  const int64_t n = PwriteFully(HandleOf(&r.fi)->fd, data, len, r.offset);
  book_.Replied(r.op, r.request, n);
  if (n < 0) {
    fuse_reply_err(r.req, static_cast<int>(-n));
  } else {
    fuse_reply_write(r.req, static_cast<size_t>(n));
  }
  return n;
}

int64_t FaultFuseFs::FinishFsync(HeldRequest& r) {
  if (r.outcome.ignore_sync) {
    book_.NoteIgnoredSync();
    book_.Replied(r.op, r.request, 0);
    fuse_reply_err(r.req, 0);
    return 0;
  }
  const int fd = HandleOf(&r.fi)->fd;
  const int rc = r.datasync ? ::fdatasync(fd) : ::fsync(fd);
  const int err = rc == 0 ? 0 : errno;
  book_.Replied(r.op, r.request, -err);
  fuse_reply_err(r.req, err);
  return -err;
}

void FaultFuseFs::OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  std::optional<std::string> path = PathOrReply(req, ino);
  if (!path) return;
  const int fd = ::openat(root_fd_, Rel(*path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    fuse_reply_err(req, errno);
    return;
  }
  auto d = std::make_unique<DirHandle>();
  d->dp = ::fdopendir(fd);
  if (d->dp == nullptr) {
    const int err = errno;
    ::close(fd);
    fuse_reply_err(req, err);
    return;
  }
  fi->fh = reinterpret_cast<uintptr_t>(d.get());
  if (fuse_reply_open(req, fi) == 0) {
    d.release();
  } else {
    ::closedir(d->dp);
  }
}

void FaultFuseFs::ReadDir(fuse_req_t req, size_t size, off_t off, fuse_file_info* fi) {
  DirHandle* d = reinterpret_cast<DirHandle*>(static_cast<uintptr_t>(fi->fh));
  if (off != d->offset) {
    ::seekdir(d->dp, off);
    d->entry = nullptr;
    d->offset = off;
  }
  std::vector<char> buf(size);
  size_t used = 0;
  for (;;) {
    if (d->entry == nullptr) {
      errno = 0;
      d->entry = ::readdir(d->dp);
      if (d->entry == nullptr) {
        if (errno != 0 && used == 0) {
          fuse_reply_err(req, errno);
          return;
        }
        break;
      }
    }
    struct stat st = {};
    st.st_ino = d->entry->d_ino;
    st.st_mode = static_cast<mode_t>(d->entry->d_type) << 12;
    const size_t n = fuse_add_direntry(req, buf.data() + used, size - used, d->entry->d_name, &st,
                                       d->entry->d_off);
    if (n > size - used) break;  // the entry is kept for the next call
    used += n;
    d->offset = d->entry->d_off;
    d->entry = nullptr;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void FaultFuseFs::ReleaseDir(fuse_req_t req, fuse_file_info* fi) {
  DirHandle* d = reinterpret_cast<DirHandle*>(static_cast<uintptr_t>(fi->fh));
  ::closedir(d->dp);
  delete d;
  fuse_reply_err(req, 0);
}

void FaultFuseFs::StatFs(fuse_req_t req) {
  struct statvfs st;
  if (::fstatvfs(root_fd_, &st) != 0) {
    fuse_reply_err(req, errno);
    return;
  }
  fuse_reply_statfs(req, &st);
}

const fuse_lowlevel_ops& FaultFuseFs::Ops() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o = {};
    o.init = [](void* fs, fuse_conn_info* conn) { static_cast<FaultFuseFs*>(fs)->Init(conn); };
    o.lookup = [](fuse_req_t req, fuse_ino_t parent, const char* name) {
      Of(req)->Lookup(req, parent, name);
    };
    o.forget = [](fuse_req_t req, fuse_ino_t ino, uint64_t n) {
      Of(req)->inodes_.Forget(ino, n);
      fuse_reply_none(req);
    };
    o.forget_multi = [](fuse_req_t req, size_t count, fuse_forget_data* forgets) {
      for (size_t i = 0; i < count; ++i)
        Of(req)->inodes_.Forget(forgets[i].ino, forgets[i].nlookup);
      fuse_reply_none(req);
    };
    o.getattr = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Of(req)->GetAttr(req, ino, fi);
    };
    o.setattr = [](fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                   fuse_file_info* fi) { Of(req)->SetAttr(req, ino, attr, to_set, fi); };
    o.mkdir = [](fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
      Of(req)->MkDir(req, parent, name, mode);
    };
    o.unlink = [](fuse_req_t req, fuse_ino_t parent, const char* name) {
      Of(req)->Remove(req, parent, name, /*dir=*/false);
    };
    o.rmdir = [](fuse_req_t req, fuse_ino_t parent, const char* name) {
      Of(req)->Remove(req, parent, name, /*dir=*/true);
    };
    o.rename = [](fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                  const char* newname, unsigned flags) {
      Of(req)->Rename(req, parent, name, newparent, newname, flags);
    };
    o.open = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Of(req)->Open(req, ino, fi);
    };
    o.create = [](fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                  fuse_file_info* fi) { Of(req)->Create(req, parent, name, mode, fi); };
    o.read = [](fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
      Of(req)->Read(req, size, off, fi);
    };
    o.write = [](fuse_req_t req, fuse_ino_t, const char* buf, size_t size, off_t off,
                 fuse_file_info* fi) { Of(req)->Write(req, buf, size, off, fi); };
    o.flush = [](fuse_req_t req, fuse_ino_t, fuse_file_info* fi) { Of(req)->Flush(req, fi); };
    o.release = [](fuse_req_t req, fuse_ino_t, fuse_file_info* fi) { Of(req)->Release(req, fi); };
    o.fsync = [](fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
      Of(req)->Fsync(req, datasync, fi);
    };
    o.opendir = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Of(req)->OpenDir(req, ino, fi);
    };
    o.readdir = [](fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
      Of(req)->ReadDir(req, size, off, fi);
    };
    o.releasedir = [](fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
      Of(req)->ReleaseDir(req, fi);
    };
    o.statfs = [](fuse_req_t req, fuse_ino_t) { Of(req)->StatFs(req); };
    return o;
  }();
  return ops;
}

}  // namespace umap::faultfuse
