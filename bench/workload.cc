#include "bench/workload.h"

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "umap/umap.hpp"

namespace umap_bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

absl::Status Errno(int err, const std::string& what) { return absl::ErrnoToStatus(err, what); }

// Closes an fd on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::StatusOr<int> OpenFile(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(errno, absl::StrCat("open ", path));
  return fd;
}

absl::Status PreadFull(int fd, char* buf, size_t len, uint64_t off, const std::string& path) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, buf + done, len - done, static_cast<off_t>(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, absl::StrCat("pread ", path, " offset ", off + done));
    }
    if (n == 0) {
      return absl::OutOfRangeError(
          absl::StrCat("pread ", path, ": end of file at offset ", off + done));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status PwriteFull(int fd, const char* buf, size_t len, uint64_t off,
                        const std::string& path) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pwrite(fd, buf + done, len - done, static_cast<off_t>(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, absl::StrCat("pwrite ", path, " offset ", off + done));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteSmallFile(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, absl::StrCat("open ", path));
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return Errno(n < 0 ? err : EIO, absl::StrCat("write '", text, "' to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ReadNumberFile(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  if (!(in >> v)) return absl::InternalError(absl::StrCat("cannot read a number from ", path));
  return v;
}

// VmHWM of this process in bytes (0 if unreadable).
uint64_t PeakRss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) << 10;
  }
  return 0;
}

struct FaultCounts {
  uint64_t minor = 0, major = 0;
};
FaultCounts ProcessFaults() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return {static_cast<uint64_t>(ru.ru_minflt), static_cast<uint64_t>(ru.ru_majflt)};
}

// xoshiro256**: fast, good enough, reproducible from a seed.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& x : s_) x = SplitMix(seed);
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

// The sequence of items one worker thread touches.
class ItemGen {
 public:
  ItemGen(const Workload& w, uint64_t items, unsigned thread, uint64_t seed)
      : w_(w), items_(items), rng_(seed) {
    part_start_ = items * thread / w.threads;
    uint64_t part_end = items * (thread + 1) / w.threads;
    part_len_ = std::max<uint64_t>(1, part_end - part_start_);
    prev_ = part_start_;
  }
  uint64_t Next() {
    uint64_t item;
    switch (w_.pattern) {
      case Pattern::kRandom:
        if (i_ > 0 && w_.locality > 0 && rng_.Unit() < w_.locality) {
          item = prev_ + 1 == items_ ? 0 : prev_ + 1;
        } else {
          item = rng_.Below(items_);
        }
        break;
      case Pattern::kSequential:
        item = part_start_ + (i_ % part_len_);
        break;
      case Pattern::kStrided:
      default:
        item = (part_start_ + i_ * w_.stride_items) % items_;
        break;
    }
    ++i_;
    prev_ = item;
    return item;
  }
  bool NextIsWrite() {
    switch (w_.access) {
      case Access::kRead: return false;
      case Access::kWrite: return true;
      case Access::kMixed:
      default: return rng_.Unit() < w_.write_fraction;
    }
  }

 private:
  const Workload& w_;
  const uint64_t items_;
  Rng rng_;
  uint64_t part_start_ = 0, part_len_ = 1, prev_ = 0, i_ = 0;
};

// Per-thread state, one cache line apart so the progress counters do not false-share.
struct alignas(64) Worker {
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> item_now{~0ull};
  std::vector<uint64_t> written;  // bitmap of items this thread wrote
  uint64_t read_checks = 0;
  uint64_t bad_reads = 0;
  std::string first_bad;  // where the first wrong read was
  absl::Status error;     // first I/O or sync error; the thread stops there
};

// What the SIGBUS handler reports (set around each run; read only in the handler).
struct SigbusInfo {
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> len{0};
  char what[512] = {};
};
SigbusInfo g_sigbus;

void AppendStr(char*& p, char* end, const char* s) {
  while (*s && p < end) *p++ = *s++;
}
void AppendHex(char*& p, char* end, uint64_t v) {
  char tmp[17];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v && n < 16);
  AppendStr(p, end, "0x");
  while (n > 0 && p < end) *p++ = tmp[--n];
}
void AppendDec(char*& p, char* end, uint64_t v) {
  char tmp[21];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  while (n > 0 && p < end) *p++ = tmp[--n];
}

// Async-signal-safe: formats with the helpers above, writes, exits 3.
void OnSigbus(int sig, siginfo_t* si, void* ucontext) {
  // Installed after Umap's own handler: in signal fault mode an ordinary miss is a SIGBUS
  // that Umap resolves (include/umap/umap.h).
  if (umap_handle_signal(sig, si, ucontext)) return;
  char buf[1024];
  char* p = buf;
  char* end = buf + sizeof(buf) - 1;
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  const uintptr_t base = g_sigbus.base.load(std::memory_order_relaxed);
  const size_t len = g_sigbus.len.load(std::memory_order_relaxed);
  AppendStr(p, end, "\numap-bench: SIGBUS at address ");
  AppendHex(p, end, a);
  if (base != 0 && a >= base && a < base + len) {
    AppendStr(p, end, " = file offset ");
    AppendDec(p, end, a - base);
  }
  AppendStr(p, end, " during ");
  AppendStr(p, end, g_sigbus.what);
  AppendStr(p, end,
            " (the mapping raised SIGBUS: an I/O error, a page past end of file, or no cache "
            "block; any umap log lines above say which)\n");
  *p = 0;
  ssize_t ignored = ::write(2, buf, static_cast<size_t>(p - buf));
  (void)ignored;
  ::_exit(3);
}

