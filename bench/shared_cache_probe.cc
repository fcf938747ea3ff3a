// umap-sharedcache-probe: what the kernel offers a node-wide cache shared by the processes of
// one user (issue 39; docs/design.md "Node-wide cache"). Linux system calls only, one JSON
// object per line on stdout. Parts (--parts):
//
//   a  access: which ways of getting a userfaultfd this user has (userfaultfd(2), the same
//      with UFFD_USER_MODE_ONLY, /dev/userfaultfd), the features each offers, and whether a
//      MINOR fault on a memfd (shmem) mapping is delivered and resolved by UFFDIO_CONTINUE.
//   b  cost per fault, one faulting thread, one handler thread reading the userfaultfd
//      (poll, then read up to 16 messages, as Umap's handler mode does), for each block size:
//        copy           today's path: MISSING fault on a private anonymous region, UFFDIO_COPY
//                       of the block from a resident buffer;
//        continue       MINOR fault on a MAP_SHARED memfd view whose page cache is populated,
//                       UFFDIO_CONTINUE of the block (no copy);
//        shmem_copy     MISSING fault on a MAP_SHARED memfd view over a hole, UFFDIO_COPY
//                       (the copy lands in the memfd's page cache, so every process sees it);
//      and, without faults, per block: fill_pwrite (pwrite into a hole of the memfd),
//      fill_alias (memcpy through a second, unregistered MAP_SHARED view), punch
//      (fallocate(PUNCH_HOLE|KEEP_SIZE) of a populated, unmapped block).
//      fault_us is the faulting thread's wall time for the load that faults (fault, hand-off,
//      resolution, wake); install_us the handler's install ioctl alone (..._MODE_DONTWAKE),
//      wake_us the UFFDIO_WAKE after it.
//   c  two processes (parent A, forked child B holding the same memfd descriptor, as one
//      passed by SCM_RIGHTS would be), each mapping it MAP_SHARED with its own userfaultfd:
//      what B's first access to a block A filled is, whether stores are seen both ways, what a
//      hole punch does in both (with B registered MISSING|MINOR, and MINOR only), what memory
//      it returns, and the cost of a punch while both processes map the blocks.
//   d  memory cgroup (v1) charging of shared memfd pages (root only: creates cgroups under
//      this process's memory cgroup): 4 processes in one cgroup reading one memfd cache,
//      against 4 private copies; a filler and a reader in two cgroups; a filler in a cgroup
//      whose limit is below the cache.
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"

#ifndef UFFD_FEATURE_POISON  // the kernel's value (6.6); older headers lack it
#define UFFD_FEATURE_POISON (1 << 14)
#endif

namespace {

constexpr size_t kPage = 4096;

// ---------------------------------------------------------------------------------------
// Output: one JSON object per line.
class Json {
 public:
  explicit Json(const std::string& probe) { Str("probe", probe); }
  Json& Str(const std::string& k, const std::string& v) {
    Key(k);
    out_ << '"';
    for (char c : v) {
      if (c == '"' || c == '\\') out_ << '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out_ << c;
    }
    out_ << '"';
    return *this;
  }
  Json& Int(const std::string& k, int64_t v) {
    Key(k);
    out_ << v;
    return *this;
  }
  Json& Num(const std::string& k, double v) {
    Key(k);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f", v);
    out_ << buf;
    return *this;
  }
  Json& Bool(const std::string& k, bool v) {
    Key(k);
    out_ << (v ? "true" : "false");
    return *this;
  }
  void Print() {
    std::printf("{%s}\n", out_.str().c_str());
    std::fflush(stdout);
  }

 private:
  void Key(const std::string& k) {
    if (!first_) out_ << ',';
    first_ = false;
    out_ << '"' << k << "\":";
  }
  std::ostringstream out_;
  bool first_ = true;
};

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

// ---------------------------------------------------------------------------------------
// Userfaultfd access.
enum class Way { kSyscall, kUserModeOnly, kDevice };
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

// A handler thread serving one registered range: MISSING faults with UFFDIO_COPY of the
// block from `src`, MINOR faults with UFFDIO_CONTINUE of the block; the block containing the
// fault, counted from `base`.
class Server {
 public:
  Server(int uffd, char* base, size_t len, size_t block, const char* src)
      : uffd_(uffd), base_(base), len_(len), block_(block), src_(src) {
    stop_ = ::eventfd(0, EFD_CLOEXEC);
    if (stop_ < 0) Fatal("eventfd");
  }
  ~Server() { Stop(); }
  void Start(bool record) {
    record_ = record;
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    if (!thread_.joinable()) return;
    const uint64_t one = 1;
    if (::write(stop_, &one, sizeof one) != sizeof one) Fatal("eventfd write");
    thread_.join();
    ::close(stop_);
  }
  std::atomic<uint64_t> missing{0}, minor{0}, other{0};
  // The install ioctl alone (DONTWAKE), and the UFFDIO_WAKE after it; read only after Stop().
  std::vector<uint64_t> copy_ns, continue_ns, wake_ns;
  std::atomic<const char*> src_override{nullptr};

