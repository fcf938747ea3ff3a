#include "base/fs_kind.h"

#include <linux/magic.h>
#include <sys/vfs.h>

namespace umap {

FsKind FsKindOfType(int64_t f_type) {
  switch (static_cast<uint32_t>(f_type)) {
    case EXT4_SUPER_MAGIC:  // also ext2/ext3
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case TMPFS_MAGIC:
    case 0x2fc12fc1:  // ZFS
    case F2FS_SUPER_MAGIC:
      return FsKind::kLocal;
    case FUSE_SUPER_MAGIC:
    case NFS_SUPER_MAGIC:
    case CIFS_SUPER_MAGIC:
    case SMB2_SUPER_MAGIC:
    case 0x00C36400:  // Ceph
    case 0x0BD00BD0:  // Lustre
    case 0x47504653:  // GPFS
    case 0x013111A8:  // IBRIX
    case AFS_FS_MAGIC:
      return FsKind::kNetwork;
    default:
      return FsKind::kOther;
  }
}

FsKind FsKindOfFd(int fd) {
  struct statfs st;
  if (::fstatfs(fd, &st) != 0) return FsKind::kOther;
  return FsKindOfType(static_cast<int64_t>(st.f_type));
}

bool IsFuseFd(int fd) {
  struct statfs st;
  return fd >= 0 && ::fstatfs(fd, &st) == 0 && static_cast<uint32_t>(st.f_type) == FUSE_SUPER_MAGIC;
}

FsKind FsKindOfPath(const std::string& path) {
  struct statfs st;
  if (::statfs(path.c_str(), &st) != 0) return FsKind::kOther;
  return FsKindOfType(static_cast<int64_t>(st.f_type));
}

}  // namespace umap
