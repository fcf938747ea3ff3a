#include "runtime/sizing/system_memory_probe.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/posix_error.h"

namespace umap::runtime {
namespace {

constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();
// 150 ms of stall in a 2 s window: the shortest window every process may use.
constexpr char kPsiTrigger[] = "some 150000 2000000";

// The whole of a small file ("" when it cannot be read).
std::string ReadSmall(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// A number file ("max" and unreadable files: kNoLimit).
uint64_t ReadNumber(const std::string& path) {
  uint64_t v;
  const std::string s = ReadSmall(path);
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(s), &v) ? v : kNoLimit;
}

// The value of `key` in a "key value" file (memory.stat), or `fallback`.
uint64_t StatValue(const std::string& text, absl::string_view key, uint64_t fallback) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t v;
    if (f.size() == 2 && f[0] == key && absl::SimpleAtoi(f[1], &v)) return v;
  }
  return fallback;
}

// A /proc/meminfo field in bytes (0 when missing).
uint64_t MeminfoBytes(const std::string& text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    uint64_t kb;
    return absl::SimpleAtoi(line, &kb) ? kb * 1024 : 0;
  }
  return 0;
}

bool HasToken(absl::string_view list, absl::string_view token) {
  for (absl::string_view t : absl::StrSplit(list, ',')) {
    if (t == token) return true;
  }
  return false;
}

// The directory of cgroup `path` in a hierarchy mounted at `mount` whose root is `root`.
std::string Join(const std::string& mount, absl::string_view mount_root, absl::string_view path) {
  // A bind mount of a sub-tree: the path continues below its root.
  if (mount_root != "/") absl::ConsumePrefix(&path, mount_root);
  std::string dir = mount;
  if (!path.empty() && path != "/") {
    if (path.front() != '/') dir += '/';
    dir.append(path.data(), path.size());
  }
  return dir;
}

}  // namespace

std::unique_ptr<SystemMemoryProbe> SystemMemoryProbe::Create(const std::string& root,
                                                             bool pressure) {
  std::unique_ptr<SystemMemoryProbe> p(new SystemMemoryProbe());
  p->root_ = root;
  p->pressure_ = pressure;
  p->Discover();
  if (pressure) p->SetUpPressure();
  return p;
}

SystemMemoryProbe::~SystemMemoryProbe() { ClosePressure(); }

void SystemMemoryProbe::ClosePressure() {
  if (pressure_fd_ >= 0) ::close(pressure_fd_);
  if (level_fd_ >= 0) ::close(level_fd_);
  pressure_fd_ = -1;
  level_fd_ = -1;
  pressure_is_eventfd_ = false;
  machine_wide_ = false;
  pressure_source_ = "none";
}

void SystemMemoryProbe::Disarm() { ClosePressure(); }

void SystemMemoryProbe::Rearm() {
  ClosePressure();
  kind_ = Cgroup::kNone;
  dir_.clear();
  mount_.clear();
  Discover();
  if (pressure_) SetUpPressure();
}

