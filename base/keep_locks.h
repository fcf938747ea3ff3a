// Closing a descriptor of a data file without dropping the program's POSIX locks.
//
// POSIX record locks (fcntl F_SETLK, lockf) belong to a process and an inode, not to a
// descriptor: when the process closes *any* descriptor of the file, the kernel drops every
// lock the process holds on it. Umap opens descriptors of the files it maps (its own
// duplicate, an O_DIRECT reader and writer, the coherence locks' descriptions) and closes
// them at uunmap; a program that maps a file it has locked (SQLite, LMDB, fio) would lose
// its locks behind its back, silently.
//
// CloseKeepingLocks closes such a descriptor only when the process holds no POSIX lock on
// the file; otherwise the descriptor is parked (kept open, not used). A parked descriptor
// is closed once the lock is surely gone: when the program itself closes a descriptor of
// the same file (which drops its locks anyway: ReleaseParked, called by the LD_PRELOAD
// shim's close), at a later CloseKeepingLocks of the same file that finds no lock, or at
// exit. This is how SQLite's own VFS defers its closes (its unused-descriptor list).
//
// Thread safety: every function may be called from any thread.
#ifndef UMAP_BASE_KEEP_LOCKS_H_
#define UMAP_BASE_KEEP_LOCKS_H_

#include <sys/types.h>

#include <cstddef>

namespace umap {

// True when this process holds a POSIX record lock on some byte of the file open on `fd`
// (found with F_OFD_GETLK through fd's description: locks of other processes and open file
// description locks are skipped over). Errors count as "held": the caller then keeps the
// descriptor, which costs only a descriptor.
bool ProcessHoldsPosixLock(int fd);

// Closes `fd`, or parks it when the process holds a POSIX lock on its file (above).
// Parked descriptors of the same file whose locks are gone are closed too.
void CloseKeepingLocks(int fd);

// The program closed a descriptor of the file (device, inode): its locks on it are gone,
// so the descriptors parked for that file are closed. Async-signal-safe apart from close.
void ReleaseParked(dev_t dev, ino_t ino);

// How many descriptors are parked now (tests, umap-stat).
size_t ParkedDescriptors();

}  // namespace umap

#endif  // UMAP_BASE_KEEP_LOCKS_H_
