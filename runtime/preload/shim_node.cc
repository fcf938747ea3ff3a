// Shim: what the node's other processes do to the files it maps (NodeFiles::Owner).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/log.h"
#include "runtime/preload/shim.h"
#include "runtime/preload/umap_c_api.h"

namespace umap::preload {

int Shim::StatOf(const FileKey& key, struct stat* out) {
  int rc = -1;
  registry_.ForEachLive([&](int, const ShimMapping& m) {
    if (rc != 0 && m.dev == key.dev && m.ino == key.ino) rc = ::fstat(m.fd, out);
  });
  return rc;
}

void Shim::ChangedElsewhere(const FileKey& key, const struct stat& now) {
  ReentryGuard guard;
  const uint64_t size = static_cast<uint64_t>(now.st_size);
  registry_.ForEachLive([&](int index, const ShimMapping& m) {
    if (m.dev != key.dev || m.ino != key.ino) return;
    // A read-only mapping's copies may all be stale. A writable one's own write-backs move
    // the file's times too: Mapping::ForeignChange tells them apart as well as it can.
    const bool read_only = !m.writable();
    const int64_t kept =
        read_only ? c_api::FileChanged(reinterpret_cast<void*>(m.base), m.region_len, size)
                  : c_api::ForeignChange(reinterpret_cast<void*>(m.base), size);
    if (kept < 0) {
      UMAP_LOG(kError, "libumap_preload: a Umap mapping of ", FdPath(m.fd),
               " could not take in another process's change of it (errno ", errno, ")");
      return;
    }
    registry_.SetFileSize(index, size);
    UMAP_LOG(kDebug, "libumap_preload: ", FdPath(m.fd),
             " changed in another process: ", read_only ? "copies dropped" : "its size learnt",
             ", size ", size);
  });
}

void Shim::AfterUnmap(uint64_t dev, uint64_t ino) {
  bool any = false;
  registry_.ForEachLive(
      [&](int, const ShimMapping& m) { any = any || (m.dev == dev && m.ino == ino); });
  if (!any) nodes_.Unmapped({dev, ino});
}

}  // namespace umap::preload