void InstallSigbusHandler() {
  static bool done = [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
    return true;
  }();
  (void)done;
}

// Compiler barrier: the bytes at p count as used, so a memcpy into them is not elided.
inline void Use(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// Checks the words of one read op. Accepts the original or (when writes run) the tag value.
inline bool CheckRead(const uint64_t* buf, uint64_t first_word, size_t n, ReadCheck how,
                      bool writes, uint32_t tag, size_t* bad_index) {
  auto ok = [&](size_t i) {
    const uint64_t k = first_word + i;
    return buf[i] == OriginalWord(k) || (writes && buf[i] == WrittenWord(k, tag));
  };
  if (how == ReadCheck::kAll) {
    for (size_t i = 0; i < n; ++i) {
      if (!ok(i)) {
        *bad_index = i;
        return false;
      }
    }
    return true;
  }
  if (!ok(0)) {
    *bad_index = 0;
    return false;
  }
  if (!ok(n - 1)) {
    *bad_index = n - 1;
    return false;
  }
  return true;
}

// The access paths. Memory: umap or mmap mapping; File: pread/pwrite.
struct MemoryTarget {
  char* base;
  size_t len;
  Backend backend;
  absl::Status Read(uint64_t off, char* buf, size_t n) {
    std::memcpy(buf, base + off, n);
    Use(buf);
    return absl::OkStatus();
  }
  absl::Status Write(uint64_t off, char*, size_t n, uint32_t tag) {
    FillWords(reinterpret_cast<uint64_t*>(base + off), off / 8, n / 8, tag);
    return absl::OkStatus();
  }
  absl::Status Sync() {
    if (backend == Backend::kUmap) {
      if (umsync(base, len, MS_SYNC) != 0) return Errno(errno, "umsync of the whole mapping");
    } else {
      if (::msync(base, len, MS_SYNC) != 0) return Errno(errno, "msync of the whole mapping");
    }
    return absl::OkStatus();
  }
};

struct FileTarget {
  int fd;
  const std::string* path;
  absl::Status Read(uint64_t off, char* buf, size_t n) {
    return PreadFull(fd, buf, n, off, *path);
  }
  absl::Status Write(uint64_t off, char* buf, size_t n, uint32_t tag) {
    FillWords(reinterpret_cast<uint64_t*>(buf), off / 8, n / 8, tag);
    return PwriteFull(fd, buf, n, off, *path);
  }
  absl::Status Sync() {
    if (::fdatasync(fd) != 0) return Errno(errno, absl::StrCat("fdatasync ", *path));
    return absl::OkStatus();
  }
};

template <typename Target>
void WorkerLoop(Target target, const Workload& w, uint64_t items, unsigned t, int repeat,
                uint32_t tag, const std::atomic<bool>& go, Worker& me) {
  const size_t op = w.op_size;
  const size_t words = op / 8;
  char* buf = static_cast<char*>(std::aligned_alloc(4096, (op + 4095) / 4096 * 4096));
  if (buf == nullptr) {
    me.error = absl::ResourceExhaustedError("allocating the op buffer");
    return;
  }
  std::memset(buf, 0, op);
  ItemGen gen(w, items, t,
              w.seed * 0x9e3779b97f4a7c15ull + t * 0x632be59bd9b4e019ull + repeat * 7919 + tag);
  const bool writes = w.writes();
  if (writes) me.written.assign((items + 63) / 64, 0);
  go.wait(false, std::memory_order_acquire);
  for (uint64_t i = 0; i < w.ops_per_thread; ++i) {
    const uint64_t item = gen.Next();
    me.item_now.store(item, std::memory_order_relaxed);
    const uint64_t off = item * op;
    if (writes && gen.NextIsWrite()) {
      me.error = target.Write(off, buf, op, tag);
      me.written[item >> 6] |= 1ull << (item & 63);
    } else {
      me.error = target.Read(off, buf, op);
      if (me.error.ok()) {
        size_t bad = 0;
        ++me.read_checks;
        if (!CheckRead(reinterpret_cast<const uint64_t*>(buf), off / 8, words, w.read_check,
                       writes, tag, &bad)) [[unlikely]] {
          if (me.bad_reads++ == 0) {
            const uint64_t k = off / 8 + bad;
            me.first_bad = absl::StrFormat(
                "thread %u op %u: item %u, file offset %u holds 0x%016x (%g), expected "
                "0x%016x (%g)%s",
                t, i, item, k * 8, reinterpret_cast<const uint64_t*>(buf)[bad],
                std::bit_cast<double>(reinterpret_cast<const uint64_t*>(buf)[bad]),
                OriginalWord(k), std::bit_cast<double>(OriginalWord(k)),
                writes ? absl::StrFormat(" or 0x%016x", WrittenWord(k, tag)) : "");
          }
        }
      }
    }
    if (me.error.ok() && w.sync_every > 0 && (i + 1) % w.sync_every == 0 && writes) {
      me.error = target.Sync();
    }
    if (!me.error.ok()) {
      me.error = absl::Status(me.error.code(),
                              absl::StrCat("thread ", t, " op ", i, " (item ", item,
                                           ", file offset ", off, "): ", me.error.message()));
      break;
    }
    me.done.store(i + 1, std::memory_order_relaxed);
  }
  std::free(buf);
}

// Watches the workers' progress; on a stall prints where each thread is and exits 4.
class Watchdog {
 public:
  Watchdog(std::vector<std::unique_ptr<Worker>>& workers, double stall_seconds,
           std::string what, std::function<std::string()> extra)
      : workers_(workers), stall_(stall_seconds), what_(std::move(what)),
        extra_(std::move(extra)), thread_([this] { Loop(); }) {}
  ~Watchdog() {
    stop_.store(true);
    thread_.join();
  }
  void SetPhase(const char* p) {
    phase_.store(p);
    bump_.fetch_add(1);
  }

 private:
  void Loop() {
    uint64_t last = ~0ull;
    auto last_change = Clock::now();
    while (!stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      uint64_t sum = bump_.load();
      for (auto& w : workers_) sum += w->done.load(std::memory_order_relaxed);
      auto now = Clock::now();
      if (sum != last) {
        last = sum;
        last_change = now;
        continue;
      }
      if (stall_ > 0 && Seconds(last_change, now) > stall_) {
        std::string msg = absl::StrFormat(
            "umap-bench: STALL: no progress for %.0f s during %s (phase: %s)\n", stall_, what_,
            phase_.load());
        for (size_t t = 0; t < workers_.size(); ++t) {
          uint64_t item = workers_[t]->item_now.load();
          absl::StrAppendFormat(&msg, "  thread %u: %u ops done, at item %s\n", t,
                                workers_[t]->done.load(),
                                item == ~0ull ? std::string("-") : absl::StrCat(item));
        }
        if (extra_) msg += extra_();
        std::fputs(msg.c_str(), stderr);
        std::fflush(stderr);
        ::_exit(4);
      }
    }
  }

  std::vector<std::unique_ptr<Worker>>& workers_;
  const double stall_;
  const std::string what_;
  std::function<std::string()> extra_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> bump_{0};
  std::atomic<const char*> phase_{"ops"};
  std::thread thread_;  // last: starts after the members above are ready
};

std::string StatsLine(const umap_stats& s) {
  return absl::StrFormat(
      "  umap stats: faults_missing %u faults_wp %u blocks_read %u blocks_written %u "
      "evictions %u dirty_evictions %u cache used %u peak %u limit %u io_errors %u sigbus %u\n",
      s.faults_missing, s.faults_wp, s.blocks_read, s.blocks_written, s.evictions,
      s.dirty_evictions, s.cache_bytes_used, s.cache_bytes_peak, s.cache_bytes_limit,
      s.io_errors, s.sigbus_raised);
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace

// --- names ------------------------------------------------------------------------------

const char* BackendName(Backend b) {
  switch (b) {
    case Backend::kUmap: return "umap";
    case Backend::kMmap: return "mmap";
    case Backend::kPread: return "pread";
  }
  return "?";
}
const char* PatternName(Pattern p) {
  switch (p) {
    case Pattern::kRandom: return "random";
    case Pattern::kSequential: return "sequential";
    case Pattern::kStrided: return "strided";
  }
  return "?";
}
const char* AccessName(Access a) {
  switch (a) {
    case Access::kRead: return "read";
    case Access::kWrite: return "write";
    case Access::kMixed: return "mixed";
  }
  return "?";
}
const char* AdviceName(Advice a) {
  switch (a) {
    case Advice::kDefault: return "default";
    case Advice::kNormal: return "normal";
    case Advice::kRandom: return "random";
    case Advice::kSequential: return "sequential";
  }
  return "?";
}

absl::StatusOr<Backend> ParseBackend(const std::string& s) {
  for (Backend b : {Backend::kUmap, Backend::kMmap, Backend::kPread}) {
    if (s == BackendName(b)) return b;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown backend '", s,
                                                 "' (umap, mmap, pread)"));
}
absl::StatusOr<Pattern> ParsePattern(const std::string& s) {
  for (Pattern p : {Pattern::kRandom, Pattern::kSequential, Pattern::kStrided}) {
    if (s == PatternName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown pattern '", s,
                                                 "' (random, sequential, strided)"));
}
absl::StatusOr<Access> ParseAccess(const std::string& s) {
  for (Access a : {Access::kRead, Access::kWrite, Access::kMixed}) {
    if (s == AccessName(a)) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown access '", s,
                                                 "' (read, write, mixed)"));
}
absl::StatusOr<Advice> ParseAdvice(const std::string& s) {
  for (Advice a : {Advice::kDefault, Advice::kNormal, Advice::kRandom, Advice::kSequential}) {
    if (s == AdviceName(a)) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown madvise '", s,
                                                 "' (default, normal, random, sequential)"));
}

