#include "runtime/sizing/cgroup_board.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "runtime/stats/stats_segment.h"

namespace umap::runtime {
namespace {

constexpr char kMagic[8] = {'U', 'M', 'A', 'P', 'B', 'R', 'D', '1'};

// FNV-1a: the same in every process (absl::Hash is seeded per process).
uint64_t StableHash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

uint64_t CgroupBoard::MaxMinShare(absl::Span<const uint64_t> demands, size_t me,
                                  uint64_t room) {
  if (demands.empty()) return 0;
  // Water-filling: in order of demand, each takes min(demand, equal share of what is left).
  std::vector<size_t> order(demands.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return demands[a] != demands[b] ? demands[a] < demands[b] : a < b;
  });
  uint64_t left = room, mine = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const uint64_t equal = left / (order.size() - k);
    const uint64_t got = std::min(demands[order[k]], equal);
    if (order[k] == me) mine = got;
    left -= got;
  }
  // What no demand took is split equally: a demand is the next step, not a cap, so a
  // runtime whose working set is still ahead of it grows at the fault path's pace, and the
  // shares still add up to no more than the room.
  return mine + left / demands.size();
}

absl::StatusOr<int> CgroupBoard::OpenLocked(const std::string& path) {
  // Every member holds a shared lock on the file for as long as it is on the board; the
  // last one to leave takes the exclusive lock and removes the file. A file removed between
  // this open and this lock has no links left: open again (a new file).
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return PosixError(errno, absl::StrCat("opening the cgroup board ", path));
    if (::flock(fd, LOCK_SH) != 0) {
      const int err = errno;
      ::close(fd);
      return PosixError(err, absl::StrCat("locking the cgroup board ", path));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return PosixError(err, absl::StrCat("fstat of the cgroup board ", path));
    }
    if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
      ::close(fd);
      return PosixError(EPERM, absl::StrCat(path, " is not this user's private file"));
    }
    if (st.st_nlink > 0) {
      if (static_cast<size_t>(st.st_size) < sizeof(Layout) &&
          ::ftruncate(fd, static_cast<off_t>(sizeof(Layout))) != 0) {
        const int err = errno;
        ::close(fd);
        return PosixError(err, absl::StrCat("sizing the cgroup board ", path));
      }
      return fd;
    }
    ::close(fd);
  }
  return PosixError(EAGAIN, absl::StrCat("the cgroup board ", path,
                                         " was removed under every attempt to join it"));
}

void CgroupBoard::RemoveAbandoned(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const std::string prefix = absl::StrCat("umap-board.", ::geteuid(), ".");
  while (dirent* e = ::readdir(d)) {
    if (std::string_view(e->d_name).substr(0, prefix.size()) != prefix) continue;
    const std::string path = absl::StrCat(dir, "/", e->d_name);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st;
    // Only this user's regular files; the exclusive lock only while no member holds its
    // shared one (a joiner that opened it meanwhile finds it unlinked and opens again).
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
        ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      (void)::unlink(path.c_str());
    }
    ::close(fd);
  }
  ::closedir(d);
}

absl::StatusOr<std::unique_ptr<CgroupBoard>> CgroupBoard::Join(const std::string& cgroup_id,
                                                               const std::string& dir) {
  // Boards whose last member was killed (it never left): nobody holds their lock.
  RemoveAbandoned(dir);
  const std::string path = absl::StrCat(dir, "/umap-board.", ::geteuid(), ".",
                                        absl::Hex(StableHash(cgroup_id), absl::kZeroPad16));
  ASSIGN_OR_RETURN(const int fd, OpenLocked(path));
  void* p = ::mmap(nullptr, sizeof(Layout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return PosixError(err, absl::StrCat("mapping the cgroup board ", path));
  }
  auto* l = static_cast<Layout*>(p);
  // A new file is all zeros, and every field's zero is its initial state; the magic only
  // tells a foreign file apart.
  if (l->magic[0] == 0) std::memcpy(l->magic, kMagic, sizeof kMagic);
  if (std::memcmp(l->magic, kMagic, sizeof kMagic) != 0) {
    ::munmap(p, sizeof(Layout));
    ::close(fd);
    return PosixError(EINVAL, absl::StrCat(path, " is not a umap cgroup board"));
  }
  static std::atomic<uint32_t> seq{0};
  const uint64_t owner = uint64_t{static_cast<uint32_t>(::getpid())} << 32 |
                         (seq.fetch_add(1, std::memory_order_relaxed) + 1);
  const uint64_t now = StatsSegment::MonotonicMicros();
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = l->slot[i];
    uint64_t cur = s.owner.load(std::memory_order_acquire);
    const bool stale = cur != 0 && now - s.heartbeat_us.load(std::memory_order_relaxed) > kStaleUs;
    if (cur != 0 && !stale) continue;
    if (!s.owner.compare_exchange_strong(cur, owner, std::memory_order_acq_rel)) continue;
    s.heartbeat_us.store(now, std::memory_order_relaxed);
    s.held.store(0, std::memory_order_relaxed);
    s.demand.store(0, std::memory_order_relaxed);
    return std::unique_ptr<CgroupBoard>(new CgroupBoard(path, fd, l, i, owner));
  }
  ::munmap(p, sizeof(Layout));
  ::close(fd);
  return PosixError(EBUSY, absl::StrCat("all ", kSlots, " slots of ", path, " are taken"));
}

CgroupBoard::~CgroupBoard() {
  uint64_t me = owner_;
  layout_->slot[slot_].owner.compare_exchange_strong(me, 0, std::memory_order_acq_rel);
  ::munmap(layout_, sizeof(Layout));
  // The last member out removes the file (no other holds its shared lock: the members that
  // were killed released theirs with their descriptors), so boards of finished jobs do not
  // pile up in /dev/shm. A removal that fails leaves a file the next job reuses.
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) (void)::unlink(path_.c_str());
  ::close(fd_);
}

CgroupBoard::View CgroupBoard::Publish(uint64_t held, uint64_t demand, uint64_t now_us,
                                       absl::FunctionRef<uint64_t(uint64_t)> room) {
  Slot& mine = layout_->slot[slot_];
  mine.held.store(held, std::memory_order_relaxed);
  mine.demand.store(demand, std::memory_order_relaxed);
  mine.heartbeat_us.store(now_us, std::memory_order_release);
  if (mine.owner.load(std::memory_order_acquire) != owner_) {
    // Taken over as stale (this process stalled for seconds): claim it back.
    mine.owner.store(owner_, std::memory_order_release);
  }
  uint64_t demands[kSlots];
  size_t n = 0, me = 0;
  View v;
  for (int i = 0; i < kSlots; ++i) {
    const Slot& s = layout_->slot[i];
    if (s.owner.load(std::memory_order_acquire) == 0) continue;
    if (i != slot_ && now_us - s.heartbeat_us.load(std::memory_order_acquire) > kStaleUs) {
      continue;
    }
    if (i == slot_) me = n;
    v.held_total += s.held.load(std::memory_order_relaxed);
    demands[n++] = s.demand.load(std::memory_order_relaxed);
  }
  v.runtimes = static_cast<uint32_t>(n);
  v.share = MaxMinShare(absl::MakeConstSpan(demands, n), me, room(v.held_total));
  return v;
}

}  // namespace umap::runtime
