// InodeTable: the FUSE inode numbers umap-faultfuse hands out, one per path of the backing
// directory that the kernel has looked up, with the kernel's lookup count (an inode lives
// until the kernel forgets every lookup). Paths are relative to the backing directory; ""
// is its root, inode FUSE_ROOT_ID.
//
// Thread safety: every method may be called from any thread.
#ifndef UMAP_FAULTINJECT_FUSE_INODE_TABLE_H_
#define UMAP_FAULTINJECT_FUSE_INODE_TABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace umap::faultfuse {

class InodeTable {
 public:
  InodeTable();

  // The inode of `path`, made on first use; counts one lookup.
  uint64_t Lookup(const std::string& path);
  // The path the inode was last known by (after an unlink: its old path), or nullopt for an
  // inode this table never gave out.
  std::optional<std::string> PathOf(uint64_t ino) const;
  // The kernel dropped `n` lookups of `ino`.
  void Forget(uint64_t ino, uint64_t n);
  // `path` was unlinked or removed: a new file there gets a new inode.
  void Unlinked(const std::string& path);
  // `from` was renamed to `to` (and everything below it, for a directory).
  void Renamed(const std::string& from, const std::string& to);

  // `name` inside the directory at `parent` ("" is the root).
  static std::string Child(const std::string& parent, const std::string& name);

 private:
  struct Node {
    std::string path;
    uint64_t lookups = 0;
    bool linked = true;
  };
  mutable absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Node> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> by_path_ ABSL_GUARDED_BY(mu_);
};

}  // namespace umap::faultfuse

#endif  // UMAP_FAULTINJECT_FUSE_INODE_TABLE_H_
