// umap-wpcost: what tracking writes costs per written block, the way the runtime does it
// (synchronous userfaultfd write protection) and the way WP_ASYNC + PAGEMAP_SCAN would, and
// whether UFFDIO_MOVE keeps a page's written state, the one property that would let an
// eviction under WP_ASYNC move a page out without losing a racing write (docs/design.md,
// "Dirty tracking"). One thread, no file I/O.
//
//   sync   today: pages installed write-protected (UFFDIO_COPY_MODE_WP); the first write to
//          each raises SIGBUS (UFFD_FEATURE_SIGBUS), whose handler lifts the protection of
//          that page (UFFDIO_WRITEPROTECT); a umsync's capture protects the written pages
//          again, one ioctl per span of up to 64 written pages with gaps of at most 256
//          pages (as Mapping::CaptureDirty does).
//   async  UFFD_FEATURE_WP_ASYNC: the kernel lifts the protection itself on the first
//          write; the capture is one PAGEMAP_SCAN of the region that lists the written
//          pages and protects them again (PM_SCAN_WP_MATCHING).
//
// Each round writes one byte into `--written` distinct pages, scattered over a region of
// `--pages`, then captures. Prints CPU microseconds per written page (getrusage) for the
// writes and for the capture, and the result of the move check.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/kernel_probe.h"
#include "runtime/fault/uffd_compat.h"
#include "runtime/writeback/capture_spans.h"

namespace {

// PAGEMAP_SCAN (include/uapi/linux/fs.h, 6.7+), newer than Debian 12's headers.
struct PageRegion {
  uint64_t start, end, categories;
};
struct PmScanArg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
  uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);
constexpr uint64_t kPageIsWritten = 1 << 1;
constexpr uint64_t kPageIsPresent = 1 << 3;
constexpr uint64_t kScanWpMatching = 1 << 0;
constexpr uint64_t kScanCheckWpAsync = 1 << 1;

constexpr size_t kPage = 4096;
using umap::runtime::capture::kMaxBatch;  // Mapping::CaptureDirty's span rule
using umap::runtime::capture::kMaxGapPages;

int g_uffd = -1;  // the SIGBUS handler's

using umap_bench::CpuSeconds;
using umap_bench::Die;
using umap_bench::Map;
using umap_bench::NewUffd;
using umap_bench::Register;

// An anonymous region registered MISSING | WP, every page installed write-protected.
char* WriteProtectedRegion(int uffd, size_t pages) {
  const size_t len = pages * kPage;
  char* region = Map(len, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  if (::madvise(region, len, MADV_NOHUGEPAGE) != 0) Die("madvise");
  Register(uffd, region, len, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP);
  std::vector<char> src(kPage, 'x');
  for (size_t i = 0; i < pages; ++i) {
    struct uffdio_copy copy = {};
    copy.dst = reinterpret_cast<uint64_t>(region + i * kPage);
    copy.src = reinterpret_cast<uint64_t>(src.data());
    copy.len = kPage;
    copy.mode = UFFDIO_COPY_MODE_WP;
    if (::ioctl(uffd, UFFDIO_COPY, &copy) != 0) Die("UFFDIO_COPY");
  }
  return region;
}

void WriteProtect(int uffd, char* start, size_t len, bool protect) {
  struct uffdio_writeprotect wp = {};
  wp.range = {reinterpret_cast<uint64_t>(start), len};
  wp.mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
  if (::ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) != 0) Die("UFFDIO_WRITEPROTECT");
}

// The runtime's handling of a write-protect fault in signal mode, reduced to the ioctl.
void OnSigbus(int, siginfo_t* info, void*) {
  auto page = reinterpret_cast<uintptr_t>(info->si_addr) & ~(kPage - 1);
  WriteProtect(g_uffd, reinterpret_cast<char*>(page), kPage, /*protect=*/false);
}