const char* PolicyName(umap_policy p) {
  return p == UMAP_POLICY_RELAXED ? "relaxed" : "atomic";
}
const char* JournalModeName(umap_journal_mode m) {
  switch (m) {
    case UMAP_JOURNAL_DATA: return "data";
    case UMAP_JOURNAL_INTENT: return "intent";
    case UMAP_JOURNAL_OFF: return "off";
  }
  return "?";
}
absl::StatusOr<umap_policy> ParsePolicy(const std::string& s) {
  if (s == "atomic") return UMAP_POLICY_ATOMIC;
  if (s == "relaxed") return UMAP_POLICY_RELAXED;
  return absl::InvalidArgumentError(absl::StrCat("unknown policy '", s, "' (atomic, relaxed)"));
}
absl::StatusOr<umap_journal_mode> ParseJournalMode(const std::string& s) {
  for (umap_journal_mode m : {UMAP_JOURNAL_DATA, UMAP_JOURNAL_INTENT, UMAP_JOURNAL_OFF}) {
    if (s == JournalModeName(m)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown journal mode '", s,
                                                 "' (data, intent, off)"));
}

std::string Workload::Name() const {
  std::string n = absl::StrCat(PatternName(pattern), "-", AccessName(access));
  if (access == Access::kMixed) {
    absl::StrAppend(&n, std::lround(write_fraction * 100), "w");
  }
  if (op_size % 1024 == 0) {
    absl::StrAppend(&n, "-", op_size / 1024, "k");
  } else {
    absl::StrAppend(&n, "-", op_size, "B");
  }
  if (pattern == Pattern::kRandom && locality > 0) absl::StrAppend(&n, "-L", locality);
  if (pattern == Pattern::kStrided) absl::StrAppend(&n, "-s", stride_items);
  if (writes() && sync_every > 0) absl::StrAppend(&n, "-sync", sync_every);
  return n;
}