 private:
  void Loop() {
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
  void Serve(const uffd_msg& m) {
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

  int uffd_;
  char* base_;
  size_t len_, block_;
  const char* src_;
  int stop_ = -1;
  bool record_ = false;
  std::thread thread_;
};

inline uint8_t Load(const char* p) { return *reinterpret_cast<const volatile uint8_t*>(p); }
inline uint64_t Load64(const char* p) { return *reinterpret_cast<const volatile uint64_t*>(p); }
inline void Store64(char* p, uint64_t v) { *reinterpret_cast<volatile uint64_t*>(p) = v; }

// PFN of the page at `p` (needs CAP_SYS_ADMIN; 0 when hidden or not present).
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

// ---------------------------------------------------------------------------------------
// Part a: access.
void PartA() {
  Json m("machine");
  struct utsname u = {};
  ::uname(&u);
  m.Str("kernel", u.release).Int("uid", ::getuid()).Int("euid", ::geteuid());
  m.Str("vm.unprivileged_userfaultfd", ReadLine("/proc/sys/vm/unprivileged_userfaultfd"));
  struct stat st = {};
  if (::stat("/dev/userfaultfd", &st) == 0) {
    char mode[16];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    m.Str("dev_userfaultfd_mode", mode).Int("dev_userfaultfd_uid", st.st_uid);
  } else {
    m.Str("dev_userfaultfd_mode", "absent");
  }
  m.Str("shmem_thp", ReadLine("/sys/kernel/mm/transparent_hugepage/shmem_enabled"));
  m.Int("cpus", static_cast<int64_t>(std::thread::hardware_concurrency()));
  m.Print();

  for (Way w : {Way::kSyscall, Way::kUserModeOnly, Way::kDevice}) {
    Json j("access");
    j.Str("way", WayName(w));
    int fd = OpenUffd(w);
    if (fd < 0) {
      j.Str("open", ErrName(errno)).Print();
      continue;
    }
    j.Str("open", "ok");
    struct uffdio_api api = {};
    api.api = UFFD_API;
    if (::ioctl(fd, UFFDIO_API, &api) != 0) {
      j.Str("api", ErrName(errno)).Print();
      ::close(fd);
      continue;
    }
    ::close(fd);
    char feat[32];
    std::snprintf(feat, sizeof feat, "0x%" PRIx64, static_cast<uint64_t>(api.features));
    j.Str("features_offered", feat);
    j.Bool("minor_shmem_offered", (api.features & UFFD_FEATURE_MINOR_SHMEM) != 0);
    j.Bool("minor_hugetlbfs_offered", (api.features & UFFD_FEATURE_MINOR_HUGETLBFS) != 0);
    j.Bool("missing_shmem_offered", (api.features & UFFD_FEATURE_MISSING_SHMEM) != 0);
    j.Bool("sigbus_offered", (api.features & UFFD_FEATURE_SIGBUS) != 0);
    j.Bool("wp_shmem_offered", (api.features & UFFD_FEATURE_WP_HUGETLBFS_SHMEM) != 0);
    j.Bool("poison_offered", (api.features & UFFD_FEATURE_POISON) != 0);
    // A MINOR fault on a populated memfd view, resolved by UFFDIO_CONTINUE.
    fd = OpenUffd(w);
    api = {};
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_MINOR_SHMEM;
    if (fd < 0 || ::ioctl(fd, UFFDIO_API, &api) != 0) {
      j.Str("api_minor_shmem", ErrName(errno)).Print();
      if (fd >= 0) ::close(fd);
      continue;
    }
    const int memfd = NewMemfd(4 * kPage);
    std::vector<char> src(kPage, 0);
    Store64(src.data(), 0x5eedULL);
    PwriteAll(memfd, src.data(), kPage, kPage);
    char* view = MapOrDie(4 * kPage, MAP_SHARED, memfd);
    struct uffdio_register reg = {};
    reg.range = {reinterpret_cast<uint64_t>(view), 4 * kPage};
    reg.mode = UFFDIO_REGISTER_MODE_MINOR | UFFDIO_REGISTER_MODE_MISSING;
    if (::ioctl(fd, UFFDIO_REGISTER, &reg) != 0) {
      j.Str("register_minor", ErrName(errno)).Print();
    } else {
      j.Str("register_minor", "ok");
      Server s(fd, view, 4 * kPage, kPage, src.data());
      s.Start(false);
      const uint64_t v = Load64(view + kPage);  // populated: MINOR
      const uint64_t z = Load64(view);          // hole: MISSING, resolved by a copy
      s.Stop();
      j.Bool("minor_fault_resolved_by_continue", s.minor.load() == 1 && v == 0x5eedULL);
      j.Bool("missing_fault_resolved_by_copy", s.missing.load() == 1 && z == 0x5eedULL);
      j.Int("minor_faults", static_cast<int64_t>(s.minor.load()));
      j.Int("missing_faults", static_cast<int64_t>(s.missing.load()));
      j.Print();
    }
    ::munmap(view, 4 * kPage);
    ::close(memfd);
    ::close(fd);
  }
}

// ---------------------------------------------------------------------------------------
// Part b: cost per fault.
struct FaultRun {
  std::vector<uint64_t> fault_ns, resolve_ns, wake_ns;
  uint64_t faults_seen = 0;
  std::string how;
};

// `kind`: copy, continue, shmem_copy.
FaultRun RunFaults(const std::string& kind, size_t region, size_t block, int rounds,
                   const std::vector<uint32_t>& order, const char* src) {
  FaultRun r;
  const uint64_t features = kind == "copy" ? 0 : UFFD_FEATURE_MINOR_SHMEM;
  const int uffd = OpenUffdAny(features, &r.how);
  int memfd = -1;
  char* view;
  if (kind == "copy") {
    view = MapOrDie(region, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1);
    RegisterOrDie(uffd, view, region, UFFDIO_REGISTER_MODE_MISSING);
  } else {
    memfd = NewMemfd(region);
    view = MapOrDie(region, MAP_SHARED, memfd);
    RegisterOrDie(uffd, view, region, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_MINOR);
    if (kind == "continue") {
      for (size_t off = 0; off < region; off += block) PwriteAll(memfd, src, block, off);
    }
  }
  Server s(uffd, view, region, block, src);
  s.Start(true);
  r.fault_ns.reserve(order.size() * rounds);
  for (int k = 0; k < rounds; ++k) {
    for (uint32_t b : order) {
      const char* p = view + size_t{b} * block;
      const uint64_t t0 = NowNs();
      (void)Load(p);
      r.fault_ns.push_back(NowNs() - t0);
    }
    // Untimed: back to all-faulting. The memfd keeps its pages for `continue`.
    if (::madvise(view, region, MADV_DONTNEED) != 0) Fatal("madvise(DONTNEED)");
    if (kind == "shmem_copy") Punch(memfd, 0, region);
  }
  s.Stop();
  r.faults_seen = s.missing.load() + s.minor.load();
  r.resolve_ns = kind == "continue" ? s.continue_ns : s.copy_ns;
  r.wake_ns = s.wake_ns;
  ::munmap(view, region);
  if (memfd >= 0) ::close(memfd);
  ::close(uffd);
  return r;
}

void PartB(size_t region, const std::vector<size_t>& blocks, int min_faults) {
  std::vector<char> src_buf(1 << 20, 'x');
  for (size_t block : blocks) {
    const uint32_t n = static_cast<uint32_t>(region / block);
    const int rounds = std::max<int>(3, (min_faults + n - 1) / n);
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), std::mt19937(7));
    for (const char* kind : {"copy", "continue", "shmem_copy"}) {
      FaultRun r = RunFaults(kind, region, block, rounds, order, src_buf.data());
      Json("fault_cost")
          .Str("kind", kind)
          .Int("block_bytes", static_cast<int64_t>(block))
          .Int("faults", static_cast<int64_t>(r.fault_ns.size()))
          .Int("faults_seen_by_handler", static_cast<int64_t>(r.faults_seen))
          .Num("fault_us_median", MedianUs(r.fault_ns))
          .Num("fault_us_p90", PercentileUs(r.fault_ns, 0.9))
          .Num("install_us_median", MedianUs(r.resolve_ns))
          .Num("wake_us_median", MedianUs(r.wake_ns))
          .Str("uffd", r.how)
          .Str("threads", "1 faulting + 1 handler (poll, read up to 16 msgs)")
          .Print();
    }
    // Fill and punch, no faults: per block, scattered order, memfd of `region`.
    const int memfd = NewMemfd(region);
    char* alias = MapOrDie(region, MAP_SHARED, memfd);
    std::vector<uint64_t> pw, al, pu;
    for (int k = 0; k < rounds; ++k) {
      for (uint32_t b : order) {
        const uint64_t t0 = NowNs();
        PwriteAll(memfd, src_buf.data(), block, size_t{b} * block);
        pw.push_back(NowNs() - t0);
      }
      for (uint32_t b : order) {
        const uint64_t t0 = NowNs();
        Punch(memfd, size_t{b} * block, block);
        pu.push_back(NowNs() - t0);
      }
      for (uint32_t b : order) {
        const uint64_t t0 = NowNs();
        std::memcpy(alias + size_t{b} * block, src_buf.data(), block);
        al.push_back(NowNs() - t0);
      }
      if (::madvise(alias, region, MADV_DONTNEED) != 0) Fatal("madvise");
      Punch(memfd, 0, region);
    }
    ::munmap(alias, region);
    ::close(memfd);
    for (auto& [name, v] : {std::pair<const char*, std::vector<uint64_t>*>{"fill_pwrite", &pw},
                            {"fill_alias", &al}, {"punch_unmapped", &pu}}) {
      Json("block_cost")
          .Str("kind", name)
          .Int("block_bytes", static_cast<int64_t>(block))
          .Int("ops", static_cast<int64_t>(v->size()))
          .Num("us_median", MedianUs(*v))
          .Num("us_p90", PercentileUs(*v, 0.9))
          .Print();
    }
  }
}

// ---------------------------------------------------------------------------------------
// Part c: two processes.

// The child's side: a command loop over a socket.
enum Op : uint32_t { kMap, kRead, kWrite, kTouchAll, kPfn, kExit };
struct Cmd {
  Op op;
  uint64_t arg, arg2;
};
struct Reply {
  uint64_t value, missing, minor, ns;
};

void SendAll(int fd, const void* p, size_t n) {
  if (::send(fd, p, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) Fatal("send");
}
void RecvAll(int fd, void* p, size_t n) {
  if (::recv(fd, p, n, MSG_WAITALL) != static_cast<ssize_t>(n)) Fatal("recv");
}

// A process's view of the memfd with its own userfaultfd and handler (MISSING faults filled
// with `fill`'s first bytes).
struct View {
  int uffd = -1;
  char* base = nullptr;
  size_t len = 0;
  Server* server = nullptr;
  std::vector<char> fill;
  void Open(int memfd, size_t l, size_t block, uint64_t mode, uint64_t fill_value) {
    len = l;
    fill.assign(std::max(block, kPage), 0);
    Store64(fill.data(), fill_value);
    uffd = OpenUffdAny(UFFD_FEATURE_MINOR_SHMEM, nullptr);
    base = MapOrDie(len, MAP_SHARED, memfd);
    RegisterOrDie(uffd, base, len, mode);
    server = new Server(uffd, base, len, block, fill.data());
    server->Start(false);
  }
  void Close() {
    if (server == nullptr) return;
    server->Stop();
    delete server;
    server = nullptr;
    ::munmap(base, len);
    ::close(uffd);
  }
  Reply Do(const Cmd& c) {
    Reply r = {};
    const uint64_t m0 = server->missing.load(), n0 = server->minor.load();
    const uint64_t t0 = NowNs();
    switch (c.op) {
      case kRead: r.value = Load64(base + c.arg); break;
      case kWrite: Store64(base + c.arg, c.arg2); break;
      case kTouchAll:
        for (size_t off = 0; off < len; off += kPage) r.value += Load(base + off);
        break;
      case kPfn: r.value = Pfn(base + c.arg); break;
      default: break;
    }
    r.ns = NowNs() - t0;
    r.missing = server->missing.load() - m0;
    r.minor = server->minor.load() - n0;
    return r;
  }
};

void ChildLoop(int sock, int memfd) {
  View v;
  for (;;) {
    Cmd c = {};
    RecvAll(sock, &c, sizeof c);
    Reply r = {};
    if (c.op == kExit) {
      v.Close();
      SendAll(sock, &r, sizeof r);
      std::_Exit(0);
    }
    if (c.op == kMap) {
      v.Close();
      v.Open(memfd, c.arg, c.arg2 >> 8, c.arg2 & 0xff, 0xB0B0B0B0ULL);
    } else {
      r = v.Do(c);
    }
    SendAll(sock, &r, sizeof r);
  }
}

struct Peer {
  int sock = -1;
  pid_t pid = -1;
  Reply Call(Op op, uint64_t a = 0, uint64_t b = 0) {
    Cmd c = {op, a, b};
    SendAll(sock, &c, sizeof c);
    Reply r = {};
    RecvAll(sock, &r, sizeof r);
    return r;
  }
  void Exit() {
    Call(kExit);
    ::close(sock);
    int st = 0;
    ::waitpid(pid, &st, 0);
  }
};

Peer ForkPeer(int memfd) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) Fatal("socketpair");
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) Fatal("fork");
  if (pid == 0) {
    ::close(sv[0]);
    ChildLoop(sv[1], memfd);
  }
  ::close(sv[1]);
  return Peer{sv[0], pid};
}