// PAGEMAP_SCAN of [start, start + len) for written pages; with `protect`, protects them
// again in the same walk. Returns the number of regions written into `vec`.
long ScanWritten(int pagemap, char* start, size_t len, bool protect, std::vector<PageRegion>* vec) {
  PmScanArg arg = {};
  arg.size = sizeof arg;
  arg.flags = protect ? (kScanWpMatching | kScanCheckWpAsync) : 0;
  arg.start = reinterpret_cast<uint64_t>(start);
  arg.end = arg.start + len;
  arg.vec = reinterpret_cast<uint64_t>(vec->data());
  arg.vec_len = vec->size();
  arg.category_mask = kPageIsWritten;
  arg.return_mask = kPageIsWritten | kPageIsPresent;
  const long n = ::ioctl(pagemap, kPagemapScan, &arg);
  if (n < 0) Die("PAGEMAP_SCAN");
  return n;
}

struct Costs {
  double write_s = 0, capture_s = 0;
  size_t captured = 0;  // written pages the capture found (a check, not a cost)
};

std::vector<size_t> DrawWritten(std::mt19937& rng, size_t pages, size_t written) {
  std::vector<size_t> all(pages);
  std::iota(all.begin(), all.end(), size_t{0});
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(written);
  return all;
}

// Writes one byte into each of the pages `w` of `region`; returns the CPU seconds it took.
double WriteEach(char* region, const std::vector<size_t>& w) {
  const double t0 = CpuSeconds();
  for (size_t p : w) region[p * kPage] ^= 1;
  return CpuSeconds() - t0;
}

Costs RunSync(size_t pages, size_t written, int rounds) {
  g_uffd = NewUffd(UFFD_FEATURE_SIGBUS);
  char* region = WriteProtectedRegion(g_uffd, pages);
  struct sigaction sa = {};
  sa.sa_sigaction = OnSigbus;
  sa.sa_flags = SA_SIGINFO;
  if (::sigaction(SIGBUS, &sa, nullptr) != 0) Die("sigaction");
  std::mt19937 rng(1);
  Costs c;
  for (int r = 0; r < rounds; ++r) {
    std::vector<size_t> w = DrawWritten(rng, pages, written);
    c.write_s += WriteEach(region, w);
    const double t1 = CpuSeconds();
    std::sort(w.begin(), w.end());
    for (size_t i = 0; i < w.size();) {
      size_t j = i + 1;
      while (j < w.size() && j - i < size_t{kMaxBatch} && w[j] - w[j - 1] <= kMaxGapPages) ++j;
      WriteProtect(g_uffd, region + w[i] * kPage, (w[j - 1] - w[i] + 1) * kPage, true);
      c.captured += j - i;
      i = j;
    }
    c.capture_s += CpuSeconds() - t1;
  }
  ::signal(SIGBUS, SIG_DFL);
  ::munmap(region, pages * kPage);
  ::close(g_uffd);
  return c;
}

Costs RunAsync(int pagemap, size_t pages, size_t written, int rounds) {
  const int uffd = NewUffd(UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED);
  char* region = WriteProtectedRegion(uffd, pages);
  std::vector<PageRegion> vec(written + 1);
  std::mt19937 rng(1);
  Costs c;
  for (int r = 0; r < rounds; ++r) {
    c.write_s += WriteEach(region, DrawWritten(rng, pages, written));
    const double t1 = CpuSeconds();
    const long n = ScanWritten(pagemap, region, pages * kPage, /*protect=*/true, &vec);
    for (long i = 0; i < n; ++i) c.captured += (vec[i].end - vec[i].start) / kPage;
    c.capture_s += CpuSeconds() - t1;
  }
  ::munmap(region, pages * kPage);
  ::close(uffd);
  return c;
}

