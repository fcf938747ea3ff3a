// Processes and real faults for umap-chaos: spawning the worker and umap-recover, loop-mounted
// ext4 images shut down with FS_IOC_SHUTDOWN (a real power cut of one disk), size-limited
// tmpfs (a real ENOSPC). Linux only; root for mounts and loop devices. Every error says which
// step failed and on what.
#ifndef UMAP_CHAOS_SYSTEM_H_
#define UMAP_CHAOS_SYSTEM_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace chaos {

struct SpawnOptions {
  std::vector<std::string> argv;
  std::vector<std::string> extra_env;  // "NAME=value", added to (or replacing in) environ
  std::string log_path;                // stdout and stderr, appended; empty: /dev/null
  int report_fd = -1;                  // if >= 0: becomes fd 3 in the child
};
absl::StatusOr<pid_t> Spawn(const SpawnOptions& o);

// How a child ended.
struct Exit {
  bool exited = false;  // exit code in code
  int code = 0;
  int signal = 0;       // killed by this signal
  bool timed_out = false;  // still running after the bound (then killed with SIGKILL)
  // Still not reaped kKillGraceMs after that SIGKILL: a thread of it sleeps in the kernel
  // uninterruptibly, waiting for something only the storage can finish (a FUSE request
  // its server read and never answered: the kernel cannot take it back). `stuck` names
  // each thread's wait (StuckThreads). Wait for it again once the storage is dealt with.
  bool unkillable = false;
  std::string stuck;
  std::string ToString() const;
};
// How long a SIGKILLed child may take to die before Wait gives up on it (unkillable).
inline constexpr int kKillGraceMs = 20000;
// Waits up to timeout_ms (negative: forever); on timeout SIGKILLs it and reaps it, waiting at
// most kill_grace_ms for it to die.
Exit Wait(pid_t pid, int timeout_ms, int kill_grace_ms = kKillGraceMs);
// The threads of `pid` that are not dead, each as "name (tid) state D in wchan: top of the
// kernel stack" (the stack needs root), joined by "; ". Empty when none is left.
std::string StuckThreads(pid_t pid);
// Freezes a child with SIGSTOP and returns once every one of its threads has stopped (or it
// has exited), bound timeout_ms. kill(SIGSTOP) alone returns before the threads stop: one
// thread takes the signal and only then asks the others to stop, so a thread can return from
// a system call, and act on its result in user space, after kill() returned. A thread in an
// uninterruptible call (an fdatasync) delays the stop until that call has completed. The
// stop (or exit) stays waitable (WNOWAIT): Wait() reaps as before. kDeadlineExceeded when
// the threads did not all stop in time.
absl::Status FreezeProcess(pid_t pid, int timeout_ms);
// Runs a command to completion (bound: timeout_ms); output appended to log_path.
Exit Run(const std::vector<std::string>& argv, const std::string& log_path, int timeout_ms,
         const std::vector<std::string>& extra_env = {});
// Runs a command and returns its stdout (stderr to log_path).
absl::StatusOr<std::string> Capture(const std::vector<std::string>& argv, const std::string& log_path,
                                    Exit* exit, const std::vector<std::string>& extra_env = {});

// A small ext4 file system on a loop device.
class LoopFs {
 public:
  // Creates image `image` of size_mib, mkfs.ext4, attaches a loop device, mounts at `mount`.
  static absl::StatusOr<LoopFs> Create(const std::string& image, const std::string& mount,
                                       int size_mib, const std::string& log);
  LoopFs(LoopFs&&) noexcept;
  LoopFs& operator=(LoopFs&&) = delete;
  ~LoopFs();  // unmounts, detaches, removes the image

  // FS_IOC_SHUTDOWN with FS_GOING_DOWN_NOLOGFLUSH: every byte not yet on the device is lost
  // and every later call on the file system fails with EIO (xfstests' godown).
  absl::Status Shutdown();
  // Unmounts (retrying while busy) and mounts again: ext4 replays its own log.
  absl::Status Remount();
  const std::string& mount() const { return mount_; }

 private:
  LoopFs(std::string image, std::string device, std::string mount, std::string log)
      : image_(std::move(image)), device_(std::move(device)), mount_(std::move(mount)),
        log_(std::move(log)) {}
  std::string image_, device_, mount_, log_;
};

// A tmpfs of size_mib at `mount` (created). Unmounted by the destructor.
class Tmpfs {
 public:
  static absl::StatusOr<Tmpfs> Create(const std::string& mount, int size_mib,
                                      const std::string& log);
  Tmpfs(Tmpfs&&) noexcept;
  Tmpfs& operator=(Tmpfs&&) = delete;
  ~Tmpfs();
  // Writes `path` (inside the tmpfs) until ENOSPC; returns the bytes written.
  absl::StatusOr<uint64_t> Fill(const std::string& path);
  const std::string& mount() const { return mount_; }

 private:
  Tmpfs(std::string mount, std::string log) : mount_(std::move(mount)), log_(std::move(log)) {}
  std::string mount_, log_;
};

// Writes `path` (on any file system: tmpfs, a FUSE mount) in 64 KiB, then 4 KiB chunks until a
// write fails with ENOSPC, then fsyncs it (an ENOSPC there is expected: a DFS client with
// write-behind reports the last writes' error at the sync). Returns the bytes written; any
// other error is returned with the path.
absl::StatusOr<uint64_t> FillUntilEnospc(const std::string& path);

// Makes `path` durable up to its device (sync_file_range WRITE|WAIT of [offset, offset+len)):
// the kernel writing back some dirty pages before a crash.
absl::Status WriteBackRange(const std::string& path, uint64_t offset, uint64_t len);

absl::Status RemoveTree(const std::string& path);
absl::Status MakeDirs(const std::string& path);
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);
// The same through O_DIRECT where the file system allows it (what a DFS's servers hold, not
// this client's cached pages); elsewhere (tmpfs) as ReadWholeFile.
absl::StatusOr<std::string> ReadWholeFileDirect(const std::string& path);
absl::Status WriteWholeFile(const std::string& path, const std::string& data, bool sync);

}  // namespace chaos

#endif  // UMAP_CHAOS_SYSTEM_H_