std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return absl::StrCat(n, " B");
  return v >= 100 || v == std::floor(v) ? absl::StrFormat("%.0f %s", v, units[u])
                                        : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string HumanCount(double v) {
  if (v >= 1e6) return absl::StrFormat("%.3gM", v / 1e6);
  if (v >= 1e4) return absl::StrFormat("%.3gk", v / 1e3);
  if (v >= 100) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.3g", v);
}

// --- the file ---------------------------------------------------------------------------

void FillWords(uint64_t* dst, uint64_t first, size_t n, uint32_t tag) {
  if (tag == 0) {
    for (size_t i = 0; i < n; ++i) dst[i] = OriginalWord(first + i);
  } else {
    const uint64_t base = first + 1 + (static_cast<uint64_t>(tag) << kTagShift);
    for (size_t i = 0; i < n; ++i) {
      dst[i] = std::bit_cast<uint64_t>(-static_cast<double>(base + i));
    }
  }
}

absl::StatusOr<BenchFile> BenchFile::Open(const std::string& path, uint64_t size) {
  if (size == 0 || size % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("file size ", size, " must be a positive multiple of 4096"));
  }
  BenchFile f(path, size);
  struct stat st {};
  uint64_t have = 0;
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
    }
    have = static_cast<uint64_t>(st.st_size);
    if (have >= 8) {
      auto fd = OpenFile(path, O_RDONLY);
      if (!fd.ok()) return fd.status();
      Fd closer(*fd);
      uint64_t w0 = 0;
      absl::Status s = PreadFull(*fd, reinterpret_cast<char*>(&w0), 8, 0, path);
      if (!s.ok()) return s;
      if (w0 != OriginalWord(0)) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s exists but does not hold the benchmark pattern (first word 0x%016x, expected "
            "0x%016x); remove it or name another --file",
            path, w0, OriginalWord(0)));
      }
    }
  } else if (errno != ENOENT) {
    return Errno(errno, absl::StrCat("stat ", path));
  }
  if (have < size) {
    auto t0 = Clock::now();
    absl::Status s = f.Fill(have / 4096 * 4096);
    if (!s.ok()) return s;
    f.fill_seconds_ = Seconds(t0, Clock::now());
  }
  return f;
}

