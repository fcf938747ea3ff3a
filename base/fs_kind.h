// What kind of file system a file lives on, by its statfs(2) type: the one table of file
// system types the project keeps. Callers choose their own default for the types it does
// not know (kOther): locking assumes such a file system may be shared between nodes, the
// journal's WAL zero fill assumes it is a local disk.
#ifndef UMAP_BASE_FS_KIND_H_
#define UMAP_BASE_FS_KIND_H_

#include <cstdint>
#include <string>

namespace umap {

enum class FsKind {
  kLocal,    // ext2/3/4, XFS, btrfs, tmpfs, ZFS, F2FS: one node's own file system
  kNetwork,  // FUSE (GlusterFS and any userspace file system), NFS, CIFS/SMB2, Ceph, Lustre,
             // GPFS, IBRIX, AFS: the data crosses a wire or a userspace server
  kOther,    // any other type, or statfs failed
};

FsKind FsKindOfType(int64_t f_type);
// The kind of the file system holding `fd` (kOther if fstatfs fails).
FsKind FsKindOfFd(int fd);
// The kind of the file system holding `path` (kOther if statfs fails).
FsKind FsKindOfPath(const std::string& path);
// True when `fd` is on a FUSE file system (GlusterFS's client among them); false if fstatfs
// fails.
bool IsFuseFd(int fd);

}  // namespace umap

#endif  // UMAP_BASE_FS_KIND_H_