void SystemMemoryProbe::Discover() {
  std::string v1_path, v2_path;
  bool have_v1 = false, have_v2 = false;
  for (absl::string_view line : absl::StrSplit(ReadSmall(root_ + "/proc/self/cgroup"), '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (f[0] == "0" && f[1].empty()) {
      v2_path = std::string(f[2]);
      have_v2 = true;
    } else if (HasToken(f[1], "memory")) {
      v1_path = std::string(f[2]);
      have_v1 = true;
    }
  }
  // mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
  for (absl::string_view line :
       absl::StrSplit(ReadSmall(root_ + "/proc/self/mountinfo"), '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 3 >= f.size()) continue;
    const absl::string_view fstype = f[dash + 1], super = f[dash + 3];
    const std::string mount = root_ + std::string(f[4]);
    if (have_v1 && fstype == "cgroup" && HasToken(super, "memory")) {
      kind_ = Cgroup::kV1;
      mount_ = mount;
      dir_ = Join(mount, f[3], v1_path);
      break;
    }
    if (have_v2 && !have_v1 && fstype == "cgroup2" &&
        HasToken(absl::StrReplaceAll(ReadSmall(mount + "/cgroup.controllers"), {{" ", ","}}),
                 "memory")) {
      kind_ = Cgroup::kV2;
      mount_ = mount;
      dir_ = Join(mount, f[3], v2_path);
      break;
    }
  }
}

uint64_t SystemMemoryProbe::CgroupLimit() const {
  if (kind_ == Cgroup::kV1) {
    const uint64_t h = StatValue(ReadSmall(dir_ + "/memory.stat"), "hierarchical_memory_limit",
                                 kNoLimit);
    return h != kNoLimit ? h : ReadNumber(dir_ + "/memory.limit_in_bytes");
  }
  if (kind_ == Cgroup::kV2) {
    uint64_t limit = kNoLimit;
    for (std::string d = dir_; d.size() >= mount_.size();) {
      limit = std::min({limit, ReadNumber(d + "/memory.max"), ReadNumber(d + "/memory.high")});
      if (d.size() == mount_.size()) break;
      d.resize(d.rfind('/'));
    }
    return limit;
  }
  return kNoLimit;
}

uint64_t SystemMemoryProbe::CgroupUsed() const {
  const std::string stat = ReadSmall(dir_ + "/memory.stat");
  uint64_t charged, inactive;
  if (kind_ == Cgroup::kV1) {
    charged = ReadNumber(dir_ + "/memory.usage_in_bytes");
    inactive = StatValue(stat, "total_inactive_file", 0);
  } else {
    charged = ReadNumber(dir_ + "/memory.current");
    inactive = StatValue(stat, "inactive_file", 0);
  }
  if (charged == kNoLimit) return 0;
  return charged > inactive ? charged - inactive : 0;
}

absl::StatusOr<MemorySample> SystemMemoryProbe::Sample() {
  const std::string meminfo = ReadSmall(root_ + "/proc/meminfo");
  const uint64_t total = MeminfoBytes(meminfo, "MemTotal");
  if (total == 0) {
    return PosixError(EIO, absl::StrCat("cannot read MemTotal from ", root_, "/proc/meminfo"));
  }
  MemorySample s;
  s.available = MeminfoBytes(meminfo, "MemAvailable");
  const uint64_t limit = CgroupLimit();
  s.cgroup_limited = kind_ != Cgroup::kNone && limit < total;
  limited_.store(s.cgroup_limited, std::memory_order_relaxed);
  if (s.cgroup_limited) {
    s.limit = limit;
    s.used = CgroupUsed();
  } else {
    s.limit = total;
    s.used = total > s.available ? total - s.available : 0;
  }
  // statm: size resident shared text lib data dt, in pages.
  std::vector<std::string> statm =
      absl::StrSplit(ReadSmall(root_ + "/proc/self/statm"), ' ', absl::SkipEmpty());
  uint64_t pages;
  if (statm.size() >= 2 && absl::SimpleAtoi(statm[1], &pages)) {
    s.process_rss = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  }
  return s;
}

bool SystemMemoryProbe::TryPsi(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  // The terminating NUL is part of the trigger (the kernel's documented example).
  if (::write(fd, kPsiTrigger, sizeof kPsiTrigger) < 0) {
    ::close(fd);
    return false;
  }
  pressure_fd_ = fd;
  pressure_source_ = absl::StrCat("PSI trigger '", kPsiTrigger, "' on ", path);
  return true;
}

bool SystemMemoryProbe::TryPressureLevel() {
  const int level = ::open((dir_ + "/memory.pressure_level").c_str(), O_RDONLY | O_CLOEXEC);
  if (level < 0) return false;
  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int ctl = ::open((dir_ + "/cgroup.event_control").c_str(), O_WRONLY | O_CLOEXEC);
  const std::string line = absl::StrCat(efd, " ", level, " medium");
  if (efd < 0 || ctl < 0 || ::write(ctl, line.data(), line.size()) < 0) {
    if (efd >= 0) ::close(efd);
    if (ctl >= 0) ::close(ctl);
    ::close(level);
    return false;
  }
  ::close(ctl);
  level_fd_ = level;
  pressure_fd_ = efd;
  pressure_is_eventfd_ = true;
  pressure_source_ = absl::StrCat("memory.pressure_level 'medium' of ", dir_);
  return true;
}

void SystemMemoryProbe::SetUpPressure() {
  if (kind_ == Cgroup::kV2 && TryPsi(dir_ + "/memory.pressure")) return;
  if (kind_ == Cgroup::kV1 && TryPressureLevel()) return;
  machine_wide_ = TryPsi(root_ + "/proc/pressure/memory");
}

bool SystemMemoryProbe::TakePressure() {
  if (pressure_fd_ < 0) return false;
  if (!pressure_is_eventfd_) return true;  // PSI: POLLPRI is the event itself
  uint64_t n = 0;
  return ::read(pressure_fd_, &n, sizeof n) == sizeof n && n > 0;
}

std::string SystemMemoryProbe::Describe() const {
  const char* kind = kind_ == Cgroup::kV1 ? "cgroup v1 " : kind_ == Cgroup::kV2 ? "cgroup v2 " : "";
  return absl::StrCat(kind_ == Cgroup::kNone ? "no memory cgroup" : kind, dir_,
                      limited_.load(std::memory_order_relaxed) ? "" : " (no limit: MemAvailable)",
                      "; pressure: ",
                      pressure_source_);
}

}  // namespace umap::runtime