std::string MyMemcg() {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctl = line.substr(a + 1, b - a - 1);
    if (ctl == "memory") return "/sys/fs/cgroup/memory" + line.substr(b + 1);
  }
  return "";
}

int64_t CgUsageKiB(const std::string& cg) {
  const std::string s = ReadLine(cg + "/memory.usage_in_bytes");
  return s.empty() ? -1 : static_cast<int64_t>(std::strtoull(s.c_str(), nullptr, 10) / 1024);
}

int64_t CgStatKiB(const std::string& cg, const std::string& key) {
  std::ifstream f(cg + "/memory.stat");
  std::string k;
  uint64_t v;
  while (f >> k >> v) {
    if (k == key) return static_cast<int64_t>(v / 1024);
  }
  return -1;
}

void PartC(size_t region, const std::vector<size_t>& blocks, int min_faults) {
  constexpr size_t kLen = 64 * kPage;
  const uint64_t both = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_MINOR;
  for (uint64_t b_mode : {both, static_cast<uint64_t>(UFFDIO_REGISTER_MODE_MINOR)}) {
    const int memfd = NewMemfd(kLen);
    View a;
    a.Open(memfd, kLen, kPage, both, 0xA0A0A0A0ULL);
    Peer b = ForkPeer(memfd);
    b.Call(kMap, kLen, (kPage << 8) | b_mode);
    Json j("cross_process");
    j.Str("b_registration", b_mode == both ? "MISSING|MINOR" : "MINOR");
    j.Str("a_registration", "MISSING|MINOR").Str("fd_passing", "fork (inherited descriptor)");
    // A fills blocks 0 and 1 through the memfd; B reads block 0 first.
    std::vector<char> blk(kPage, 0);
    Store64(blk.data(), 0xA1);
    const int64_t kib0 = StBlocksKiB(memfd);
    PwriteAll(memfd, blk.data(), kPage, 0);
    PwriteAll(memfd, blk.data(), kPage, kPage);
    const int64_t kib1 = StBlocksKiB(memfd);
    Reply r = b.Call(kRead, 0);
    j.Int("b_first_read_value", static_cast<int64_t>(r.value));
    j.Int("b_first_read_minor", static_cast<int64_t>(r.minor));
    j.Int("b_first_read_missing", static_cast<int64_t>(r.missing));
    j.Int("memfd_kib_before_fill", kib0).Int("memfd_kib_after_fill", kib1);
    j.Int("memfd_kib_after_b_read", StBlocksKiB(memfd));
    Reply ra = a.Do({kRead, 0, 0});
    j.Int("a_first_read_minor", static_cast<int64_t>(ra.minor));
    (void)a.Do({kRead, kPage, 0});
    (void)b.Call(kRead, kPage);
    const uint64_t pfn_a = a.Do({kPfn, 0, 0}).value, pfn_b = b.Call(kPfn, 0).value;
    j.Str("same_physical_page",
          pfn_a == 0 || pfn_b == 0 ? "pfn hidden" : (pfn_a == pfn_b ? "yes" : "no"));
    // Stores both ways, no fault expected.
    a.Do({kWrite, 0, 0xA2});
    r = b.Call(kRead, 0);
    j.Bool("b_sees_a_store", r.value == 0xA2).Int("b_faults_for_it", static_cast<int64_t>(r.minor + r.missing));
    b.Call(kWrite, 8, 0xB1);
    ra = a.Do({kRead, 8, 0});
    j.Bool("a_sees_b_store", ra.value == 0xB1);
    // Punch both blocks (mapped in A and B); B touches block 1 first, A block 0 first.
    const int64_t kib2 = StBlocksKiB(memfd);
    Punch(memfd, 0, 2 * kPage);
    j.Int("memfd_kib_before_punch", kib2).Int("memfd_kib_after_punch", StBlocksKiB(memfd));
    r = b.Call(kRead, kPage);
    j.Int("b_after_punch_missing", static_cast<int64_t>(r.missing));
    j.Int("b_after_punch_minor", static_cast<int64_t>(r.minor));
    j.Str("b_after_punch_value", r.value == 0xB0B0B0B0ULL ? "its handler's copy"
                                 : r.value == 0          ? "zeros (no fault)"
                                                         : std::to_string(r.value));
    ra = a.Do({kRead, 0, 0});
    j.Int("a_after_punch_missing", static_cast<int64_t>(ra.missing));
    j.Int("a_after_punch_minor", static_cast<int64_t>(ra.minor));
    ra = a.Do({kRead, kPage, 0});
    j.Int("a_block1_after_b_refault_minor", static_cast<int64_t>(ra.minor));
    j.Int("a_block1_after_b_refault_missing", static_cast<int64_t>(ra.missing));
    j.Str("a_block1_value", ra.value == 0xB0B0B0B0ULL ? "B's handler's copy"
                            : ra.value == 0          ? "zeros"
                                                     : std::to_string(ra.value));
    r = b.Call(kRead, 0);
    j.Str("b_block0_value_after_a_refault", r.value == 0xA0A0A0A0ULL ? "A's handler's copy"
                                            : r.value == 0           ? "zeros"
                                                                     : std::to_string(r.value));
    j.Int("b_block0_minor", static_cast<int64_t>(r.minor));
    j.Print();
    b.Exit();
    a.Close();
    ::close(memfd);
  }

  // Memory released by a punch: memfd blocks and this cgroup's usage, 64 MiB mapped in two
  // processes.
  {
    const std::string cg = MyMemcg();
    constexpr size_t kBig = 64 << 20;
    const int memfd = NewMemfd(kBig);
    std::vector<char> src(1 << 20, 'y');
    const int64_t u0 = CgUsageKiB(cg);
    for (size_t off = 0; off < kBig; off += src.size()) PwriteAll(memfd, src.data(), src.size(), off);
    View a;
    a.Open(memfd, kBig, 1 << 20, both, 1);
    Peer b = ForkPeer(memfd);
    b.Call(kMap, kBig, (size_t{1 << 20} << 8) | both);
    a.Do({kTouchAll, 0, 0});
    Reply r = b.Call(kTouchAll);
    const int64_t u1 = CgUsageKiB(cg), k1 = StBlocksKiB(memfd);
    Punch(memfd, 0, kBig);
    const int64_t u2 = CgUsageKiB(cg), k2 = StBlocksKiB(memfd);
    Json("punch_releases")
        .Str("memcg", cg)
        .Int("memfd_kib_filled", k1)
        .Int("memfd_kib_after_punch", k2)
        .Int("memcg_kib_before_fill", u0)
        .Int("memcg_kib_filled_and_mapped_twice", u1)
        .Int("memcg_kib_after_punch", u2)
        .Int("b_minor_faults_reading_64MiB_in_1MiB_blocks", static_cast<int64_t>(r.minor))
        .Str("note", "memcg usage includes every other task of that cgroup")
        .Print();
    b.Exit();
    a.Close();
    ::close(memfd);
  }

  // Punch cost per block while A and B both map every block.
  std::vector<char> src(1 << 20, 'z');
  for (size_t block : blocks) {
    const uint32_t n = static_cast<uint32_t>(region / block);
    const int rounds = std::max<int>(2, (min_faults + n - 1) / n);
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), std::mt19937(9));
    const int memfd = NewMemfd(region);
    View a;
    a.Open(memfd, region, block, both, 1);
    Peer b = ForkPeer(memfd);
    b.Call(kMap, region, (block << 8) | both);
    std::vector<uint64_t> ns;
    uint64_t b_missing = 0;
    for (int k = 0; k < rounds; ++k) {
      for (size_t off = 0; off < region; off += block) PwriteAll(memfd, src.data(), block, off);
      a.Do({kTouchAll, 0, 0});
      b.Call(kTouchAll);
      for (uint32_t i : order) {
        const uint64_t t0 = NowNs();
        Punch(memfd, size_t{i} * block, block);
        ns.push_back(NowNs() - t0);
      }
      if (k == 0) b_missing = b.Call(kRead, 0).missing;  // refills block 0 (B's copy)
      Punch(memfd, 0, block);
    }
    Json("punch_cost_mapped_in_two")
        .Int("block_bytes", static_cast<int64_t>(block))
        .Int("ops", static_cast<int64_t>(ns.size()))
        .Num("us_median", MedianUs(ns))
        .Num("us_p90", PercentileUs(ns, 0.9))
        .Int("b_next_access_missing_faults", static_cast<int64_t>(b_missing))
        .Print();
    b.Exit();
    a.Close();
    ::close(memfd);
  }
}

