// chaos-shutdown-race: measures whether FS_IOC_SHUTDOWN(FS_GOING_DOWN_NOLOGFLUSH) is atomic
// with an fdatasync in flight (docs/chaos.md, "Why `reboot` freezes the worker before the power cut").
//
//   chaos-shutdown-race DEVICE MOUNTPOINT [ROUNDS]   (an ext4 on a loop device, mounted; root)
//
// Per round a child appends 12 KiB records with write + fdatasync and reports record k to the
// parent only after fdatasync returned 0; the parent shuts the file system down at a random
// moment, SIGKILLs the child, remounts, and checks that every reported record is there.
// Exit 0: nothing acknowledged was lost; 1: some round lost an acknowledged record (the
// race exists: a process that keeps running after the shutdown can act on a false success).
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#ifndef FS_IOC_SHUTDOWN
#define FS_IOC_SHUTDOWN _IOR('X', 125, uint32_t)
#endif

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DEVICE MOUNTPOINT [ROUNDS]\n", argv[0]);
    return 2;
  }
  const std::string dev = argv[1], mnt = argv[2];
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 40;
  int lost = 0;
  static char buf[12288];
  for (int it = 0; it < rounds; ++it) {
    const std::string path = mnt + "/race" + std::to_string(it);
    int p[2];
    if (::pipe(p) != 0) return 2;
    pid_t pid = ::fork();
    if (pid == 0) {
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      for (int k = 0;; ++k) {
        std::memset(buf, 'a' + k % 26, sizeof buf);
        if (::write(fd, buf, sizeof buf) != static_cast<ssize_t>(sizeof buf)) ::pause();
        if (::fdatasync(fd) != 0) ::pause();
        if (::write(p[1], &k, sizeof k) != sizeof k) ::pause();
      }
    }
    ::close(p[1]);
    ::usleep(20000 + std::rand() % 200000);
    int d = ::open(mnt.c_str(), O_RDONLY);
    uint32_t how = 2;  // FS_GOING_DOWN_NOLOGFLUSH
    if (d < 0 || ::ioctl(d, FS_IOC_SHUTDOWN, &how) != 0) {
      std::perror("FS_IOC_SHUTDOWN");
      return 2;
    }
    ::close(d);
    ::usleep(20000);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    int last = -1, k;
    while (::read(p[0], &k, sizeof k) == sizeof k) last = k;
    ::close(p[0]);
    if (::umount(mnt.c_str()) != 0 || ::mount(dev.c_str(), mnt.c_str(), "ext4", 0, nullptr) != 0) {
      std::perror("remount");
      return 2;
    }
    struct stat st {};
    ::stat(path.c_str(), &st);
    const long want = static_cast<long>(last + 1) * static_cast<long>(sizeof buf);
    if (st.st_size < want) {
      ++lost;
      std::printf("round %d: %ld bytes acknowledged by fdatasync, %ld after remount\n", it, want,
                  static_cast<long>(st.st_size));
    }
  }
  std::printf("%d of %d rounds lost an acknowledged record\n", lost, rounds);
  return lost > 0 ? 1 : 0;
}
