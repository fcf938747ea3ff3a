// RealFileCalls: the libc file calls the LD_PRELOAD shim forwards to after keeping a mapped
// file's mappings coherent with them (file_api.h), as RealCalls does for the mmap and
// read/write families (real_calls.h: resolved by dlsym(RTLD_NEXT) in the constructor, the
// raw system call before that).
#ifndef UMAP_RUNTIME_PRELOAD_REAL_FILE_CALLS_H_
#define UMAP_RUNTIME_PRELOAD_REAL_FILE_CALLS_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>

namespace umap::preload {

// Resolves every pointer; called by ResolveRealCalls().
void ResolveRealFileCalls();

ssize_t RealPreadv2(int fd, const struct iovec* iov, int iovcnt, off_t off, int flags);
ssize_t RealPwritev2(int fd, const struct iovec* iov, int iovcnt, off_t off, int flags);
ssize_t RealCopyFileRange(int in, off_t* in_off, int out, off_t* out_off, size_t len,
                          unsigned flags);
ssize_t RealSendfile(int out, int in, off_t* off, size_t count);
ssize_t RealSplice(int in, off_t* in_off, int out, off_t* out_off, size_t len, unsigned flags);
int RealFtruncate(int fd, off_t len);
int RealTruncate(const char* path, off_t len);
int RealFallocate(int fd, int mode, off_t off, off_t len);
int RealPosixFallocate(int fd, off_t off, off_t len);  // an error number, as libc's
int RealFsync(int fd);
int RealFdatasync(int fd);
int RealSyncFileRange(int fd, off_t off, off_t len, unsigned flags);
int RealClose(int fd);
int RealFcntl(int fd, int cmd, void* arg);
int RealFlock(int fd, int op);
int RealLockf(int fd, int cmd, off_t len);
[[noreturn]] void RealExit(int status);   // _exit
[[noreturn]] void RealExit2(int status);  // _Exit

}  // namespace umap::preload

#endif  // UMAP_RUNTIME_PRELOAD_REAL_FILE_CALLS_H_