// ---------------------------------------------------------------------------------------
// Part d: memory cgroup charging (v1).

// Forks a process that joins `cg`, maps the memfd with its own userfaultfd (MINOR), fills
// it with pwrite when `fill`, reads it fully when `read` and then waits for a byte on the
// returned pipe before it exits. Returns {pid, write end}; the child writes one status byte
// (1: ready, 2: fill failed) to `ready`.
struct Member {
  pid_t pid;
  int go;
  bool reaped = false;
  int status = 0;
};
Member Spawn(const std::string& cg, int memfd, size_t len, bool fill, bool read, bool private_copy,
             int ready) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) Fatal("pipe");
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) Fatal("fork");
  if (pid == 0) {
    ::close(p[1]);
    if (!WriteFile(cg + "/cgroup.procs", std::to_string(::getpid()))) Fatal("join cgroup");
    uint8_t status = 1;
    std::vector<char> src(1 << 20, 'c');
    if (fill) {
      for (size_t off = 0; off < len; off += src.size()) {
        if (::pwrite(memfd, src.data(), src.size(), static_cast<off_t>(off)) !=
            static_cast<ssize_t>(src.size())) {
          status = 2;
          break;
        }
      }
    }
    View v;
    if (read && status == 1) {
      if (private_copy) {  // today's path: a private anonymous region filled by UFFDIO_COPY
        v.uffd = OpenUffdAny(0, nullptr);
        v.base = MapOrDie(len, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1);
        RegisterOrDie(v.uffd, v.base, len, UFFDIO_REGISTER_MODE_MISSING);
        v.len = len;
        v.fill.assign(1 << 20, 'c');
        v.server = new Server(v.uffd, v.base, len, 1 << 20, v.fill.data());
        v.server->Start(false);
      } else {
        v.Open(memfd, len, 1 << 20, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_MINOR, 0);
      }
      v.Do({kTouchAll, 0, 0});
    }
    if (::write(ready, &status, 1) != 1) std::_Exit(4);
    char c;
    (void)::read(p[0], &c, 1);
    std::_Exit(0);
  }
  ::close(p[0]);
  return Member{pid, p[1]};
}

