// umap-sharedcache-probe's shared helpers (declared in shared_cache_probe_common.h): the
// JSON "fatal" line, timing, memfd and file helpers, userfaultfd open and register, and the
// handler thread (Server) that resolves MISSING faults by UFFDIO_COPY and MINOR faults by
// UFFDIO_CONTINUE.
#include "shared_cache_probe_common.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace sharedcache_probe {

[[noreturn]] void Fatal(const char* what) {
  const int e = errno;
  Json("fatal").Int("pid", ::getpid()).Str("what", what).Str("errno", std::strerror(e)).Print();
  std::_Exit(3);
}

std::string ErrName(int e) {
  switch (e) {
    case 0: return "ok";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ENOENT: return "ENOENT";
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case EFAULT: return "EFAULT";
    case EEXIST: return "EEXIST";
    case ENOSPC: return "ENOSPC";
    default: return std::to_string(e);
  }
}

uint64_t NowNs() {
  struct timespec ts = {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

double MedianUs(std::vector<uint64_t> ns) {
  if (ns.empty()) return -1;
  std::nth_element(ns.begin(), ns.begin() + ns.size() / 2, ns.end());
  return ns[ns.size() / 2] / 1000.0;
}

double PercentileUs(std::vector<uint64_t> ns, double p) {
  if (ns.empty()) return -1;
  const size_t i = std::min(ns.size() - 1, static_cast<size_t>(p * ns.size()));
  std::nth_element(ns.begin(), ns.begin() + i, ns.end());
  return ns[i] / 1000.0;
}

std::string ReadLine(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

bool WriteFile(const std::string& path, const std::string& v) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size());
  const int e = errno;
  ::close(fd);
  errno = e;
  return ok;
}

char* MapOrDie(size_t len, int flags, int fd) {
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED) Fatal("mmap");
  ::madvise(p, len, MADV_NOHUGEPAGE);  // as Umap's regions (a memfd view: shmem THP is off here)
  return static_cast<char*>(p);
}

int NewMemfd(size_t len) {
  const int fd = static_cast<int>(::syscall(SYS_memfd_create, "umap-sharedcache", MFD_CLOEXEC));
  if (fd < 0) Fatal("memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(len)) != 0) Fatal("ftruncate");
  return fd;
}

void Punch(int fd, size_t off, size_t len) {
  if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                  static_cast<off_t>(len)) != 0) {
    Fatal("fallocate(PUNCH_HOLE)");
  }
}

void PwriteAll(int fd, const char* src, size_t len, size_t off) {
  if (::pwrite(fd, src, len, static_cast<off_t>(off)) != static_cast<ssize_t>(len)) {
    Fatal("pwrite");
  }
}

int64_t StBlocksKiB(int fd) {
  struct stat st = {};
  if (::fstat(fd, &st) != 0) Fatal("fstat");
  return static_cast<int64_t>(st.st_blocks) / 2;
}

const char* WayName(Way w) {
  switch (w) {
    case Way::kSyscall: return "userfaultfd";
    case Way::kUserModeOnly: return "userfaultfd_user_mode_only";
    case Way::kDevice: return "dev_userfaultfd";
  }
  return "?";
}

// Returns a new userfaultfd (not yet through UFFDIO_API), or -1 with errno.
int OpenUffd(Way w) {
  const int flags = O_CLOEXEC | O_NONBLOCK;
  switch (w) {
    case Way::kSyscall: return static_cast<int>(::syscall(SYS_userfaultfd, flags));
    case Way::kUserModeOnly:
      return static_cast<int>(::syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY));
    case Way::kDevice: {
      const int dev = ::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
      if (dev < 0) return -1;
      const int fd = ::ioctl(dev, USERFAULTFD_IOC_NEW, flags);
      const int e = errno;
      ::close(dev);
      errno = e;
      return fd;
    }
  }
  return -1;
}

