#include "chaos/system.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/posix_error.h"

extern char** environ;

#ifndef FS_IOC_SHUTDOWN
#define FS_IOC_SHUTDOWN _IOR('X', 125, uint32_t)
#endif
#ifndef FS_GOING_DOWN_NOLOGFLUSH
#define FS_GOING_DOWN_NOLOGFLUSH 0x2
#endif

namespace chaos {

std::string Exit::ToString() const {
  if (unkillable) return absl::StrCat("timed out, and still alive after SIGKILL: ", stuck);
  if (timed_out) return "timed out (killed)";
  if (exited) return absl::StrCat("exit ", code);
  return absl::StrCat("signal ", signal, " (", strsignal(signal), ")");
}

absl::StatusOr<pid_t> Spawn(const SpawnOptions& o) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string s(*e);
    size_t eq = s.find('=');
    if (eq != std::string::npos) env[s.substr(0, eq)] = s.substr(eq + 1);
  }
  for (const std::string& s : o.extra_env) {
    size_t eq = s.find('=');
    if (eq != std::string::npos) env[s.substr(0, eq)] = s.substr(eq + 1);
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string log = o.log_path.empty() ? "/dev/null" : o.log_path;
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (o.report_fd >= 0) posix_spawn_file_actions_adddup2(&fa, o.report_fd, 3);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return umap::PosixError(rc, absl::StrCat("spawn ", absl::StrJoin(o.argv, " ")));
  return pid;
}

Exit Wait(pid_t pid, int timeout_ms, int kill_grace_ms) {
  Exit e;
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    pid_t r = ::waitpid(pid, &status, timeout_ms < 0 ? 0 : WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      e.exited = true;
      e.code = -1;
      return e;
    }
    if (timeout_ms >= 0 && std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      e.timed_out = true;
      e.signal = SIGKILL;
      // Never a blocking waitpid here: a child stuck in the kernel would hold the caller
      // (a lane of the chaos run) until its own deadline killed it, report and all.
      const auto grace =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(kill_grace_ms);
      while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > grace) {
          e.unkillable = true;
          e.stuck = StuckThreads(pid);
          return e;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      return e;
    }
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFEXITED(status)) {
    e.exited = true;
    e.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
  }
  return e;
}

std::string StuckThreads(pid_t pid) {
  std::vector<std::string> threads;
  const std::string task_dir = absl::StrCat("/proc/", pid, "/task");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(task_dir, ec)) {
    const std::string dir = entry.path().string();
    const std::string tid = entry.path().filename().string();
    // A file of the thread's /proc directory; empty when unreadable (the stack needs root).
    auto read = [&](const char* name) {
      return ReadWholeFile(dir + "/" + name).value_or(std::string());
    };
    std::string comm = read("comm");
    if (!comm.empty() && comm.back() == '\n') comm.pop_back();
    // stat: "tid (comm) S ...": the state follows the last ')'.
    const std::string stat = read("stat");
    const size_t paren = stat.rfind(')');
    const char state =
        paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
    if (state == 'Z' || state == 'X') continue;  // dead: only its reaping is left
    std::string where =
        absl::StrCat(comm, " (", tid, ") state ", std::string(1, state), " in ", read("wchan"));
    // The top frames of the kernel stack, "[<0>] name+0x1d8/0x280" lines.
    std::vector<std::string> frames;
    for (absl::string_view line : absl::StrSplit(read("stack"), '\n', absl::SkipEmpty())) {
      const size_t sp = line.find("] ");
      absl::string_view f = sp == absl::string_view::npos ? line : line.substr(sp + 2);
      frames.emplace_back(f.substr(0, f.find('+')));
      if (frames.size() == 4) break;
    }
    if (!frames.empty()) absl::StrAppend(&where, ": ", absl::StrJoin(frames, " < "));
    threads.push_back(std::move(where));
  }
  return absl::StrJoin(threads, "; ");
}

absl::Status FreezeProcess(pid_t pid, int timeout_ms) {
  if (::kill(pid, SIGSTOP) != 0) return umap::PosixError(errno, absl::StrCat("SIGSTOP of pid ", pid));
  // The kernel notifies the parent (CLD_STOPPED) when the group stop is complete, that is
  // when the last thread has stopped; an exit (a worker that was dying) counts as frozen.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WEXITED | WNOHANG | WNOWAIT) !=
        0) {
      if (errno == EINTR) continue;
      return umap::PosixError(errno, absl::StrCat("waiting for pid ", pid, " to stop"));
    }
    if (info.si_pid == pid) return absl::OkStatus();
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "pid ", pid, ": not every thread stopped within ", timeout_ms, " ms of SIGSTOP"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Exit Run(const std::vector<std::string>& argv, const std::string& log_path, int timeout_ms,
         const std::vector<std::string>& extra_env) {
  SpawnOptions o{argv, extra_env, log_path, -1};
  absl::StatusOr<pid_t> pid = Spawn(o);
  if (!pid.ok()) {
    Exit e;
    e.exited = true;
    e.code = 127;
    return e;
  }
  return Wait(*pid, timeout_ms);
}

