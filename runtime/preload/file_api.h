// FileApi: the program's file API on files it has Umap mappings of — one copy of the file,
// as the kernel's unified page cache gives (docs/preload.md, "One copy").
//
// The kernel's page cache is the single copy of a file that read(2), write(2) and every
// mapping of it share. Umap's cache is a second copy, per mapping. So:
//   - around a call that writes a mapped file (write, pwrite, writev, pwritev, pwritev2;
//     copy_file_range, sendfile and splice into it; ftruncate, truncate, fallocate,
//     posix_fallocate): before it, every writable mapping of the file writes back its dirty
//     blocks of the range the call changes and settles its journal
//     (Runtime::PrepareFileChange; a failure fails the call with that errno, before the
//     file is touched); the call goes to the kernel; after it, every mapping of the file
//     drops its copies of the changed blocks and learns the file's size
//     (Runtime::FileChanged);
//   - before a call that reads a mapped file (read, pread, readv, preadv, preadv2;
//     copy_file_range and sendfile out of it), the writable mappings write back their
//     dirty blocks of the range, so that the kernel returns what the mapping shows;
//   - fsync, fdatasync and sync_file_range of a mapped file umsync its writable mappings
//     first: the kernel's fsync makes stores through a mapping durable too.
// A write that cannot say which bytes it changes (an unknown offset) drops the copies of
// the whole file. A write to a file that another process of the node maps with Umap gives
// the file to the kernel in every process first (NodeFiles). Umap's own I/O on the file
// (InternalIo) and calls made inside the shim (ReentryGuard) go straight to the kernel.
//
// Cost: with no Umap mapping, one relaxed load per call; with one, an fstat of the
// descriptor per call (to tell whether it is a mapped file), and for a mapped file the
// work above.
//
// Thread safety: every method may be called from any thread.
#ifndef UMAP_RUNTIME_PRELOAD_FILE_API_H_
#define UMAP_RUNTIME_PRELOAD_FILE_API_H_

#include <sys/types.h>

#include <cstdint>

#include "runtime/preload/mapping_registry.h"

namespace umap::preload {

struct FileKey {
  uint64_t dev = 0;
  uint64_t ino = 0;
};

class NodeFiles;

class FileApi {
 public:
  // Bytes to the end of the file and beyond (a resize, or an unknown range).
  static constexpr uint64_t kToEnd = ~0ull;

  // `registry` and `nodes` must outlive this object.
  FileApi(MappingRegistry* registry, NodeFiles* nodes) : registry_(registry), nodes_(nodes) {}

  // The file open on `fd`, when the process has a Umap mapping of it (false otherwise,
  // and always while the calling thread does Umap's own I/O).
  bool Mapped(int fd, FileKey* key) const;
  bool MappedPath(const char* path, FileKey* key) const;

  // Before the program writes file bytes [off, off + len) of `key` (len kToEnd: from off
  // to the end, a resize): 0, or -1 with errno, and then the call must fail with it.
  int BeforeWrite(const FileKey& key, uint64_t off, uint64_t len) const;
  // After it wrote `done` bytes from `off` (kToEnd: everything from off), `fd` being a
  // descriptor of the file (-1: none; the size is then read from `path`).
  void AfterWrite(const FileKey& key, int fd, uint64_t off, uint64_t done,
                  const char* path = nullptr) const;
  // Before the program reads file bytes [off, off + len): 0, or -1 with errno.
  int BeforeRead(const FileKey& key, uint64_t off, uint64_t len) const;
  // fsync and friends: every writable mapping of the file writes its dirty blocks back.
  int BeforeSync(const FileKey& key) const { return BeforeRead(key, 0, kToEnd); }

  // Where a read(2)/write(2) on `fd` happens: the descriptor's offset, or the end of the
  // file for O_APPEND. -1 when it cannot be told (the caller then assumes the whole file).
  static int64_t CurrentOffset(int fd, bool for_write);

 private:
  // Calls fn(index, mapping, addr, length) for every mapping of `key` whose cached blocks
  // overlap file bytes [off, off + len); addr/length are that overlap in the mapping.
  template <typename Fn>
  void ForEachOverlap(const FileKey& key, uint64_t off, uint64_t len, Fn&& fn) const;
  bool Has(const FileKey& key) const;
  // BeforeWrite and BeforeRead: PrepareFileChange of every writable mapping's overlap.
  int Prepare(const FileKey& key, uint64_t off, uint64_t len, bool for_read) const;

  MappingRegistry* const registry_;
  NodeFiles* const nodes_;
};

}  // namespace umap::preload

#endif  // UMAP_RUNTIME_PRELOAD_FILE_API_H_
