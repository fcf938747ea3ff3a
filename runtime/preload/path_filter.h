// PathFilter: which files the LD_PRELOAD shim maps with Umap. A file qualifies when its
// path lies under one of the configured prefixes (UMAP_PATHS, colon-separated) or when it
// lives on a file system of one of the configured types (UMAP_FSTYPES, comma-separated
// names as /proc/self/mountinfo spells them: fuse.glusterfs, nfs, nfs4, gpfs, lustre, ...).
//
// Paths are compared after canonicalisation: each prefix goes through realpath() when it
// exists, and a descriptor's path is the kernel's (/proc/self/fd/N), so symbolic links and
// "." or ".." components cannot hide a file from the filter. A prefix matches whole path
// components: "/data" matches "/data" and "/data/x", not "/database".
//
// File-system types come from /proc/self/mountinfo: the mount whose device (major:minor)
// is the file's st_dev. Results are cached per device (a few entries), so a second mapping
// on the same file system reads mountinfo no more.
//
// Thread safety: const methods may be called from any thread; Matches() allocates nothing
// (stack buffers) and takes no lock.
#ifndef UMAP_RUNTIME_PRELOAD_PATH_FILTER_H_
#define UMAP_RUNTIME_PRELOAD_PATH_FILTER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace umap::preload {

class PathFilter {
 public:
  PathFilter() = default;
  // Either list may be null or empty. Empty elements are ignored.
  PathFilter(const char* paths, const char* fstypes);
  PathFilter(const PathFilter&) = delete;
  PathFilter& operator=(const PathFilter&) = delete;

  bool empty() const { return prefixes_.empty() && fstypes_.empty(); }
  const std::vector<std::string>& prefixes() const { return prefixes_; }
  const std::vector<std::string>& fstypes() const { return fstypes_; }

  // True when the open file `fd` qualifies. False for anything that is not a regular file.
  bool Matches(int fd) const;
  // The parts of Matches, for tests.
  bool MatchesPath(std::string_view canonical_path) const;
  bool MatchesFsType(std::string_view type) const;

  // The file-system type of the mount with device `dev`, copied into out (NUL-terminated).
  // False when /proc/self/mountinfo has no such mount or cannot be read.
  static bool FsTypeOfDevice(dev_t dev, char* out, size_t out_len);
  // One line of mountinfo: its type when the line's major:minor is `dev`.
  static bool TypeIfDevice(std::string_view line, dev_t dev, std::string_view* type);

 private:
  bool DeviceMatches(dev_t dev) const;

  std::vector<std::string> prefixes_;  // canonical, no trailing '/' (except "/")
  std::vector<std::string> fstypes_;
  // Per-device verdicts: key = dev + 1 (0: empty), value 1 = on a configured type.
  static constexpr int kCacheSize = 16;
  mutable std::atomic<uint64_t> cache_dev_[kCacheSize] = {};
  mutable std::atomic<int> cache_verdict_[kCacheSize] = {};
  mutable std::atomic<uint32_t> cache_next_{0};
};

}  // namespace umap::preload

#endif  // UMAP_RUNTIME_PRELOAD_PATH_FILTER_H_
