// umap-installcost: what installing and evicting a 4 KiB block costs in the kernel, the way
// the runtime does it today and the way a memfd-backed cache registered in MINOR mode would
// (docs/performance.md "Cost of a miss"). One thread, no file I/O: the read of a miss is
// modelled by a 4 KiB copy into the buffer the read would land in.
//
//   copy      (today) an anonymous private region registered MISSING: the block is copied
//             into a resident staging page ("the read"), installed with UFFDIO_COPY (a new
//             page, charged to the memory cgroup, and a second copy), and evicted with
//             process_madvise(MADV_DONTNEED) in batches of 32 scattered blocks (one TLB
//             flush per batch).
//   continue  a memfd mapped twice, the application's view registered MINOR (and MISSING)
//             and an unregistered alias for the runtime: the block is copied into the alias
//             ("the read" lands in place: the copy faults the shmem page in), installed with
//             UFFDIO_CONTINUE (maps the page that is already there), and evicted with
//             fallocate(PUNCH_HOLE) (frees the page, unmapping it from both views), one call
//             per block: there is no batched hole punch.
//   touch     copy's install, then the application's first read of each installed block
//             (a 4 KiB memcpy out of it, in the install order) against a second read: what
//             the first access to a page installed by UFFDIO_COPY costs beyond a cached one
//             (printed as first_read_us and reread_us instead of the install and evict costs).
//   rehit     continue's install of a block whose pages were dropped from the application's
//             view only (MADV_DONTNEED on it) while the memfd keeps them: what a re-hit of an
//             unmapped but still cached block would cost (a MINOR fault's UFFDIO_CONTINUE).
//
// Prints CPU microseconds per block (getrusage, user + system) for install and evict.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/kernel_probe.h"

