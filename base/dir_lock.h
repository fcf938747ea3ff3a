// DirLock: an exclusive flock(2) lock on a directory, held on a descriptor of the directory
// itself. Nothing deleted, renamed or created inside the directory releases it or lets a
// second holder in: a lock on a file in the directory (a journal's UMAP-OWNER, RocksDB's
// LOCK) stays on the file's inode when the file is deleted, and a new file of the same name
// takes its own lock freely. The journal's owner holds one on its directory for as long as
// it owns it (journal/journal_fence.h).
//
// Direct system calls: a lock is not bytes of a file, and Env (include/umap/env.h) carries
// only bytes. Thread safety: every method may be called from any thread.
#ifndef UMAP_BASE_DIR_LOCK_H_
#define UMAP_BASE_DIR_LOCK_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace umap {

class DirLock {
 public:
  // Takes the lock on `dir` without waiting. Errors: kUnavailable with errno EBUSY when
  // another open description holds it (the message names the holder's pid when /proc/locks
  // shows one on this node); the file system's errno when it locks no directories
  // (EOPNOTSUPP, ENOLCK, EINVAL, ENOSYS, EBADF: see Unsupported) or `dir` cannot be opened.
  static absl::StatusOr<std::unique_ptr<DirLock>> TryLock(const std::string& dir);
  // Whether an error of TryLock means "this file system keeps no flock on directories".
  static bool Unsupported(int err);
  // Closes the descriptor: the lock is released.
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  // Test-only: releases the lock behind its holder's back (a file system that dropped it).
  void TEST_Release();

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  const int fd_;
};

// The pid holding a flock lock on the file or directory with this device and inode, as
// /proc/locks shows it on this node; 0 when none is shown.
pid_t FlockHolder(dev_t device, ino_t inode);

}  // namespace umap

#endif  // UMAP_BASE_DIR_LOCK_H_