// Whether a page that was not written since it was protected still reads as not written
// after UFFDIO_MOVE carries it into another registered region. Also returns the CPU
// microseconds of one move (out and back, `rounds` times).
bool MoveKeepsWrittenState(int pagemap, int rounds, double* move_us) {
  const int uffd = NewUffd(UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED | UFFD_FEATURE_MOVE);
  char* from = WriteProtectedRegion(uffd, 2);
  char* to = WriteProtectedRegion(uffd, 2);
  // Page 1 of `to` is what the move lands on; make it a hole first.
  if (::madvise(to + kPage, kPage, MADV_DONTNEED) != 0) Die("madvise(DONTNEED)");
  struct uffdio_move mv = {};
  mv.dst = reinterpret_cast<uint64_t>(to + kPage);
  mv.src = reinterpret_cast<uint64_t>(from + kPage);
  mv.len = kPage;
  if (::ioctl(uffd, UFFDIO_MOVE, &mv) != 0) Die("UFFDIO_MOVE");
  std::vector<PageRegion> vec(4);
  const long n = ScanWritten(pagemap, to + kPage, kPage, /*protect=*/false, &vec);
  const bool kept = n == 0;  // the clean page must not be listed as written
  const double t0 = CpuSeconds();
  for (int r = 0; r < rounds; ++r) {
    std::swap(mv.dst, mv.src);
    if (::ioctl(uffd, UFFDIO_MOVE, &mv) != 0) Die("UFFDIO_MOVE");
  }
  *move_us = (CpuSeconds() - t0) * 1e6 / rounds;
  ::munmap(from, 2 * kPage);
  ::munmap(to, 2 * kPage);
  ::close(uffd);
  return kept;
}

}  // namespace

int main(int argc, char** argv) {
  size_t pages = 65536;
  size_t written = 512;
  int rounds = 50;
  std::string ways = "sync,async";
  CLI::App app{"umap-wpcost: cost of tracking written pages, synchronous WP against WP_ASYNC"};
  app.option_defaults()->always_capture_default();
  app.add_option("--pages", pages, "pages in the region (installed, write-protected)")
      ->check(CLI::Range(size_t{16}, size_t{1} << 22));
  app.add_option("--written", written, "distinct pages written per round (scattered)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 22));
  app.add_option("--rounds", rounds, "write + capture rounds")->check(CLI::PositiveNumber);
  app.add_option("--ways", ways, "comma list of sync, async");
  CLI11_PARSE(app, argc, argv);
  if (written > pages) {
    std::fprintf(stderr, "umap-wpcost: --written %zu is more than --pages %zu\n", written, pages);
    return 2;
  }
  const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) Die("open /proc/self/pagemap");
  const double n = static_cast<double>(written) * rounds;
  for (size_t pos = 0; pos <= ways.size();) {
    const size_t end = std::min(ways.find(',', pos), ways.size());
    const std::string way = ways.substr(pos, end - pos);
    pos = end + 1;
    Costs c;
    if (way == "sync") {
      c = RunSync(pages, written, rounds);
    } else if (way == "async") {
      c = RunAsync(pagemap, pages, written, rounds);
    } else {
      std::fprintf(stderr, "umap-wpcost: unknown way '%s'\n", way.c_str());
      return 2;
    }
    if (c.captured != written * static_cast<size_t>(rounds)) {
      std::fprintf(stderr, "umap-wpcost: %s captured %zu written pages, expected %zu\n",
                   way.c_str(), c.captured, written * static_cast<size_t>(rounds));
      return 1;
    }
    std::printf("%-6s write_us %.2f capture_us %.2f total_us %.2f\n", way.c_str(),
                c.write_s * 1e6 / n, c.capture_s * 1e6 / n, (c.write_s + c.capture_s) * 1e6 / n);
  }
  double move_us = 0;
  const bool kept = MoveKeepsWrittenState(pagemap, 2 * rounds, &move_us);
  std::printf("move   keeps_written_state %s move_us %.2f\n", kept ? "yes" : "no", move_us);
  return 0;
}
