// A direct fcntl query: base/Env has no lock operations, and this one only reads lock state.
// File system calls otherwise live behind Env (base/env_posix.cc); if Env grows a lock query,
// this belongs there.
#include "journal/lock_holder.h"

#include <fcntl.h>
#include <unistd.h>

namespace umap::journal {

bool LockIsHeld(const std::string& lock_path, pid_t* pid) {
  *pid = 0;
  int fd = ::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // no LOCK file: nobody holds it
  struct flock fl = {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;
  const int rc = ::fcntl(fd, F_GETLK, &fl);
  ::close(fd);
  if (rc != 0 || fl.l_type == F_UNLCK) return false;
  *pid = fl.l_pid > 0 ? fl.l_pid : 0;
  return true;
}

std::optional<pid_t> LockHolder(const std::string& lock_path) {
  int fd = ::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct flock fl = {};
  fl.l_type = F_WRLCK;  // "would a write lock conflict?": any holder conflicts with it
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;  // the whole file
  int rc = ::fcntl(fd, F_GETLK, &fl);
  ::close(fd);
  if (rc != 0 || fl.l_type == F_UNLCK || fl.l_pid <= 0) return std::nullopt;
  return fl.l_pid;
}

}  // namespace umap::journal
