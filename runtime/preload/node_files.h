// NodeFiles: the other processes of this node that use a file this process maps with Umap
// (docs/preload.md, "Other processes").
//
// The kernel's page cache is one copy of a file for every process of a node; Umap's cache
// is one per process. Two cases follow.
//
// Umap processes coordinate. For each file it maps, a process holds an open file
// description lock on byte 0 of a small node-local file, /dev/shm/umap-files/DEV.INO: a
// read lock while its Umap mappings of the file are read-only, a write lock while one is
// writable. Byte 1, read-locked, says "this process maps the file with the kernel". A
// process about to map a file another process maps with Umap in a way that conflicts (one
// of the two writable), or about to write (write(2), ftruncate, ...) a file it maps while
// another process maps it with Umap, or mapping a file some process maps with the kernel:
//   - gives its own Umap mappings of the file to the kernel and marks the file the
//     kernel's in this process for good (Owner::GiveToKernel), takes byte 1;
//   - asks the others to do the same: it writes the lock file, and their watcher threads
//     (inotify) hand their mappings to the kernel (write-back first: nothing is lost) and
//     release byte 0;
//   - waits until byte 0 is free (at most kAnswerTimeout: then its call fails, EBUSY,
//     naming the file).
// From then on every process maps the file with the kernel: one copy again. A file only
// ever read by several Umap processes stays with Umap in all of them.
//
// Other writers (plain programs, other tools) cannot be asked. A change they make is seen
// through the file's size and times: by the watcher thread (inotify on the mapped file,
// within a few milliseconds of the change) and at every lock the program takes on the
// file (fcntl, flock: a reader that locks, as SQLite does, sees every change made before
// it got the lock). A read-only mapping then drops its copies; a writable one learns a
// smaller size (SIGBUS past it, nothing written back past it).
//
// A fork() child shares its parent's lock descriptions: parent and child never ask each
// other (the child's inherited mappings are read-only views of the file as of the fork).
//
// Thread safety: every method may be called from any thread.
#ifndef UMAP_RUNTIME_PRELOAD_NODE_FILES_H_
#define UMAP_RUNTIME_PRELOAD_NODE_FILES_H_

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "absl/functional/function_ref.h"
#include "runtime/preload/file_api.h"

namespace umap::preload {

class NodeFiles {
 public:
  // What NodeFiles asks of the shim (the shim implements it).
  class Owner {
   public:
    virtual ~Owner() = default;
    // Hands every Umap mapping of the file to the kernel and maps it with the kernel from
    // now on (logged once with `why`, naming `path` or, when empty, the path of one of
    // its mappings); 0 or -1 with errno.
    virtual int GiveToKernel(const FileKey& key, const char* why, const std::string& path) = 0;
    // Another process changed the file (`now` its stat): read-only mappings drop their
    // copies; every mapping learns the size.
    virtual void ChangedElsewhere(const FileKey& key, const struct stat& now) = 0;
    // The file's stat now, through a descriptor of one of its mappings; -1 when it has none.
    virtual int StatOf(const FileKey& key, struct stat* out) = 0;
    // Runs fn while no file API call of the process is between its write and the
    // mappings' update (FileApi): what fn sees of the file is not about to be undone.
    virtual void ExclusiveOfOwnWrites(absl::FunctionRef<void()> fn) = 0;
  };
  enum class Answer { kUmap, kKernel, kFailed };
  static constexpr auto kAnswerTimeout = std::chrono::seconds(30);

  explicit NodeFiles(Owner* owner) : owner_(owner) {}
  // Lives as long as the process: the shim is never destroyed.

  // Before a Umap mapping of the file open on `fd`: kUmap (this process's lock is held),
  // kKernel (the kernel maps it: the other processes' Umap mappings of it were handed to
  // the kernel first), kFailed (errno: EBUSY when they did not answer in time).
  Answer BeforeMap(const FileKey& key, int fd, bool writable);
  // Before this process writes a file it maps with Umap through the file API: 0, or -1
  // with errno EBUSY when other processes' Umap mappings of it did not go in time.
  int BeforeFileWrite(const FileKey& key);
  // The process's last Umap mapping of the file is gone: its lock goes too.
  void Unmapped(const FileKey& key);
  // This process changed the file itself (its size and times are `now`).
  void Wrote(const FileKey& key, const struct stat& now);
  // The program took a lock on the file open on `fd`: a change made by another process
  // before it is seen now.
  void AtLock(int fd);
  // A checkpoint (CRIU refuses to dump a process holding file locks): the lock-file locks
  // go once every runtime quiesced, and are taken again before they resume.
  void ReleaseForCheckpoint();
  void RelockAfterCheckpoint();
  // At exit, before the mappings go: the watcher thread stops (and none starts again).
  void Stop();
  // A fork() child: its watcher thread does not exist; Rewatch starts the child's own for
  // each file it adopts (the open file on `fd`).
  void AfterForkInChild();
  void Rewatch(const FileKey& key, int fd);
  // The process gave its Umap mappings of the file to the kernel on its own account (a
  // second mapping Umap cannot serve): the others learn that the kernel maps it here.
  void NowKernel(const FileKey& key);

 private:
  struct Fingerprint {
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
  };
  struct File {
    FileKey key;
    bool used = false;
    int lock_fd = -1;  // the node-local lock file
    int lock_wd = -1;  // inotify watches: the lock file, the mapped file
    int data_wd = -1;
    bool writer = false;  // holds byte 0 for writing
    bool kernel = false;  // the file is the kernel's in this process
    Fingerprint seen;
  };
  static constexpr int kMaxFiles = 256;

  File* Find(const FileKey& key);          // REQUIRES: mu_
  File* Open(const FileKey& key, int fd);  // REQUIRES: mu_; null (errno) when impossible
  // The watcher's inotify watches of f's lock file and of the mapped file open on `fd`.
  void Watch(File* f, int fd);  // REQUIRES: mu_, the watcher started
  // Gives the file to the kernel here and in every other Umap process (see above).
  // `path` names the file in the log ("" when the process has a mapping of it to ask).
  Answer Conflict(const FileKey& key, const char* why, const std::string& path = "");
  // Whether a lock description other than ours holds (type) byte `byte`.
  bool OthersHold(int lock_fd, int byte, bool write_lock) const;
  void Lock(int lock_fd, int byte, short type) const;
  void CheckChanged(const FileKey& key, const struct stat& now);
  static Fingerprint Of(const struct stat& st);
  bool StartWatcher();  // REQUIRES: mu_
  void WatchLoop();

  Owner* const owner_;
  std::mutex mu_;
  File files_[kMaxFiles];
  int inotify_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: Stop() wakes the watcher
  bool stopped_ = false;
  std::thread watcher_;
};

}  // namespace umap::preload

#endif  // UMAP_RUNTIME_PRELOAD_NODE_FILES_H_
