// FaultFuseFs: the file system of umap-faultfuse, on libfuse3's low-level API. It passes
// every request through to a backing directory (the files below the mount point are the
// files below the backing directory, byte for byte) and lets a RuleBook decide, for each
// read, write, fsync, open and flush, whether it proceeds, fails, is short, tears or
// stalls (fuse_rule.h).
//
// Direct I/O: where the runtime opens a file with O_DIRECT the handle is opened with
// FOPEN_DIRECT_IO (mode kODirect, the default), so each read or write the caller makes is
// one request of exactly its size, never served or merged by the kernel's page cache;
// kAll does this for every open (then mmap of the files fails with ENODEV, as on a DFS
// mounted with direct I/O), kNone for none (the kernel handles O_DIRECT itself). The
// backing file itself is always opened without O_DIRECT.
//
// Inode numbers: the FUSE node ids are this daemon's own (InodeTable); the st_ino that
// stat() shows is the backing file's, so a file keeps its identity (device and inode) for
// as long as the mount lives, whatever the kernel forgets in between.
//
// Thread safety: libfuse calls the operations from its worker threads concurrently; the
// state they share is the RuleBook's, the InodeTable's and the StallQueue's, each locked.
#ifndef UMAP_FAULTINJECT_FUSE_FAULT_FUSE_FS_H_
#define UMAP_FAULTINJECT_FUSE_FAULT_FUSE_FS_H_

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <optional>
#include <string>

#include "faultinject/fuse/inode_table.h"
#include "faultinject/fuse/rule_book.h"
#include "faultinject/fuse/stall_queue.h"

namespace umap::faultfuse {

enum class DirectIo { kNone, kODirect, kAll };

class FaultFuseFs {
 public:
  // `backing_fd`: an O_PATH or O_DIRECTORY descriptor of the backing directory (owned).
  // `max_background`: how many asynchronous requests (async direct I/O, read-ahead) the
  // kernel keeps outstanding before it makes the next submitter wait (0: the kernel's
  // default, 12).
  FaultFuseFs(int backing_fd, DirectIo direct_io, bool async_dio, unsigned max_background);
  ~FaultFuseFs();

  // The operation table; libfuse's userdata must be this object.
  static const fuse_lowlevel_ops& Ops();

  RuleBook& book() { return book_; }
  StallQueue& stalls() { return stalls_; }

 private:
  // An open file: its backing descriptor, whether the caller opened it O_DIRECT, and its
  // path at open time (what rules match).
  struct Handle {
    int fd;
    bool direct;
    std::string path;
  };
  static FaultFuseFs* Of(fuse_req_t req);
  static Handle* HandleOf(const fuse_file_info* fi);

  // The operations (static trampolines in the .cc call these).
  void Init(fuse_conn_info* conn);
  void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi);
  void MkDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode);
  void Remove(fuse_req_t req, fuse_ino_t parent, const char* name, bool dir);
  void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned flags);
  void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi);
  void Read(fuse_req_t req, size_t size, off_t off, fuse_file_info* fi);
  void Write(fuse_req_t req, const char* buf, size_t size, off_t off, fuse_file_info* fi);
  void Flush(fuse_req_t req, fuse_file_info* fi);
  void Fsync(fuse_req_t req, int datasync, fuse_file_info* fi);
  void Release(fuse_req_t req, fuse_file_info* fi);
  void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void ReadDir(fuse_req_t req, size_t size, off_t off, fuse_file_info* fi);
  void ReleaseDir(fuse_req_t req, fuse_file_info* fi);
  void StatFs(fuse_req_t req);

  // Runs a request through the rules: finishes it at once, or holds it.
  void Dispatch(HeldRequest& r, const char* data, bool direct);
  // Does the request's I/O per its outcome (or fails it with `error`) and replies.
  void Finish(HeldRequest& r, const char* data, std::optional<int> error);
  int64_t FinishRead(HeldRequest& r);
  int64_t FinishWrite(HeldRequest& r, const char* data);
  int64_t FinishFsync(HeldRequest& r);
  int64_t FinishOpen(HeldRequest& r);
  // Replies a lookup/create entry for `path` (stat'ed now); false if it replied an error.
  bool FillEntry(const std::string& path, fuse_entry_param* e, int* err);
  std::optional<std::string> PathOrReply(fuse_req_t req, fuse_ino_t ino);

  const int root_fd_;
  const DirectIo direct_io_;
  const bool async_dio_;
  const unsigned max_background_;
  InodeTable inodes_;
  RuleBook book_;
  StallQueue stalls_;
};

}  // namespace umap::faultfuse

#endif  // UMAP_FAULTINJECT_FUSE_FAULT_FUSE_FS_H_
