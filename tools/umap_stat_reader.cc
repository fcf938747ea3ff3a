#include "tools/umap_stat_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/posix_error.h"

namespace umap::tools {
namespace {

using runtime::StatsLayout;
using runtime::StatsSegment;

bool ReadAll(int fd, void* buf, size_t n, off_t off) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    off += r;
  }
  return true;
}

uint64_t SeqAt(int fd) {
  uint64_t v = 1;
  if (!ReadAll(fd, &v, sizeof(v), offsetof(StatsLayout, seq))) return 1;
  return v;
}

}  // namespace

absl::StatusOr<StatsSnapshot> ReadSegment(const std::string& path, pid_t pid) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == EACCES || err == EPERM) {
      return absl::PermissionDeniedError(
          absl::StrCat(path,
                       " belongs to another user (segments are readable by their "
                       "owner and root only)"));
    }
    return PosixError(err, absl::StrCat("opening ", path));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st, proc;
  if (::fstat(fd, &st) != 0) return PosixError(errno, absl::StrCat("fstat ", path));
  if (!S_ISREG(st.st_mode) || (st.st_mode & 07777) != 0600) {
    return absl::FailedPreconditionError(absl::StrCat(path, " has mode ",
                                                      absl::Hex(st.st_mode & 07777),
                                                      ", not a 0600 regular file: not "
                                                      "written by a Umap runtime; ignored"));
  }
  if (::stat(absl::StrCat("/proc/", pid).c_str(), &proc) != 0) {
    return absl::NotFoundError(absl::StrCat("no process ", pid));
  }
  if (st.st_uid != proc.st_uid) {
    return absl::FailedPreconditionError(absl::StrCat(path, " belongs to uid ", st.st_uid,
                                                      " but process ", pid, " runs as uid ",
                                                      proc.st_uid, "; ignored"));
  }
  if (static_cast<size_t>(st.st_size) < sizeof(StatsLayout)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " holds ", st.st_size, " bytes, this umap-stat reads layouts of ",
                     sizeof(StatsLayout), " (a different Umap version?)"));
  }
  StatsSnapshot snap;
  snap.path = path;
  snap.layout = std::make_unique<StatsLayout>();
  StatsLayout* l = snap.layout.get();
  // Seqlock reader: the sequence number must be even and unchanged across the copy.
  bool consistent = false;
  for (int attempt = 0; attempt < 200 && !consistent; ++attempt) {
    const uint64_t before = SeqAt(fd);
    if ((before & 1) == 0 && ReadAll(fd, l, sizeof(*l), 0)) {
      consistent = l->seq == before && SeqAt(fd) == before;
    }
    if (!consistent) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!consistent) {
    return absl::UnavailableError(absl::StrCat(path, " kept changing while being read"));
  }
  snap.read_mono_us = StatsSegment::MonotonicMicros();
  if (std::memcmp(l->magic, runtime::kStatsMagic, sizeof(l->magic)) != 0 ||
      l->version != runtime::kStatsVersion || l->layout_bytes != sizeof(StatsLayout)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": not a stats segment of layout version ", runtime::kStatsVersion, " (version ",
        l->version, ", ", l->layout_bytes, " bytes): a different Umap version wrote it"));
  }
  if (l->pid != pid) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " names process ", l->pid, ", not ", pid, "; ignored"));
  }
  if (l->process_start_ticks != StatsSegment::ProcessStartTicks(pid)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " was left by an earlier process with pid ", pid, " (stale); ignored"));
  }
  return snap;
}

absl::StatusOr<std::vector<StatsSnapshot>> ReadProcess(pid_t pid, const std::string& dir) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) {
    return absl::NotFoundError(absl::StrCat("no process ", pid));
  }
  const std::string prefix = StatsSegment::NamePrefix(pid);
  std::vector<std::pair<uint32_t, std::string>> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      uint32_t n = 0;
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0 &&
          absl::SimpleAtoi(e->d_name + prefix.size(), &n)) {
        names.emplace_back(n, absl::StrCat(dir, "/", e->d_name));
      }
    }
    ::closedir(d);
  } else {
    return PosixError(errno, absl::StrCat("reading ", dir));
  }
  if (names.empty()) {
    return absl::NotFoundError(
        absl::StrCat("process ", pid, " has no Umap stats segment in ", dir,
                     ": it has no Umap runtime (it mapped nothing with Umap yet), or runs with "
                     "UMAP_STATS_PERIOD_MS=0"));
  }
  std::sort(names.begin(), names.end());
  std::vector<StatsSnapshot> out;
  for (const auto& [n, path] : names) {
    auto s = ReadSegment(path, pid);
    if (!s.ok()) return s.status();
    out.push_back(*std::move(s));
  }
  return out;
}

std::vector<pid_t> ListProcesses(const std::string& dir) {
  std::vector<pid_t> pids;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return pids;
  constexpr char kName[] = "umap-stat.";
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, kName, sizeof(kName) - 1) != 0) continue;
    const char* p = e->d_name + sizeof(kName) - 1;
    const char* dot = std::strchr(p, '.');
    int pid = 0;
    if (dot == nullptr || !absl::SimpleAtoi(absl::string_view(p, dot - p), &pid)) continue;
    if (pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM)) pids.push_back(pid);
  }
  ::closedir(d);
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

}  // namespace umap::tools
