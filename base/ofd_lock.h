// OfdLockFile: byte-range locks owned by an open file description (fcntl F_OFD_SETLK,
// F_OFD_GETLK), on a description of its own, plus the small records that let a refused
// locker name the holder.
//
// Why open file description locks: a process-associated lock (F_SETLK) is dropped when the
// process closes *any* descriptor of the file, and two mappings of one file in one process
// would share it. An OfdLockFile opens the file again, so its locks belong to it alone: they
// conflict with every other description (another mapping of the same process, another
// process, a process on another node of a file system whose locks are cluster-wide), and
// are dropped when it is destroyed, or when the process dies.
//
// Naming the holder: Linux reports l_pid = -1 for an open file description lock (the lock
// belongs to no process), and a lock held on another node has no local pid at all. So a
// holder also leaves an owner record: an extended attribute `user.umap.owner.<id>` on the
// file (SetOwnerRecord), read by a refused locker (OwnerRecords). Records are best effort:
// a file system without user xattrs keeps none, a killed holder leaves a stale one (it is
// only believed next to a lock that conflicts now).
//
// Direct system calls: locks and extended attributes are not bytes of the file, and Env
// (include/umap/env.h) carries only bytes. Thread safety: every method may be called from
// any thread (the kernel serialises the lock table).
#ifndef UMAP_BASE_OFD_LOCK_H_
#define UMAP_BASE_OFD_LOCK_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace umap {

// A lock that stands in the way (F_OFD_GETLK's answer).
struct LockConflict {
  uint64_t start = 0;
  uint64_t length = 0;  // 0: to the end of the file, and beyond
  bool exclusive = false;
  pid_t pid = 0;  // as the file system reports it; <= 0: not reported
  // "a write lock on bytes [s, e)" ("... from s to the end of the file").
  std::string Describe() const;
};

class OfdLockFile {
 public:
  // A new open file description of the file open on `fd` (through /proc/self/fd), close-on-
  // exec. `write`: open O_RDWR (write locks need a descriptor open for writing).
  static absl::StatusOr<std::unique_ptr<OfdLockFile>> Reopen(int fd, bool write);
  // Opens `path` (O_RDWR, created 0600 with `create`); `direct` adds, on a file system shared
  // between nodes (OnSharedFileSystem), a second, read-only O_DIRECT description for
  // ReadFresh where the file system allows it (local file systems have no stale cache).
  static absl::StatusOr<std::unique_ptr<OfdLockFile>> Open(const std::string& path, bool create,
                                                           bool direct);
  // Closes the description: every lock it holds is released.
  ~OfdLockFile();
  OfdLockFile(const OfdLockFile&) = delete;
  OfdLockFile& operator=(const OfdLockFile&) = delete;

  // Takes a lock on [start, start+length) (length 0: to the end, and beyond) without
  // waiting. nullopt: taken (or already ours). A LockConflict: another description holds a
  // conflicting lock (EAGAIN/EACCES), nothing was taken. An error (errno kept): the file
  // system refused locking itself (ENOLCK, EOPNOTSUPP, ENOSYS, EINVAL, ...).
  absl::StatusOr<std::optional<LockConflict>> TryLock(uint64_t start, uint64_t length,
                                                      bool exclusive);
  absl::Status Unlock(uint64_t start, uint64_t length);
  // What such a lock would conflict with now, without taking it; nullopt: nothing. Locks of
  // this same description never conflict with it: to test whether a lock of ours still
  // stands, test from another OfdLockFile of the same file.
  absl::StatusOr<std::optional<LockConflict>> Test(uint64_t start, uint64_t length,
                                                   bool exclusive);

  // Small records in the file itself (the journal's owner record): pread through the
  // O_DIRECT description when there is one (so that a DFS client's page cache cannot show
  // an older record than the servers hold), else the plain one. Short reads return less.
  absl::StatusOr<size_t> ReadFresh(uint64_t offset, absl::Span<char> dst);
  // pwrite of all of src, then fdatasync.
  absl::Status WriteDurably(uint64_t offset, absl::Span<const char> src);

  // Owner records (extended attributes user.umap.owner.<id>). Set and Remove fail with the
  // file system's errno (ENOTSUP: it keeps none); OwnerRecords lists (id, value) pairs, empty
  // when it keeps none.
  absl::Status SetOwnerRecord(const std::string& id, const std::string& value);
  absl::Status RemoveOwnerRecord(const std::string& id);
  std::vector<std::pair<std::string, std::string>> OwnerRecords();

  // Whether `path` still names this description's file (the same device and inode): false
  // once the file was deleted, or replaced by another. Errors: the file system's (other
  // than ENOENT/ENOTDIR, which mean false).
  absl::StatusOr<bool> PathNamesThisFile(const std::string& path);
  const std::string& name() const { return name_; }
  int fd() const { return fd_; }

 private:
  OfdLockFile(int fd, int direct_fd, std::string name)
      : fd_(fd), direct_fd_(direct_fd), name_(std::move(name)) {}
  const int fd_;
  const int direct_fd_;  // -1: none
  const std::string name_;
};

// Whether the write lock `mine` took on [start, start+length) still stands, asked through
// `probe`, a second description of the same file (file systems drop locks: an NFS lease
// that expired, a GlusterFS client that lost its servers; some give them back to nobody in
// particular on reconnect). The probe must see a conflicting lock (else nobody holds it:
// lost); asking again for ours through `mine` must then succeed (a no-op while ours stands;
// refused when the conflicting lock is another holder's: lost, with `other` set).
struct LockCheck {
  bool held = false;
  std::optional<LockConflict> other;  // who holds it now, when not we
};
absl::StatusOr<LockCheck> CheckWriteLock(OfdLockFile& mine, OfdLockFile& probe, uint64_t start,
                                         uint64_t length);

// True when `fd` is on a file system shared between nodes (NFS, FUSE such as GlusterFS,
// CephFS, GPFS, Lustre, SMB): its client may cache what another node wrote since.
bool OnSharedFileSystem(int fd);

// Who this process is, for owner records and messages: "pid 4242 on node-a (uid 1000)".
std::string ThisProcessName();
// The host name (uname's nodename).
std::string HostName();
// When this process started, in clock ticks since boot (/proc/self/stat field 22): with the
// host and the pid it tells a process apart from a later one that reused its pid.
uint64_t ProcessStartTicks(pid_t pid);

}  // namespace umap

#endif  // UMAP_BASE_OFD_LOCK_H_
