#include "bench/memory_cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace umap_bench {
namespace {

constexpr char kV2Root[] = "/sys/fs/cgroup";
constexpr char kV1Root[] = "/sys/fs/cgroup/memory";

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool V2HasMemory(const std::string& dir) {
  absl::StatusOr<std::string> c = ReadSmallFile(dir + "/cgroup.controllers");
  if (!c.ok()) return false;
  for (absl::string_view w : absl::StrSplit(*c, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    if (w == "memory") return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::string> MemoryCgroup::DefaultParent() {
  if (V2HasMemory(kV2Root)) return std::string(kV2Root);
  if (Exists(absl::StrCat(kV1Root, "/memory.limit_in_bytes"))) return std::string(kV1Root);
  return absl::FailedPreconditionError(absl::StrCat("no memory cgroup controller: neither ",
                                                    kV2Root,
                                                    "/cgroup.controllers lists memory "
                                                    "(cgroup v2) nor ",
                                                    kV1Root, " exists (cgroup v1)"));
}

absl::StatusOr<MemoryCgroup> MemoryCgroup::Create(const std::string& parent,
                                                  const std::string& name, uint64_t limit_bytes) {
  const bool v1 =
      Exists(parent + "/memory.limit_in_bytes") && !Exists(parent + "/cgroup.controllers");
  if (!v1 && !V2HasMemory(parent)) {
    return absl::FailedPreconditionError(
        absl::StrCat(parent,
                     " is not a memory cgroup (no memory.limit_in_bytes, and cgroup.controllers "
                     "does not list memory)"));
  }
  const Version version = v1 ? Version::kV1 : Version::kV2;
  if (version == Version::kV2) {
    // Children of `parent` get the memory controller only if its subtree_control has it.
    absl::Status s = WriteSmallFile(parent + "/cgroup.subtree_control", "+memory");
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(s.message(),
                                                 " (enabling the memory "
                                                 "controller for children of ",
                                                 parent, ")"));
    }
  }
  const std::string dir = absl::StrCat(parent, "/", name);
  if (::mkdir(dir.c_str(), 0755) != 0) {
    return Errno(errno, absl::StrCat("mkdir ", dir,
                                     " (a memory cgroup: needs root or a "
                                     "delegated --cgroup-parent)"));
  }
  MemoryCgroup cg(dir, version, /*owned=*/true);
  const std::string limit = absl::StrCat(limit_bytes);
  absl::Status s = version == Version::kV1 ? WriteSmallFile(dir + "/memory.limit_in_bytes", limit)
                                           : WriteSmallFile(dir + "/memory.max", limit);
  if (s.ok() && version == Version::kV2 && Exists(dir + "/memory.swap.max")) {
    // v1's limit_in_bytes does not let the group swap either: same budget in both.
    s = WriteSmallFile(dir + "/memory.swap.max", "0");
  }
  if (!s.ok()) return s;  // cg's destructor removes the directory
  return cg;
}

absl::StatusOr<MemoryCgroup> MemoryCgroup::Attach(const std::string& dir) {
  if (Exists(dir + "/memory.max_usage_in_bytes")) return MemoryCgroup(dir, Version::kV1, false);
  if (Exists(dir + "/memory.max")) return MemoryCgroup(dir, Version::kV2, false);
  return absl::NotFoundError(absl::StrCat(dir, " is not a memory cgroup"));
}

MemoryCgroup::MemoryCgroup(MemoryCgroup&& o) noexcept
    : dir_(std::move(o.dir_)),
      version_(o.version_),
      owned_(o.owned_),
      peak_fd_(std::move(o.peak_fd_)) {
  o.owned_ = false;
}

MemoryCgroup::~MemoryCgroup() {
  if (!owned_) return;
  absl::Status s = Remove();
  if (!s.ok()) std::fprintf(stderr, "umap-bench: %s\n", s.ToString().c_str());
}

std::string MemoryCgroup::File(const char* v1_name, const char* v2_name) const {
  return absl::StrCat(dir_, "/", version_ == Version::kV1 ? v1_name : v2_name);
}

absl::Status MemoryCgroup::Join() const {
  return WriteSmallFile(dir_ + "/cgroup.procs", absl::StrCat(::getpid()));
}

absl::Status MemoryCgroup::ResetPeak() {
  if (version_ == Version::kV1) return WriteSmallFile(dir_ + "/memory.max_usage_in_bytes", "0");
  // v2: a write to memory.peak starts a window for that open file (Linux >= 6.12); older
  // kernels refuse it, and the peak then counts from the cgroup's creation.
  const std::string path = dir_ + "/memory.peak";
  absl::StatusOr<Fd> fd = OpenFile(path, O_RDWR);
  if (!fd.ok()) {
    // No memory.peak (Linux < 5.19) or not writable here: Peak() says what it can.
    peak_fd_ = Fd();
    return absl::OkStatus();
  }
  peak_fd_ = ::write(fd->get(), "reset\n", 6) == 6 ? std::move(*fd) : Fd();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> MemoryCgroup::Peak() const {
  if (version_ == Version::kV1) return ReadNumberFile(dir_ + "/memory.max_usage_in_bytes");
  if (peak_fd_.get() < 0) return ReadNumberFile(dir_ + "/memory.peak");
  char buf[32] = {};
  const ssize_t n = ::pread(peak_fd_.get(), buf, sizeof(buf) - 1, 0);
  uint64_t v = 0;
  if (n <= 0 || !absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)), &v)) {
    return Errno(n < 0 ? errno : EIO, absl::StrCat("read ", dir_, "/memory.peak"));
  }
  return v;
}

absl::StatusOr<uint64_t> MemoryCgroup::KeyedValue(const std::string& file,
                                                  const std::string& key) const {
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile(file));
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, key) && absl::ConsumePrefix(&line, " ")) {
      uint64_t v = 0;
      if (absl::SimpleAtoi(line, &v)) return v;
    }
  }
  return absl::NotFoundError(absl::StrCat("no '", key, "' line in ", file));
}

absl::StatusOr<uint64_t> MemoryCgroup::LimitHits() const {
  if (version_ == Version::kV1) return ReadNumberFile(dir_ + "/memory.failcnt");
  return KeyedValue(dir_ + "/memory.events", "max");
}

absl::StatusOr<uint64_t> MemoryCgroup::OomKills() const {
  return KeyedValue(File("memory.oom_control", "memory.events"), "oom_kill");
}

absl::Status MemoryCgroup::Remove() {
  if (!owned_) return absl::OkStatus();
  owned_ = false;
  peak_fd_ = Fd();
  if (::rmdir(dir_.c_str()) != 0) {
    return Errno(errno, absl::StrCat("cannot remove cgroup ", dir_));
  }
  return absl::OkStatus();
}

}  // namespace umap_bench
