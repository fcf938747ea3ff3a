#include "runtime/stats/stats_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/posix_error.h"

namespace umap::runtime {
namespace {

constexpr char kName[] = "umap-stat.";

// Parses "umap-stat.<pid>.<n>"; false for any other name.
bool ParseName(const char* name, pid_t* pid) {
  if (std::strncmp(name, kName, sizeof(kName) - 1) != 0) return false;
  const char* p = name + sizeof(kName) - 1;
  const char* dot = std::strchr(p, '.');
  if (dot == nullptr) return false;
  int v = 0;
  uint32_t n = 0;
  if (!absl::SimpleAtoi(absl::string_view(p, dot - p), &v) || !absl::SimpleAtoi(dot + 1, &n)) {
    return false;
  }
  *pid = v;
  return v > 0;
}

bool ProcessGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// The start time recorded in an existing segment file (0 if unreadable).
uint64_t RecordedStart(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return 0;
  uint64_t v = 0;
  const ssize_t n = ::pread(fd, &v, sizeof(v), offsetof(StatsLayout, process_start_ticks));
  ::close(fd);
  return n == sizeof(v) ? v : 0;
}

}  // namespace

std::string StatsSegment::NamePrefix(pid_t pid) { return absl::StrCat(kName, pid, "."); }

uint64_t StatsSegment::ProcessStartTicks(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so count fields
  // after the last ')'. starttime is field 22, the 20th after comm.
  const size_t close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(s.substr(close + 1));
  std::string field;
  for (int i = 0; i < 20 && rest >> field; ++i) {
  }
  uint64_t v = 0;
  return absl::SimpleAtoi(field, &v) ? v : 0;
}

uint64_t StatsSegment::MonotonicMicros() { return umap::MonotonicMicros(); }

uint64_t StatsSegment::UnixMicros() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

void StatsSegment::CopyField(char* field, size_t size, const std::string& s) {
  if (s.size() < size) {
    std::memcpy(field, s.data(), s.size());
    std::memset(field + s.size(), 0, size - s.size());
    return;
  }
  // Too long: "..." and the tail, which names the file.
  const size_t keep = size - 4;
  std::memcpy(field, "...", 3);
  std::memcpy(field + 3, s.data() + s.size() - keep, keep);
  field[size - 1] = '\0';
}

void StatsSegment::RemoveStale(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const uid_t me = ::getuid();
  while (dirent* e = ::readdir(d)) {
    pid_t pid = 0;
    if (!ParseName(e->d_name, &pid)) continue;
    const std::string path = absl::StrCat(dir, "/", e->d_name);
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || st.st_uid != me || !S_ISREG(st.st_mode)) continue;
    // A segment of a process that is gone, or of an earlier process that had this pid.
    if (ProcessGone(pid) || RecordedStart(path) != ProcessStartTicks(pid)) {
      ::unlink(path.c_str());  // best effort: umap-stat ignores stale segments anyway
    }
  }
  ::closedir(d);
}

absl::StatusOr<std::unique_ptr<StatsSegment>> StatsSegment::Create(const std::string& dir) {
  RemoveStale(dir);
  const pid_t pid = ::getpid();
  const uint64_t start = ProcessStartTicks(pid);
  for (uint32_t n = 0; n < 1024; ++n) {
    const std::string path = absl::StrCat(dir, "/", NamePrefix(pid), n);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;  // another runtime of this process
      return PosixError(errno, absl::StrCat("creating the stats segment ", path));
    }
    // Exactly 0600 whatever the umask; and room for the layout.
    if (::fchmod(fd, 0600) != 0 || ::ftruncate(fd, sizeof(StatsLayout)) != 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(path.c_str());
      return PosixError(err, absl::StrCat("sizing the stats segment ", path));
    }
    void* p = ::mmap(nullptr, sizeof(StatsLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      ::unlink(path.c_str());
      return PosixError(err, absl::StrCat("mapping the stats segment ", path));
    }
    auto* l = static_cast<StatsLayout*>(p);  // zero-filled by ftruncate
    std::memcpy(l->magic, kStatsMagic, sizeof(l->magic));
    l->version = kStatsVersion;
    l->layout_bytes = sizeof(StatsLayout);
    l->pid = pid;
    l->runtime_index = n;
    l->process_start_ticks = start;
    l->created_unix_us = UnixMicros();
    l->state = kStatsRunning;
    return std::unique_ptr<StatsSegment>(new StatsSegment(path, l));
  }
  return PosixError(EEXIST, absl::StrCat("no free stats segment name in ", dir));
}

StatsSegment::~StatsSegment() {
  StatsLayout* l = Begin();
  l->state = kStatsClosed;
  End();
  ::munmap(layout_, sizeof(StatsLayout));
  ::unlink(path_.c_str());
}

StatsLayout* StatsSegment::Begin() {
  std::atomic_ref<uint64_t> seq(layout_->seq);
  seq.store(seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // The odd number is visible before any field changes.
  std::atomic_thread_fence(std::memory_order_release);
  return layout_;
}

void StatsSegment::End() {
  std::atomic_ref<uint64_t> seq(layout_->seq);
  seq.store(seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

}  // namespace umap::runtime
