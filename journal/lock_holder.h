// Who holds the RocksDB LOCK of a journal directory, for the "journal in use" message.
#ifndef UMAP_JOURNAL_LOCK_HOLDER_H_
#define UMAP_JOURNAL_LOCK_HOLDER_H_

#include <sys/types.h>

#include <optional>
#include <string>

namespace umap::journal {

// The pid of the process holding a conflicting fcntl write lock on `lock_path` (RocksDB
// takes a process-associated F_SETLK lock on <dir>/LOCK), or nullopt if the file is
// missing, unlocked, or the holder cannot be named (an OFD lock reports pid -1).
//
// REQUIRES: this process holds no fcntl lock on `lock_path`. The probe opens and closes the
// file, and closing any descriptor of a file drops every POSIX record lock the process holds
// on it (fcntl(2)). Journal::Open calls it only after its own DB::Open failed and after
// checking that no Journal of this process has the directory open.
std::optional<pid_t> LockHolder(const std::string& lock_path);

// Whether any process (of this node or, on a file system with cluster-wide locks, another)
// holds a conflicting fcntl lock on `lock_path`, named or not; *pid: its pid when the file
// system reports one, else 0. The same REQUIRES as LockHolder.
bool LockIsHeld(const std::string& lock_path, pid_t* pid);

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_LOCK_HOLDER_H_