namespace {

constexpr size_t kPage = 4096;
constexpr int kBatch = 32;

using umap_bench::CpuSeconds;
using umap_bench::Die;
using umap_bench::Map;
using umap_bench::NewUffd;
using umap_bench::Register;

struct Costs {
  double install_s = 0, evict_s = 0;
  double first_read_s = 0, reread_s = 0;  // `touch` only (wall time)
};

double WallSeconds() {
  struct timespec ts = {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Reads every block of `order` out of `region` once (4 KiB memcpy); returns the wall time.
double ReadBlocks(const std::vector<uint32_t>& order, const char* region) {
  std::vector<char> out(kPage);
  const double t0 = WallSeconds();
  for (uint32_t b : order) {
    std::memcpy(out.data(), region + size_t{b} * kPage, kPage);
    asm volatile("" : : "r"(out.data()) : "memory");  // keep the copy
  }
  return WallSeconds() - t0;
}

// Drops the given blocks of `base` with process_madvise(MADV_DONTNEED), kBatch at a time.
void DiscardBatched(int pidfd, char* base, const std::vector<uint32_t>& order) {
  iovec iov[kBatch];
  for (size_t i = 0; i < order.size(); i += kBatch) {
    const size_t n = std::min<size_t>(kBatch, order.size() - i);
    for (size_t k = 0; k < n; ++k) iov[k] = {base + size_t{order[i + k]} * kPage, kPage};
    if (::syscall(SYS_process_madvise, pidfd, iov, n, MADV_DONTNEED, 0u) < 0) {
      Die("process_madvise");
    }
  }
}

Costs RunCopy(const std::vector<uint32_t>& order, const char* src, int rounds, bool touch) {
  const size_t len = order.size() * kPage;
  const int uffd = NewUffd(0);
  char* region = Map(len, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1);
  if (::madvise(region, len, MADV_NOHUGEPAGE) != 0) Die("madvise");
  Register(uffd, region, len, UFFDIO_REGISTER_MODE_MISSING);
  char* staging = Map(kPage, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  if (pidfd < 0) Die("pidfd_open");
  Costs c;
  for (int r = 0; r < rounds; ++r) {
    double t0 = CpuSeconds();
    for (uint32_t b : order) {
      std::memcpy(staging, src, kPage);  // the read into the staging buffer
      struct uffdio_copy copy = {};
      copy.dst = reinterpret_cast<uint64_t>(region + size_t{b} * kPage);
      copy.src = reinterpret_cast<uint64_t>(staging);
      copy.len = kPage;
      copy.mode = UFFDIO_COPY_MODE_DONTWAKE;
      if (::ioctl(uffd, UFFDIO_COPY, &copy) != 0) Die("UFFDIO_COPY");
    }
    double t1 = CpuSeconds();
    if (touch) {
      c.first_read_s += ReadBlocks(order, region);
      c.reread_s += ReadBlocks(order, region);
      t1 = CpuSeconds();
    }
    DiscardBatched(pidfd, region, order);
    c.install_s += t1 - t0;
    c.evict_s += CpuSeconds() - t1;
  }
  ::close(pidfd);
  ::munmap(staging, kPage);
  ::munmap(region, len);
  ::close(uffd);
  return c;
}

// `rehit`: evict by dropping the application's view only; the memfd keeps the pages.
Costs RunContinue(const std::vector<uint32_t>& order, const char* src, int rounds, bool rehit) {
  const size_t len = order.size() * kPage;
  const int uffd = NewUffd(UFFD_FEATURE_MINOR_SHMEM);
  const int memfd = static_cast<int>(::syscall(SYS_memfd_create, "umap-installcost", MFD_CLOEXEC));
  if (memfd < 0) Die("memfd_create");
  if (::ftruncate(memfd, static_cast<off_t>(len)) != 0) Die("ftruncate");
  char* view = Map(len, MAP_SHARED, memfd);
  char* alias = Map(len, MAP_SHARED, memfd);
  Register(uffd, view, len, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_MINOR);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  if (pidfd < 0) Die("pidfd_open");
  if (rehit) {
    for (uint32_t b : order) std::memcpy(alias + size_t{b} * kPage, src, kPage);
  }
  Costs c;
  for (int r = 0; r < rounds; ++r) {
    double t0 = CpuSeconds();
    for (uint32_t b : order) {
      const size_t off = size_t{b} * kPage;
      if (!rehit) std::memcpy(alias + off, src, kPage);  // the read lands in place
      struct uffdio_continue cont = {};
      cont.range = {reinterpret_cast<uint64_t>(view + off), kPage};
      cont.mode = UFFDIO_CONTINUE_MODE_DONTWAKE;
      if (::ioctl(uffd, UFFDIO_CONTINUE, &cont) != 0) Die("UFFDIO_CONTINUE");
    }
    double t1 = CpuSeconds();
    if (rehit) {
      DiscardBatched(pidfd, view, order);
    } else {
      for (uint32_t b : order) {
        if (::fallocate(memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        static_cast<off_t>(size_t{b} * kPage), kPage) != 0) {
          Die("fallocate(PUNCH_HOLE)");
        }
      }
    }
    c.install_s += t1 - t0;
    c.evict_s += CpuSeconds() - t1;
  }
  ::close(pidfd);
  ::munmap(view, len);
  ::munmap(alias, len);
  ::close(memfd);
  ::close(uffd);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t blocks = 16384;
  int rounds = 8;
  std::string ways = "copy,continue,rehit,touch";
  CLI::App app{"umap-installcost: kernel cost of installing and evicting a 4 KiB block"};
  app.option_defaults()->always_capture_default();
  app.add_option("--blocks", blocks, "distinct blocks per round (scattered order)")
      ->check(CLI::Range(kBatch, 1 << 22));
  app.add_option("--rounds", rounds, "install + evict rounds")->check(CLI::PositiveNumber);
  app.add_option("--ways", ways, "comma list of copy, continue, rehit, touch");
  CLI11_PARSE(app, argc, argv);
  std::vector<uint32_t> order(blocks);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  std::vector<char> src(kPage, 'x');
  const double n = static_cast<double>(blocks) * rounds;
  for (size_t pos = 0; pos <= ways.size();) {
    const size_t end = std::min(ways.find(',', pos), ways.size());
    const std::string way = ways.substr(pos, end - pos);
    pos = end + 1;
    Costs c;
    if (way == "copy" || way == "touch") {
      c = RunCopy(order, src.data(), rounds, way == "touch");
    } else if (way == "continue" || way == "rehit") {
      c = RunContinue(order, src.data(), rounds, way == "rehit");
    } else {
      std::fprintf(stderr, "umap-installcost: unknown way '%s'\n", way.c_str());
      return 2;
    }
    if (way == "touch") {
      std::printf("%-8s first_read_us %.2f reread_us %.2f\n", way.c_str(), c.first_read_s * 1e6 / n,
                  c.reread_s * 1e6 / n);
      continue;
    }
    std::printf("%-8s install_us %.2f evict_us %.2f total_us %.2f\n", way.c_str(),
                c.install_s * 1e6 / n, c.evict_s * 1e6 / n, (c.install_s + c.evict_s) * 1e6 / n);
  }
  return 0;
}