absl::Status BenchFile::Fill(uint64_t from) const {
  auto fd = OpenFile(path_, O_RDWR | O_CREAT);
  if (!fd.ok()) return fd.status();
  Fd closer(*fd);
  constexpr size_t kChunk = 4 << 20;
  std::vector<uint64_t> buf(kChunk / 8);
  for (uint64_t off = from; off < size_; off += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size_ - off));
    FillWords(buf.data(), off / 8, n / 8, 0);
    absl::Status s = PwriteFull(*fd, reinterpret_cast<char*>(buf.data()), n, off, path_);
    if (!s.ok()) return s;
  }
  if (::fsync(*fd) != 0) return Errno(errno, absl::StrCat("fsync ", path_));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> BenchFile::Repair() const {
  auto fd = OpenFile(path_, O_RDWR);
  if (!fd.ok()) return fd.status();
  Fd closer(*fd);
  constexpr size_t kChunk = 4 << 20;
  std::vector<uint64_t> buf(kChunk / 8);
  uint64_t wrong = 0;
  for (uint64_t off = 0; off < size_; off += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size_ - off));
    absl::Status s = PreadFull(*fd, reinterpret_cast<char*>(buf.data()), n, off, path_);
    if (!s.ok()) return s;
    bool bad = false;
    for (size_t i = 0; i < n / 8; ++i) {
      if (buf[i] != OriginalWord(off / 8 + i)) {
        wrong += 8;
        bad = true;
      }
    }
    if (bad) {
      FillWords(buf.data(), off / 8, n / 8, 0);
      s = PwriteFull(*fd, reinterpret_cast<char*>(buf.data()), n, off, path_);
      if (!s.ok()) return s;
    }
  }
  if (wrong > 0 && ::fsync(*fd) != 0) return Errno(errno, absl::StrCat("fsync ", path_));
  return wrong;
}

absl::Status BenchFile::DropCache(bool system_wide) const {
  auto fd = OpenFile(path_, O_RDONLY);
  if (!fd.ok()) return fd.status();
  Fd closer(*fd);
  // Dirty pages are not dropped by DONTNEED: make them clean first.
  if (::fdatasync(*fd) != 0) return Errno(errno, absl::StrCat("fdatasync ", path_));
  if (int err = ::posix_fadvise(*fd, 0, 0, POSIX_FADV_DONTNEED)) {
    return Errno(err, absl::StrCat("posix_fadvise(DONTNEED) ", path_));
  }
  if (system_wide) {
    ::sync();
    absl::Status s = WriteSmallFile("/proc/sys/vm/drop_caches", "3");
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(s.message(),
                                                 " (--drop-caches needs root)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> BenchFile::CachedBytes() const {
  auto fd = OpenFile(path_, O_RDONLY);
  if (!fd.ok()) return fd.status();
  Fd closer(*fd);
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, *fd, 0);
  if (p == MAP_FAILED) return Errno(errno, absl::StrCat("mmap (for mincore) ", path_));
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size_ + page - 1) / page);
  int r = ::mincore(p, size_, vec.data());
  int err = errno;
  ::munmap(p, size_);
  if (r != 0) return Errno(err, absl::StrCat("mincore ", path_));
  uint64_t n = 0;
  for (unsigned char c : vec) n += c & 1;
  return n * page;
}

absl::Status BenchFile::VerifyAndRestore(const std::vector<uint64_t>& written,
                                         uint64_t item_size, uint32_t tag) const {
  // Read what the storage holds, not what this host's page cache remembers.
  absl::Status s = DropCache(false);
  if (!s.ok()) return s;
  auto fd = OpenFile(path_, O_RDWR);
  if (!fd.ok()) return fd.status();
  Fd closer(*fd);
  const uint64_t chunk = std::max<uint64_t>(item_size, (4u << 20) / item_size * item_size);
  std::vector<uint64_t> buf(chunk / 8);
  const size_t words = item_size / 8;
  uint64_t wrong_items = 0, written_items = 0;
  std::string where;
  for (uint64_t off = 0; off < size_; off += chunk) {
    const uint64_t n = std::min<uint64_t>(chunk, size_ - off);
    s = PreadFull(*fd, reinterpret_cast<char*>(buf.data()), n, off, path_);
    if (!s.ok()) return s;
    // Items to rewrite with the original: written ones and wrong ones.
    uint64_t run_start = ~0ull;
    auto flush = [&](uint64_t end_item) -> absl::Status {
      if (run_start == ~0ull) return absl::OkStatus();
      const uint64_t a = run_start * item_size, b = end_item * item_size;
      uint64_t* p = buf.data() + (a - off) / 8;
      FillWords(p, a / 8, (b - a) / 8, 0);
      run_start = ~0ull;
      return PwriteFull(*fd, reinterpret_cast<char*>(p), b - a, a, path_);
    };
    const uint64_t first_item = off / item_size;
    const uint64_t end_item = (off + n) / item_size;
    for (uint64_t item = first_item; item < end_item; ++item) {
      const bool w = (written[item >> 6] >> (item & 63)) & 1;
      written_items += w;
      const uint64_t* p = buf.data() + (item - first_item) * words;
      const uint64_t k0 = item * words;
      bool bad = false;
      for (size_t i = 0; i < words; ++i) {
        const uint64_t want = w ? WrittenWord(k0 + i, tag) : OriginalWord(k0 + i);
        if (p[i] != want) {
          if (wrong_items < 8) {
            absl::StrAppendFormat(
                &where, "\n  item %u (%s), file offset %u: holds 0x%016x (%g), expected 0x%016x (%g)",
                item, w ? "written in this run" : "not written", (k0 + i) * 8, p[i],
                std::bit_cast<double>(p[i]), want, std::bit_cast<double>(want));
          }
          bad = true;
          break;
        }
      }
      wrong_items += bad;
      if (w || bad) {
        if (run_start == ~0ull) run_start = item;
      } else {
        s = flush(item);
        if (!s.ok()) return s;
      }
    }
    s = flush(end_item);
    if (!s.ok()) return s;
  }
  if (::fsync(*fd) != 0) return Errno(errno, absl::StrCat("fsync ", path_));
  if (wrong_items > 0) {
    return absl::DataLossError(absl::StrFormat(
        "VERIFY FAILED: %u of %u items (%u bytes each) of %s hold wrong bytes after the run "
        "(%u items were written); first ones:%s",
        wrong_items, size_ / item_size, item_size, path_, written_items, where));
  }
  return absl::OkStatus();
}

