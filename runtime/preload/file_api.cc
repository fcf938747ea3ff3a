#include "runtime/preload/file_api.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/internal_io.h"
#include "base/log.h"
#include "runtime/preload/node_files.h"
#include "runtime/preload/umap_c_api.h"

namespace umap::preload {
namespace {

bool KeyOf(const struct stat& st, FileKey* key) {
  if (!S_ISREG(st.st_mode)) return false;
  key->dev = static_cast<uint64_t>(st.st_dev);
  key->ino = static_cast<uint64_t>(st.st_ino);
  return true;
}

}  // namespace

bool FileApi::Has(const FileKey& key) const {
  bool found = false;
  registry_->ForEachLive(
      [&](int, const ShimMapping& m) { found = found || (m.dev == key.dev && m.ino == key.ino); });
  return found;
}

bool FileApi::Mapped(int fd, FileKey* key) const {
  if (registry_->live() == 0 || InternalIo::active()) return false;
  struct stat st;
  return ::fstat(fd, &st) == 0 && KeyOf(st, key) && Has(*key);
}

bool FileApi::MappedPath(const char* path, FileKey* key) const {
  if (registry_->live() == 0 || InternalIo::active() || path == nullptr) return false;
  struct stat st;
  return ::stat(path, &st) == 0 && KeyOf(st, key) && Has(*key);
}

template <typename Fn>
void FileApi::ForEachOverlap(const FileKey& key, uint64_t off, uint64_t len, Fn&& fn) const {
  const uint64_t end = len == kToEnd || off + len < off ? kToEnd : off + len;
  registry_->ForEachLive([&](int i, const ShimMapping& m) {
    if (m.dev != key.dev || m.ino != key.ino) return;
    const uint64_t lo = std::max(off, m.map_offset);
    const uint64_t hi = std::min(end, m.map_offset + m.region_len);
    void* addr = reinterpret_cast<void*>(m.base + (lo < hi ? lo - m.map_offset : 0));
    fn(i, m, addr, lo < hi ? static_cast<size_t>(hi - lo) : size_t{0});
  });
}

int FileApi::BeforeWrite(const FileKey& key, uint64_t off, uint64_t len) const {
  // Another process's Umap cache of the file could not see the write: the file goes to the
  // kernel in every process first.
  if (nodes_->BeforeFileWrite(key) != 0) return -1;
  return Prepare(key, off, len, /*for_read=*/false);
}

int FileApi::BeforeRead(const FileKey& key, uint64_t off, uint64_t len) const {
  // The kernel must return what a writable mapping shows: its stores in the file first.
  return Prepare(key, off, len, /*for_read=*/true);
}

int FileApi::Prepare(const FileKey& key, uint64_t off, uint64_t len, bool for_read) const {
  int err = 0;
  ForEachOverlap(key, off, len, [&](int, const ShimMapping& m, void* addr, size_t n) {
    if (err != 0 || !m.writable() || n == 0) return;
    if (c_api::PrepareFileChange(addr, n, for_read) != 0) {
      err = errno;
      UMAP_LOG(kError, "libumap_preload: the program's ", for_read ? "read of" : "write to",
               " a file it maps with Umap (file offset ", off, ") fails with errno ", err,
               ": its mapping could not write its own changes there back first; the file "
               "was not touched and nothing is lost (the mapping keeps them)");
    }
  });
  if (err == 0) return 0;
  errno = err;
  return -1;
}

void FileApi::AfterWrite(const FileKey& key, int fd, uint64_t off, uint64_t done,
                         const char* path) const {
  struct stat st;
  const int rc = fd >= 0 ? ::fstat(fd, &st) : ::stat(path, &st);
  uint64_t size = rc == 0 ? static_cast<uint64_t>(st.st_size) : kToEnd;
  if (rc == 0) nodes_->Wrote(key, st);
  ForEachOverlap(key, off, done, [&](int i, const ShimMapping& m, void* addr, size_t n) {
    const uint64_t now = size == kToEnd ? m.file_size : size;
    if (n == 0 && now == m.file_size) return;
    const int64_t kept =
        c_api::FileChanged(n == 0 ? reinterpret_cast<void*>(m.base) : addr, n, now);
    if (kept < 0) {
      UMAP_LOG(kError,
               "libumap_preload: a Umap mapping could not take in the program's write "
               "to its file (errno ",
               errno, ")");
    } else if (kept > 0) {
      UMAP_LOG(kDebug, "libumap_preload: ", kept,
               " blocks stored to while the program wrote "
               "the same file keep their bytes");
    }
    registry_->SetFileSize(i, now);
  });
}

int64_t FileApi::CurrentOffset(int fd, bool for_write) {
  if (for_write) {
    const int fl = ::fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_APPEND) != 0) {
      struct stat st;
      return ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
    }
  }
  const off_t at = ::lseek(fd, 0, SEEK_CUR);
  return at < 0 ? -1 : static_cast<int64_t>(at);
}

}  // namespace umap::preload