// The first way that works for this user, in Umap's order of preference.
int OpenUffdAny(uint64_t features, std::string* how) {
  for (Way w : {Way::kSyscall, Way::kDevice, Way::kUserModeOnly}) {
    const int fd = OpenUffd(w);
    if (fd < 0) continue;
    struct uffdio_api api = {};
    api.api = UFFD_API;
    api.features = features;
    if (::ioctl(fd, UFFDIO_API, &api) != 0) Fatal("UFFDIO_API");
    if (how != nullptr) *how = WayName(w);
    return fd;
  }
  Fatal("no userfaultfd");
}

void RegisterOrDie(int uffd, char* p, size_t len, uint64_t mode) {
  struct uffdio_register reg = {};
  reg.range = {reinterpret_cast<uint64_t>(p), len};
  reg.mode = mode;
  if (::ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) Fatal("UFFDIO_REGISTER");
}

Server::Server(int uffd, char* base, size_t len, size_t block, const char* src)
    : uffd_(uffd), base_(base), len_(len), block_(block), src_(src) {
  stop_ = ::eventfd(0, EFD_CLOEXEC);
  if (stop_ < 0) Fatal("eventfd");
}

void Server::Start(bool record) {
  record_ = record;
  thread_ = std::thread([this] { Loop(); });
}

void Server::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  if (::write(stop_, &one, sizeof one) != sizeof one) Fatal("eventfd write");
  thread_.join();
  ::close(stop_);
}

void Server::Loop() {
  uffd_msg msgs[16];
  for (;;) {
    struct pollfd pfd[2] = {{uffd_, POLLIN, 0}, {stop_, POLLIN, 0}};
    if (::poll(pfd, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Fatal("poll");
    }
    if (pfd[1].revents != 0) return;
    const ssize_t n = ::read(uffd_, msgs, sizeof msgs);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      Fatal("read(uffd)");
    }
    for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(uffd_msg); ++i) Serve(msgs[i]);
  }
}

void Server::Serve(const uffd_msg& m) {
  if (m.event != UFFD_EVENT_PAGEFAULT) {
    other.fetch_add(1);
    return;
  }
  const uint64_t addr = m.arg.pagefault.address;
  const size_t off = (addr - reinterpret_cast<uint64_t>(base_)) / block_ * block_;
  const size_t len = std::min(block_, len_ - off);
  const uint64_t dst = reinterpret_cast<uint64_t>(base_ + off);
  const uint64_t t0 = NowNs();
  int rc;
  if (m.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_MINOR) {
    minor.fetch_add(1);
    struct uffdio_continue c = {};
    c.range = {dst, len};
    c.mode = UFFDIO_CONTINUE_MODE_DONTWAKE;
    rc = ::ioctl(uffd_, UFFDIO_CONTINUE, &c);
    if (record_ && rc == 0) continue_ns.push_back(NowNs() - t0);
  } else {
    missing.fetch_add(1);
    const char* s = src_override.load();
    struct uffdio_copy c = {};
    c.dst = dst;
    c.src = reinterpret_cast<uint64_t>(s != nullptr ? s : src_);
    c.len = len;
    c.mode = UFFDIO_COPY_MODE_DONTWAKE;
    rc = ::ioctl(uffd_, UFFDIO_COPY, &c);
    if (record_ && rc == 0) copy_ns.push_back(NowNs() - t0);
  }
  if (rc != 0 && errno != EEXIST) Fatal("resolve fault");  // EEXIST: a fault raced ahead
  const uint64_t t1 = NowNs();
  struct uffdio_range r = {dst, len};
  if (::ioctl(uffd_, UFFDIO_WAKE, &r) != 0) Fatal("UFFDIO_WAKE");
  if (record_ && rc == 0) wake_ns.push_back(NowNs() - t1);
}

uint64_t Pfn(const void* p) {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  uint64_t e = 0;
  const off_t off = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / kPage * 8);
  if (::pread(fd, &e, 8, off) != 8) e = 0;
  ::close(fd);
  if (!(e >> 63)) return 0;
  return e & ((1ull << 55) - 1);
}

}  // namespace sharedcache_probe