// --- one run ----------------------------------------------------------------------------

absl::StatusOr<RunResult> RunOnce(const BenchFile& file, const Workload& w,
                                  const BackendConfig& bc, int repeat, uint32_t tag) {
  if (w.op_size == 0 || w.op_size % 8 != 0 || file.size() % w.op_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op size ", w.op_size, " must be a multiple of 8 that divides the file size ",
        file.size()));
  }
  if (w.threads == 0 || w.threads > 64) {
    return absl::InvalidArgumentError(absl::StrCat("threads ", w.threads, " not in 1..64"));
  }
  if (tag == 0 || tag > kMaxTag) {
    return absl::InvalidArgumentError(absl::StrCat("tag ", tag, " not in 1..", kMaxTag));
  }
  InstallSigbusHandler();
  RunResult r;
  r.backend = bc.backend;
  r.workload = w.Name();
  r.threads = w.threads;
  r.repeat = repeat;
  const uint64_t items = file.size() / w.op_size;
  const bool writes = w.writes();
  const std::string what = absl::StrFormat("%s %s, %u threads, repeat %d on %s",
                                           BackendName(bc.backend), w.Name(), w.threads,
                                           repeat, file.path());

  auto corrupt = [&](uint64_t value) -> absl::Status {
    auto cfd = OpenFile(file.path(), O_RDWR);
    if (!cfd.ok()) return cfd.status();
    Fd closer(*cfd);
    absl::Status cs = PwriteFull(*cfd, reinterpret_cast<const char*>(&value), 8,
                                 bc.TEST_corrupt_word * 8, file.path());
    if (cs.ok() && ::fsync(*cfd) != 0) cs = Errno(errno, "fsync");
    return cs;
  };
  const bool test_corrupt = bc.TEST_corrupt_word * 8 < file.size();
  if (test_corrupt && !writes) {
    absl::Status cs = corrupt(OriginalWord(bc.TEST_corrupt_word) ^ 1);
    if (!cs.ok()) return cs;
  }

  absl::Status s = file.DropCache(bc.drop_caches);
  if (!s.ok()) return s;

  auto fdr = OpenFile(file.path(), writes ? O_RDWR : O_RDONLY);
  if (!fdr.ok()) return fdr.status();
  Fd fd(*fdr);
  const int prot = writes ? (PROT_READ | PROT_WRITE) : PROT_READ;

  // Backend set-up (untimed). Declaration order: the mapping goes before the runtime.
  std::unique_ptr<Umap::Runtime> rt;
  std::unique_ptr<Umap::Mapping> um;
  char* base = nullptr;
  if (bc.backend == Backend::kUmap) {
    auto cfg = Umap::Runtime::DefaultConfig();
    if (!cfg.ok()) return cfg.status();
    cfg->cache_bytes = bc.cache_bytes;
    cfg->block_size = bc.block_size;
    cfg->handler_threads = bc.handler_threads;
    cfg->writeback_threads = bc.writeback_threads;
    cfg->policy = bc.policy;
    cfg->journal_mode = bc.journal_mode;
    cfg->journal_dir = bc.journal_dir.empty() ? nullptr : bc.journal_dir.c_str();
    auto created = Umap::Runtime::Create(*cfg);
    if (!created.ok()) {
      return absl::Status(created.status().code(),
                          absl::StrCat("creating a umap runtime (cache ", bc.cache_bytes,
                                       ", block ", bc.block_size, "): ",
                                       created.status().message()));
    }
    rt = std::make_unique<Umap::Runtime>(std::move(*created));
    auto m = Umap::Mapping::Open(rt->get(), fd.get(), file.size(), prot);
    if (!m.ok()) {
      return absl::Status(m.status().code(), absl::StrCat("umap of ", file.path(), ": ",
                                                          m.status().message()));
    }
    um = std::make_unique<Umap::Mapping>(std::move(*m));
    base = um->as<char>();
  } else if (bc.backend == Backend::kMmap) {
    void* p = ::mmap(nullptr, file.size(), prot, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) return Errno(errno, absl::StrCat("mmap ", file.path()));
    base = static_cast<char*>(p);
    int adv = -1;
    switch (bc.advice) {
      case Advice::kDefault: break;
      case Advice::kNormal: adv = MADV_NORMAL; break;
      case Advice::kRandom: adv = MADV_RANDOM; break;
      case Advice::kSequential: adv = MADV_SEQUENTIAL; break;
    }
    if (adv >= 0 && ::madvise(base, file.size(), adv) != 0) {
      int err = errno;
      ::munmap(base, file.size());
      return Errno(err, absl::StrCat("madvise ", AdviceName(bc.advice), " ", file.path()));
    }
  }
  std::snprintf(g_sigbus.what, sizeof(g_sigbus.what), "%s", what.c_str());
  g_sigbus.base.store(reinterpret_cast<uintptr_t>(base));
  g_sigbus.len.store(file.size());

  std::vector<std::unique_ptr<Worker>> workers;
  for (unsigned t = 0; t < w.threads; ++t) workers.push_back(std::make_unique<Worker>());
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < w.threads; ++t) {
    Worker& me = *workers[t];
    if (base != nullptr) {
      threads.emplace_back([&, t] {
        WorkerLoop(MemoryTarget{base, file.size(), bc.backend}, w, items, t, repeat, tag, go,
                   me);
      });
    } else {
      threads.emplace_back([&, t] {
        WorkerLoop(FileTarget{fd.get(), &file.path()}, w, items, t, repeat, tag, go, me);
      });
    }
  }
  umap_runtime* rtp = rt ? rt->get() : nullptr;
  auto watchdog = std::make_unique<Watchdog>(workers, bc.stall_seconds, what, [rtp] {
    if (rtp == nullptr) return std::string();
    umap_stats st{};
    umap_get_stats(rtp, &st);
    return StatsLine(st);
  });

  // Reset the per-run peaks just before the start.
  if (!WriteSmallFile("/proc/self/clear_refs", "5").ok()) {
    // Old kernel or no procfs: peak_rss is then the process's peak so far.
  }
  if (!bc.cgroup_dir.empty()) {
    s = WriteSmallFile(bc.cgroup_dir + "/memory.max_usage_in_bytes", "0");
    if (!s.ok()) return s;
  }
  const FaultCounts f0 = ProcessFaults();
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  go.notify_all();
  for (auto& th : threads) th.join();
  absl::Status sync_status;
  if (writes) {
    watchdog->SetPhase("final sync");
    if (base != nullptr) {
      sync_status = MemoryTarget{base, file.size(), bc.backend}.Sync();
    } else {
      sync_status = FileTarget{fd.get(), &file.path()}.Sync();
    }
  }
  const auto t1 = Clock::now();
  const FaultCounts f1 = ProcessFaults();
  watchdog->SetPhase("after the run");
  r.peak_rss = PeakRss();
  if (!bc.cgroup_dir.empty()) {
    auto peak = ReadNumberFile(bc.cgroup_dir + "/memory.max_usage_in_bytes");
    if (peak.ok()) r.cgroup_peak = *peak;
  }

  r.wall_s = Seconds(t0, t1);
  for (auto& wk : workers) r.ops += wk->done.load();
  r.ops_per_s = r.wall_s > 0 ? static_cast<double>(r.ops) / r.wall_s : 0;
  r.mb_per_s = r.ops_per_s * static_cast<double>(w.op_size) / 1e6;
  r.process_faults = (f1.minor - f0.minor) + (f1.major - f0.major);
  r.major_faults = f1.major - f0.major;
  r.faults = r.process_faults;

  std::vector<std::string> errors;
  for (auto& wk : workers) {
    r.read_checks += wk->read_checks;
    if (!wk->error.ok()) errors.push_back(wk->error.ToString());
    if (wk->bad_reads > 0) {
      errors.push_back(absl::StrCat("WRONG DATA READ: ", wk->bad_reads, " reads; first: ",
                                    wk->first_bad));
    }
  }
  if (!sync_status.ok()) errors.push_back(absl::StrCat("final sync: ", sync_status.ToString()));

  if (rt) {
    umap_stats st = rt->Stats();
    r.faults = st.faults_missing + st.faults_wp;
    r.umap_cache_used = st.cache_bytes_used;
    r.umap_cache_peak = st.cache_bytes_peak;
    r.umap_cache_limit = st.cache_bytes_limit;
    r.umap_blocks_read = st.blocks_read;
    r.umap_blocks_written = st.blocks_written;
    r.umap_evictions = st.evictions;
    r.umap_dirty_evictions = st.dirty_evictions;
    r.umap_io_errors = st.io_errors;
    r.umap_sigbus = st.sigbus_raised;
    r.umap_io_reads = st.io_reads;
    r.umap_io_bytes = st.io_bytes;
    r.umap_io_writes = st.io_writes;
    r.umap_io_write_bytes = st.io_write_bytes;
    r.umap_prefetched = st.prefetched_blocks;
  }
  auto cached = file.CachedBytes();
  if (cached.ok()) r.file_cached_bytes = *cached;

  // Tear down (untimed); an unmap error is a write-back error and fails the run.
  watchdog->SetPhase("unmap");
  if (um) {
    absl::Status us = um->Unmap();
    if (!us.ok()) errors.push_back(absl::StrCat("uunmap: ", us.ToString()));
    um.reset();
    rt.reset();
  } else if (base != nullptr) {
    ::munmap(base, file.size());
  }
  g_sigbus.base.store(0);
  watchdog.reset();
  // Give freed heap (the runtime's, the journal's) back, so the next run's peak RSS starts
  // from what is really in use.
  ::malloc_trim(0);

  if (test_corrupt) {
    // Read run: put the word back. Write run: break it just before the verification.
    absl::Status cs = corrupt(writes ? OriginalWord(bc.TEST_corrupt_word) ^ 1
                                     : OriginalWord(bc.TEST_corrupt_word));
    if (!cs.ok()) return cs;
  }
  if (writes) {
    std::vector<uint64_t> written((items + 63) / 64, 0);
    for (auto& wk : workers) {
      for (size_t i = 0; i < wk->written.size(); ++i) written[i] |= wk->written[i];
    }
    absl::Status v = file.VerifyAndRestore(written, w.op_size, tag);
    if (!v.ok()) errors.push_back(v.ToString());
  }
  r.verified = errors.empty();
  for (size_t i = 0; i < errors.size(); ++i) {
    absl::StrAppend(&r.error, i ? "; " : "", errors[i]);
  }
  return r;
}