absl::StatusOr<std::string> Capture(const std::vector<std::string>& argv,
                                    const std::string& log_path, Exit* exit,
                                    const std::vector<std::string>& extra_env) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return umap::PosixError(errno, "pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string log = log_path.empty() ? "/dev/null" : log_path;
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const std::string& s : extra_env) env_strings.push_back(s);
  std::vector<char*> envp, args;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> a = argv;
  for (std::string& s : a) args.push_back(s.data());
  args.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(p[1]);
  if (rc != 0) {
    ::close(p[0]);
    return umap::PosixError(rc, absl::StrCat("spawn ", absl::StrJoin(argv, " ")));
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(p[0], buf, sizeof buf);
    if (n > 0) {
      out.append(buf, n);
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(p[0]);
  *exit = Wait(pid, 60000);
  return out;
}

namespace {

absl::Status RunOk(const std::vector<std::string>& argv, const std::string& log) {
  Exit e = Run(argv, log, 60000);
  if (!e.exited || e.code != 0) {
    return absl::InternalError(
        absl::StrCat("`", absl::StrJoin(argv, " "), "` failed: ", e.ToString(), " (see ", log, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoopFs> LoopFs::Create(const std::string& image, const std::string& mount,
                                      int size_mib, const std::string& log) {
  if (absl::Status s = MakeDirs(mount); !s.ok()) return s;
  int fd = ::open(image.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return umap::PosixError(errno, absl::StrCat("create image ", image));
  int rc = ::ftruncate(fd, off_t{size_mib} << 20);
  int err = errno;
  ::close(fd);
  if (rc != 0) return umap::PosixError(err, absl::StrCat("size image ", image));
  if (absl::Status s = RunOk({"mkfs.ext4", "-q", "-F", image}, log); !s.ok()) return s;
  Exit e;
  absl::StatusOr<std::string> dev = Capture({"losetup", "-f", "--show", image}, log, &e);
  if (!dev.ok()) return dev.status();
  if (!e.exited || e.code != 0 || dev->empty()) {
    return absl::UnavailableError(absl::StrCat("losetup -f --show ", image, " failed: ",
                                               e.ToString(), " (see ", log, ")"));
  }
  std::string device = dev->substr(0, dev->find('\n'));
  if (::mount(device.c_str(), mount.c_str(), "ext4", 0, nullptr) != 0) {
    absl::Status s = umap::PosixError(errno, absl::StrCat("mount ", device, " on ", mount));
    Run({"losetup", "-d", device}, log, 10000);
    return s;
  }
  return LoopFs(image, device, mount, log);
}

LoopFs::LoopFs(LoopFs&& o) noexcept
    : image_(std::move(o.image_)), device_(std::move(o.device_)), mount_(std::move(o.mount_)),
      log_(std::move(o.log_)) {
  o.device_.clear();
}

LoopFs::~LoopFs() {
  if (device_.empty()) return;
  for (int i = 0; i < 50 && ::umount(mount_.c_str()) != 0 && errno == EBUSY; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::umount2(mount_.c_str(), MNT_DETACH);
  Run({"losetup", "-d", device_}, log_, 10000);
  ::unlink(image_.c_str());
}

absl::Status LoopFs::Shutdown() {
  int fd = ::open(mount_.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return umap::PosixError(errno, absl::StrCat("open ", mount_, " for FS_IOC_SHUTDOWN"));
  uint32_t how = FS_GOING_DOWN_NOLOGFLUSH;
  int rc = ::ioctl(fd, FS_IOC_SHUTDOWN, &how);
  int err = errno;
  ::close(fd);
  if (rc != 0) return umap::PosixError(err, absl::StrCat("FS_IOC_SHUTDOWN ", mount_));
  return absl::OkStatus();
}

absl::Status LoopFs::Remount() {
  int rc = -1;
  for (int i = 0; i < 100; ++i) {
    rc = ::umount(mount_.c_str());
    if (rc == 0 || errno != EBUSY) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (rc != 0) return umap::PosixError(errno, absl::StrCat("umount ", mount_, " (", device_, ")"));
  if (::mount(device_.c_str(), mount_.c_str(), "ext4", 0, nullptr) != 0) {
    return umap::PosixError(errno, absl::StrCat("mount ", device_, " on ", mount_));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tmpfs> Tmpfs::Create(const std::string& mount, int size_mib,
                                    const std::string& log) {
  if (absl::Status s = MakeDirs(mount); !s.ok()) return s;
  const std::string opts = absl::StrCat("size=", size_mib, "m,mode=0700");
  if (::mount("tmpfs", mount.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
    return umap::PosixError(errno, absl::StrCat("mount tmpfs (", opts, ") on ", mount));
  }
  return Tmpfs(mount, log);
}

Tmpfs::Tmpfs(Tmpfs&& o) noexcept : mount_(std::move(o.mount_)), log_(std::move(o.log_)) {
  o.mount_.clear();
}

Tmpfs::~Tmpfs() {
  if (mount_.empty()) return;
  if (::umount(mount_.c_str()) != 0) ::umount2(mount_.c_str(), MNT_DETACH);
}

absl::StatusOr<uint64_t> Tmpfs::Fill(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return umap::PosixError(errno, absl::StrCat("create filler ", path));
  std::string chunk(1 << 16, 'F');
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::write(fd, chunk.data(), chunk.size());
    if (n > 0) {
      total += n;
      continue;
    }
    int err = errno;
    if (n < 0 && err == EINTR) continue;
    ::close(fd);
    if (n < 0 && err != ENOSPC) return umap::PosixError(err, absl::StrCat("fill ", path));
    return total;
  }
}

absl::StatusOr<uint64_t> FillUntilEnospc(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return umap::PosixError(errno, absl::StrCat("create filler ", path));
  std::string chunk(1 << 16, 'F');
  uint64_t total = 0;
  for (size_t size : {size_t{1} << 16, size_t{4096}}) {
    for (;;) {
      ssize_t n = ::write(fd, chunk.data(), size);
      if (n > 0) {
        total += n;
        continue;
      }
      int err = errno;
      if (n < 0 && err == EINTR) continue;
      if (n < 0 && err != ENOSPC) {
        ::close(fd);
        return umap::PosixError(err, absl::StrCat("fill ", path, " after ", total, " bytes"));
      }
      break;
    }
  }
  if (::fsync(fd) != 0 && errno != ENOSPC) {
    int err = errno;
    ::close(fd);
    return umap::PosixError(err, absl::StrCat("fsync filler ", path));
  }
  ::close(fd);
  return total;
}

absl::Status WriteBackRange(const std::string& path, uint64_t offset, uint64_t len) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return umap::PosixError(errno, absl::StrCat("open ", path));
  int rc = ::sync_file_range(fd, offset, len,
                             SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                 SYNC_FILE_RANGE_WAIT_AFTER);
  int err = errno;
  ::close(fd);
  if (rc != 0) return umap::PosixError(err, absl::StrCat("sync_file_range ", path));
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return umap::PosixError(ec.value(), absl::StrCat("remove ", path));
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return umap::PosixError(ec.value(), absl::StrCat("mkdir -p ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return umap::PosixError(errno, absl::StrCat("open ", path));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, n);
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      int err = errno;
      ::close(fd);
      return umap::PosixError(err, absl::StrCat("read ", path));
    }
  }
  ::close(fd);
  return out;
}

absl::StatusOr<std::string> ReadWholeFileDirect(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0 && errno == EINVAL) return ReadWholeFile(path);
  if (fd < 0) return umap::PosixError(errno, absl::StrCat("open (O_DIRECT) ", path));
  constexpr size_t kChunk = 1 << 16;
  void* mem = nullptr;
  if (::posix_memalign(&mem, 4096, kChunk) != 0) {
    ::close(fd);
    return umap::PosixError(ENOMEM, "buffer for an O_DIRECT read");
  }
  std::string out;
  for (;;) {
    const ssize_t n = ::pread(fd, mem, kChunk, static_cast<off_t>(out.size()));
    if (n > 0) {
      out.append(static_cast<char*>(mem), static_cast<size_t>(n));
      if (static_cast<size_t>(n) < kChunk) break;
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int err = errno;
      std::free(mem);
      ::close(fd);
      return umap::PosixError(err, absl::StrCat("read (O_DIRECT) ", path));
    }
  }
  std::free(mem);
  ::close(fd);
  return out;
}

absl::Status WriteWholeFile(const std::string& path, const std::string& data, bool sync) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return umap::PosixError(errno, absl::StrCat("create ", path));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return umap::PosixError(err, absl::StrCat("write ", path));
    }
    done += n;
  }
  if (sync && ::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return umap::PosixError(err, absl::StrCat("fsync ", path));
  }
  ::close(fd);
  return absl::OkStatus();
}

}  // namespace chaos