// Waits for one status byte from member `m`; 0 when it died first (then reaped).
uint8_t AwaitReady(int ready_rd, Member* m) {
  for (;;) {
    struct pollfd pfd = {ready_rd, POLLIN, 0};
    if (::poll(&pfd, 1, 100) == 1) {
      uint8_t s = 0;
      if (::read(ready_rd, &s, 1) == 1) return s;
    }
    if (::waitpid(m->pid, &m->status, WNOHANG) == m->pid) {
      m->reaped = true;
      return 0;
    }
  }
}

void Release(Member* m) {
  // A byte, not EOF: the members forked later hold copies of this pipe's write end.
  const char c = 'x';
  (void)::write(m->go, &c, 1);
  ::close(m->go);
  if (!m->reaped) ::waitpid(m->pid, &m->status, 0);
  m->reaped = true;
}

std::string MakeCg(const std::string& parent, const std::string& name, size_t limit) {
  const std::string cg = parent + "/" + name;
  if (::mkdir(cg.c_str(), 0755) != 0 && errno != EEXIST) return "";
  if (!WriteFile(cg + "/memory.limit_in_bytes", std::to_string(limit))) return "";
  return cg;
}

void CgRow(Json& j, const std::string& prefix, const std::string& cg) {
  j.Int(prefix + "_usage_kib", CgUsageKiB(cg));
  j.Int(prefix + "_shmem_kib", CgStatKiB(cg, "shmem"));
  j.Int(prefix + "_rss_kib", CgStatKiB(cg, "rss"));
  j.Int(prefix + "_mapped_file_kib", CgStatKiB(cg, "mapped_file"));
}