std::string ToJson(const RunResult& r, const Workload& w, const BackendConfig& bc,
                   const BenchFile& file, const std::string& label) {
  std::string j = "{";
  auto str = [&](const char* k, const std::string& v) {
    absl::StrAppend(&j, j.size() > 1 ? "," : "", "\"", k, "\":\"", JsonEscape(v), "\"");
  };
  auto num = [&](const char* k, double v) {
    absl::StrAppend(&j, j.size() > 1 ? "," : "", "\"", k, "\":", absl::StrFormat("%.6g", v));
  };
  auto u64 = [&](const char* k, uint64_t v) {
    absl::StrAppend(&j, j.size() > 1 ? "," : "", "\"", k, "\":", v);
  };
  str("label", label);
  str("workload", r.workload);
  str("backend", BackendName(r.backend));
  u64("threads", r.threads);
  u64("repeat", static_cast<uint64_t>(r.repeat));
  str("pattern", PatternName(w.pattern));
  str("access", AccessName(w.access));
  u64("op_size", w.op_size);
  num("locality", w.locality);
  u64("ops_per_thread", w.ops_per_thread);
  u64("sync_every", w.sync_every);
  str("file", file.path());
  u64("file_size", file.size());
  u64("cache_bytes", bc.cache_bytes);
  u64("block_size", bc.block_size);
  u64("handler_threads", bc.handler_threads);
  u64("writeback_threads", bc.writeback_threads);
  str("policy", PolicyName(bc.policy));
  str("journal_mode", JournalModeName(bc.journal_mode));
  str("journal_dir", bc.journal_dir);
  str("madvise", AdviceName(bc.advice));
  u64("ops", r.ops);
  num("wall_s", r.wall_s);
  num("ops_per_s", r.ops_per_s);
  num("mb_per_s", r.mb_per_s);
  u64("faults", r.faults);
  u64("major_faults", r.major_faults);
  u64("process_faults", r.process_faults);
  u64("umap_cache_used", r.umap_cache_used);
  u64("umap_cache_peak", r.umap_cache_peak);
  u64("umap_cache_limit", r.umap_cache_limit);
  u64("umap_blocks_read", r.umap_blocks_read);
  u64("umap_blocks_written", r.umap_blocks_written);
  u64("umap_evictions", r.umap_evictions);
  u64("umap_dirty_evictions", r.umap_dirty_evictions);
  u64("umap_io_errors", r.umap_io_errors);
  u64("umap_sigbus", r.umap_sigbus);
  u64("umap_io_reads", r.umap_io_reads);
  u64("umap_io_bytes", r.umap_io_bytes);
  u64("umap_io_writes", r.umap_io_writes);
  u64("umap_io_write_bytes", r.umap_io_write_bytes);
  u64("umap_prefetched", r.umap_prefetched);
  u64("file_cached_bytes", r.file_cached_bytes);
  u64("peak_rss", r.peak_rss);
  u64("cgroup_peak", r.cgroup_peak);
  u64("read_checks", r.read_checks);
  absl::StrAppend(&j, ",\"verified\":", r.verified ? "true" : "false");
  str("error", r.error);
  j += "}";
  return j;
}

}  // namespace umap_bench
