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
//
// This file: main and parts a and b; parts c and d are in shared_cache_probe_peers.cc, the
// helpers (JSON lines, timing, memfd, userfaultfd, the handler thread) in
// shared_cache_probe_common.{h,cc}.
#include <linux/userfaultfd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "shared_cache_probe_common.h"


#ifndef UFFD_FEATURE_POISON  // the kernel's value (6.6); older headers lack it
#define UFFD_FEATURE_POISON (1 << 14)
#endif

namespace sharedcache_probe {
namespace {

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

}  // namespace
}  // namespace sharedcache_probe

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
    if (b < sharedcache_probe::kPage || b > (1u << 20) || (b & (b - 1)) != 0 || region % b != 0) {
      std::fprintf(stderr, "umap-sharedcache-probe: bad block size %zu\n", b);
      return 2;
    }
  }
  ::signal(SIGPIPE, SIG_IGN);  // a member killed by its cgroup's OOM killer
  auto has = [&](char p) { return parts.find(p) != std::string::npos; };
  if (has('a')) sharedcache_probe::PartA();
  if (has('b')) sharedcache_probe::PartB(region, blocks, min_faults);
  if (has('c')) sharedcache_probe::PartC(region, blocks, min_faults);
  if (has('d')) sharedcache_probe::PartD(procs);
  return 0;
}