void PartD(int procs) {
  const std::string parent = MyMemcg();
  const std::string base_name = "umap-probe-" + std::to_string(::getpid());
  const std::string g1 = MakeCg(parent, base_name + "-g1", size_t{1} << 30);
  if (g1.empty()) {
    Json("memcg").Str("skipped", "cannot create a memory cgroup under " + parent + ": " +
                                 ErrName(errno)).Print();
    return;
  }
  const std::string g2 = MakeCg(parent, base_name + "-g2", size_t{1} << 30);
  const std::string g3 = MakeCg(parent, base_name + "-g3", size_t{32} << 20);
  constexpr size_t kCache = 64 << 20;
  int rp[2];
  if (::pipe2(rp, O_CLOEXEC) != 0) Fatal("pipe");

  // d1: `procs` processes in one cgroup, one memfd cache (the first fills it), all read it.
  for (bool private_copy : {false, true}) {
    const int memfd = NewMemfd(kCache);
    Json j("memcg_same_cgroup");
    j.Str("cache", private_copy ? "private anonymous copy each (UFFDIO_COPY)"
                                : "one memfd, MINOR + UFFDIO_CONTINUE")
        .Int("processes", procs)
        .Int("cache_kib", kCache / 1024);
    const int64_t u0 = CgUsageKiB(g1);
    std::vector<Member> ms;
    for (int i = 0; i < procs; ++i) {
      ms.push_back(Spawn(g1, memfd, kCache, !private_copy && i == 0, true, private_copy, rp[1]));
      if (AwaitReady(rp[0], &ms.back()) != 1) j.Str("member_failed", std::to_string(i));
    }
    j.Int("g1_usage_kib_before", u0);
    CgRow(j, "g1", g1);
    for (auto& m : ms) Release(&m);
    j.Int("g1_usage_kib_after_exit_memfd_open", CgUsageKiB(g1));
    ::close(memfd);
    j.Int("g1_usage_kib_after_memfd_closed", CgUsageKiB(g1));
    j.Print();
  }

  // d2: a filler in g1, a reader in g2; then the filler exits; then a punch and a refill
  // from g2.
  {
    const int memfd = NewMemfd(kCache);
    Json j("memcg_two_cgroups");
    Member f = Spawn(g1, memfd, kCache, true, true, false, rp[1]);
    AwaitReady(rp[0], &f);
    Member r = Spawn(g2, memfd, kCache, false, true, false, rp[1]);
    AwaitReady(rp[0], &r);
    CgRow(j, "g1_filler", g1);
    CgRow(j, "g2_reader", g2);
    Release(&f);
    j.Int("g1_usage_kib_after_filler_exit", CgUsageKiB(g1));
    j.Int("g2_usage_kib_after_filler_exit", CgUsageKiB(g2));
    Punch(memfd, 0, kCache / 2);
    j.Int("g1_usage_kib_after_punching_half", CgUsageKiB(g1));
    Release(&r);
    Member r2 = Spawn(g2, memfd, kCache / 2, true, false, false, rp[1]);
    AwaitReady(rp[0], &r2);
    j.Int("g1_usage_kib_after_g2_refills_half", CgUsageKiB(g1));
    j.Int("g2_usage_kib_after_g2_refills_half", CgUsageKiB(g2));
    Release(&r2);
    ::close(memfd);
    j.Print();
  }

  // d3: a filler whose cgroup limit (32 MiB) is below the cache (64 MiB), no swap.
  if (!g3.empty()) {
    const int memfd = NewMemfd(kCache);
    Json j("memcg_fill_over_limit");
    j.Int("limit_kib", (32 << 20) / 1024).Int("cache_kib", kCache / 1024);
    j.Str("swap_total", ReadLine("/proc/swaps").empty() ? "?" : "see /proc/swaps");
    Member f = Spawn(g3, memfd, kCache, true, false, false, rp[1]);
    const uint8_t s = AwaitReady(rp[0], &f);
    j.Str("filler", s == 1 ? "filled all" : s == 2 ? "pwrite failed" : "died");
    j.Int("memfd_kib", StBlocksKiB(memfd));
    j.Int("g3_usage_kib", CgUsageKiB(g3));
    j.Str("g3_oom_control", ReadLine(g3 + "/memory.oom_control"));
    Release(&f);
    const int st = f.status;
    j.Str("filler_exit", WIFSIGNALED(st) ? "signal " + std::to_string(WTERMSIG(st))
                                         : "status " + std::to_string(WEXITSTATUS(st)));
    j.Int("g3_failcnt", static_cast<int64_t>(
                            std::strtoull(ReadLine(g3 + "/memory.failcnt").c_str(), nullptr, 10)));
    ::close(memfd);
    j.Print();
  }
  ::close(rp[0]);
  ::close(rp[1]);
  for (const std::string& cg : {g1, g2, g3}) {
    if (!cg.empty()) ::rmdir(cg.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string parts = "a,b,c,d";
  size_t region = 64 << 20;
  std::vector<size_t> blocks = {4096, 65536, 1 << 20};
  int min_faults = 2048;
  int procs = 4;
  CLI::App app{"umap-sharedcache-probe: userfaultfd MINOR mode on a shared memfd cache (JSON lines)"};
  app.option_defaults()->always_capture_default();
  app.add_option("--parts", parts, "comma list of a (access), b (cost per fault), c (two processes), "
                                   "d (memory cgroup v1, root)");
  app.add_option("--region", region, "bytes of the timed regions (b, c)")->check(CLI::Range(1 << 20, 1 << 30));
  app.add_option("--block-sizes", blocks, "block sizes in bytes (powers of two, 4096..1 MiB)")
      ->delimiter(',');
  app.add_option("--min-faults", min_faults, "timed faults per kind and block size, at least")
      ->check(CLI::PositiveNumber);
  app.add_option("--procs", procs, "processes sharing the cache in d")->check(CLI::Range(2, 16));
  CLI11_PARSE(app, argc, argv);
  for (size_t b : blocks) {
    if (b < kPage || b > (1u << 20) || (b & (b - 1)) != 0 || region % b != 0) {
      std::fprintf(stderr, "umap-sharedcache-probe: bad block size %zu\n", b);
      return 2;
    }
  }
  ::signal(SIGPIPE, SIG_IGN);  // a member killed by its cgroup's OOM killer
  auto has = [&](char p) { return parts.find(p) != std::string::npos; };
  if (has('a')) PartA();
  if (has('b')) PartB(region, blocks, min_faults);
  if (has('c')) PartC(region, blocks, min_faults);
  if (has('d')) PartD(procs);
  return 0;
}
