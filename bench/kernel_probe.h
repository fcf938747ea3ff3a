// Helpers shared by the tools that time kernel operations in one thread without file I/O
// (umap-installcost, umap-wpcost). Every failure is fatal: the message names the tool
// (program_invocation_short_name), the call and errno.
#ifndef UMAP_BENCH_KERNEL_PROBE_H_
#define UMAP_BENCH_KERNEL_PROBE_H_

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace umap_bench {

[[noreturn]] inline void Die(const char* what) {
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, std::strerror(errno));
  std::exit(1);
}

// CPU seconds of the whole process so far (user + system).
inline double CpuSeconds() {
  struct rusage ru = {};
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// A userfaultfd with `features`, from userfaultfd(2) or else /dev/userfaultfd.
inline int NewUffd(uint64_t features) {
  int fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0) {
    const int dev = ::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev >= 0) fd = ::ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
    if (dev >= 0) ::close(dev);
  }
  if (fd < 0) Die("userfaultfd");
  struct uffdio_api api = {};
  api.api = UFFD_API;
  api.features = features;
  if (::ioctl(fd, UFFDIO_API, &api) != 0) Die("UFFDIO_API");
  return fd;
}

inline void Register(int uffd, char* p, size_t len, uint64_t mode) {
  struct uffdio_register reg = {};
  reg.range = {reinterpret_cast<uint64_t>(p), len};
  reg.mode = mode;
  if (::ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) Die("UFFDIO_REGISTER");
}

// A read-write mapping of `len` bytes (`fd` -1 for anonymous memory).
inline char* Map(size_t len, int flags, int fd) {
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED) Die("mmap");
  return static_cast<char*>(p);
}

}  // namespace umap_bench

#endif  // UMAP_BENCH_KERNEL_PROBE_H_
