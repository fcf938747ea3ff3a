// umap-sharedcache-probe's shared helpers (bench/shared_cache_probe*.cc; issue 39): JSON
// lines on stdout, timing and medians, memfd and file helpers, opening and registering a
// userfaultfd, the handler thread (Server) that resolves MISSING and MINOR faults, and the
// parts implemented outside shared_cache_probe.cc (c and d, in shared_cache_probe_peers.cc).
#ifndef UMAP_BENCH_SHARED_CACHE_PROBE_COMMON_H_
#define UMAP_BENCH_SHARED_CACHE_PROBE_COMMON_H_

#include <linux/userfaultfd.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sharedcache_probe {

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

// Prints a "fatal" line (what, errno) and exits with status 3.
[[noreturn]] void Fatal(const char* what);
// "EPERM", "ENOENT", ...; "ok" for 0, the number for the others.
std::string ErrName(int e);

uint64_t NowNs();  // CLOCK_MONOTONIC
double MedianUs(std::vector<uint64_t> ns);
double PercentileUs(std::vector<uint64_t> ns, double p);

// The first line of a file ("" when unreadable).
std::string ReadLine(const std::string& path);
// Writes `v` to an existing file; false with errno on failure.
bool WriteFile(const std::string& path, const std::string& v);

// mmap read/write (MADV_NOHUGEPAGE, as Umap's regions), or a fatal line.
char* MapOrDie(size_t len, int flags, int fd);
// A memfd of `len` bytes (a hole).
int NewMemfd(size_t len);
// fallocate(PUNCH_HOLE|KEEP_SIZE).
void Punch(int fd, size_t off, size_t len);
void PwriteAll(int fd, const char* src, size_t len, size_t off);
// The file's allocated KiB (st_blocks / 2).
int64_t StBlocksKiB(int fd);

// ---------------------------------------------------------------------------------------
// Userfaultfd access.
enum class Way { kSyscall, kUserModeOnly, kDevice };
const char* WayName(Way w);
// Returns a new userfaultfd (not yet through UFFDIO_API), or -1 with errno.
int OpenUffd(Way w);
// The first way that works for this user, in Umap's order of preference, through UFFDIO_API
// with `features`; `how` (when not null) gets the way's name.
int OpenUffdAny(uint64_t features, std::string* how);
void RegisterOrDie(int uffd, char* p, size_t len, uint64_t mode);

// A handler thread serving one registered range: MISSING faults with UFFDIO_COPY of the
// block from `src`, MINOR faults with UFFDIO_CONTINUE of the block; the block containing the
// fault, counted from `base`.
class Server {
 public:
  Server(int uffd, char* base, size_t len, size_t block, const char* src);
  ~Server() { Stop(); }
  void Start(bool record);
  void Stop();
  std::atomic<uint64_t> missing{0}, minor{0}, other{0};
  // The install ioctl alone (DONTWAKE), and the UFFDIO_WAKE after it; read only after Stop().
  std::vector<uint64_t> copy_ns, continue_ns, wake_ns;
  std::atomic<const char*> src_override{nullptr};

 private:
  void Loop();
  void Serve(const uffd_msg& m);

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
uint64_t Pfn(const void* p);

// The parts in shared_cache_probe_peers.cc.
// c: two processes mapping one memfd, each with its own userfaultfd.
void PartC(size_t region, const std::vector<size_t>& blocks, int min_faults);
// d: memory cgroup (v1) charging of shared memfd pages (root only).
void PartD(int procs);

}  // namespace sharedcache_probe

#endif  // UMAP_BENCH_SHARED_CACHE_PROBE_COMMON_H_
