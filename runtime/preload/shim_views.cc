// Shim: several mappings of one file in one process, and unmapping them (shim.h, "several
// mappings of one file").
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/keep_locks.h"
#include "base/log.h"
#include "base/round.h"
#include "runtime/preload/range_set.h"
#include "runtime/preload/real_calls.h"
#include "runtime/preload/shim.h"
#include "runtime/preload/umap_c_api.h"

namespace umap::preload {
namespace {


int Fail(int err) {
  errno = err;
  return -1;
}

}  // namespace

int Shim::ViewsOf(int index) const {
  int n = 0;
  for (const View& v : views_) n += v.index == index;
  return n;
}

bool Shim::Declined(const FileKey& key) {
  for (int i = 0; i < declined_count_; ++i) {
    if (declined_[i].dev == key.dev && declined_[i].ino == key.ino) return true;
  }
  return false;
}

bool Shim::Decline(const FileKey& key, const char* why, const std::string& path) {
  if (Declined(key)) return true;
  if (declined_count_ == kMaxDeclined) return false;
  declined_[declined_count_++] = key;
  UMAP_LOG(kWarn, "libumap_preload: declining ", path, ": ", why,
           "; the kernel maps it from now on (all its mappings in this process)");
  return true;
}

int Shim::GiveToKernel(const FileKey& key, const char* why, const std::string& named) {
  std::string path = named;
  registry_.ForEachLive([&](int, const ShimMapping& m) {
    if (path.empty() && m.dev == key.dev && m.ino == key.ino) path = FdPath(m.fd);
  });
  std::lock_guard<std::mutex> l(views_mu_);
  if (HandOffFile(key.dev, key.ino) != 0) return -1;
  if (!Decline(key, why, path.empty() ? absl::StrCat("file ", key.dev, ":", key.ino) : path)) {
    UMAP_LOG(kWarn, "libumap_preload: too many declined files; their mappings are the kernel's");
  }
  return 0;
}

int Shim::HandOffFile(uint64_t dev, uint64_t ino) {
  int rc = 0;
  registry_.ForEachLive([&](int index, const ShimMapping& m) {
    if (rc != 0 || m.dev != dev || m.ino != ino || !registry_.Claim(index, m)) return;
    if (c_api::HandOff(reinterpret_cast<void*>(m.base), m.map_len) != 0) {
      const int err = errno;
      registry_.Release(index);
      UMAP_LOG(kError, "libumap_preload: handing ", FdPath(m.fd), " to the kernel failed (",
               std::strerror(err), "); it stays with Umap and nothing is lost");
      rc = Fail(err);
      return;
    }
    // The kernel's mapping holds the file itself; the views keep their addresses.
    for (View& v : views_) {
      if (v.index == index) v.index = -1;
    }
    own_gone_[index] = false;
    CloseKeepingLocks(m.fd);
    registry_.Remove(index);
  });
  return rc;
}

Shim::SameFileAnswer Shim::SameFile(const struct stat& st, int fd, off_t off, size_t len, int prot,
                                    bool fixed, void** view) {
  const uint64_t dev = static_cast<uint64_t>(st.st_dev), ino = static_cast<uint64_t>(st.st_ino);
  const uint64_t bs = config_.block_size;
  const uint64_t lo = static_cast<uint64_t>(off), hi = lo + len;
  std::lock_guard<std::mutex> l(views_mu_);
  if (Declined({dev, ino})) return SameFileAnswer::kKernel;
  int host = -1;
  ShimMapping hm;
  bool conflict = false;
  registry_.ForEachLive([&](int index, const ShimMapping& m) {
    if (m.dev != dev || m.ino != ino) return;
    const uint64_t m_end = m.map_offset + m.region_len;
    if (RoundDown(lo, bs) >= m_end || RoundUp(hi, bs) <= m.map_offset) return;  // no block shared
    const bool inside = lo >= m.map_offset && hi <= m_end;
    if (inside && !fixed && ((prot & PROT_WRITE) == 0 || m.writable()) && host < 0) {
      host = index;
      hm = m;
    } else {
      conflict = true;
    }
  });
  if (!conflict && host < 0) return SameFileAnswer::kNone;
  if (!conflict) {
    for (View& v : views_) {
      if (v.index >= 0) continue;
      v = {host, hm.base + static_cast<uintptr_t>(lo - hm.map_offset), len};
      *view = reinterpret_cast<void*>(v.user);
      UMAP_LOG(kInfo, "libumap_preload: Umap serves ", FdPath(hm.fd), " [", lo, ", ", hi, ") at 0x",
               absl::Hex(v.user), ", a view of its mapping at 0x", absl::Hex(hm.user));
      return SameFileAnswer::kView;
    }
  }
  // Not one copy with Umap's per-mapping cache: the kernel's for all of them.
  if (HandOffFile(dev, ino) != 0) return SameFileAnswer::kFailed;
  nodes_.NowKernel({dev, ino});
  if (!Decline({dev, ino},
               conflict ? "a second mapping of it overlaps its Umap mapping in another way "
                          "than as a part of it (Umap keeps one cache per mapping)"
                        : "more views of it than the shim tracks",
               FdPath(fd))) {
    UMAP_LOG(kWarn, "libumap_preload: too many declined files; their mappings are the kernel's");
  }
  return SameFileAnswer::kKernel;
}

int Shim::ReleaseRange(uintptr_t addr, size_t len, const char* what) {
  if (registry_.live() == 0 || len == 0) return 0;
  const uintptr_t end = addr + RoundUp(len, page_);
  RangeSet hits(registry_, addr, end);
  if (hits.empty()) return 0;
  if (hits.overflow()) {
    UMAP_LOG(kError, "libumap_preload: ", what, " covers more than ", RangeSet::kMax,
             " Umap mappings; refused");
    return Fail(EINVAL);
  }
  auto touches = [&](uintptr_t u, size_t n) { return addr < u + RoundUp(n, page_) && u < end; };
  auto covers = [&](uintptr_t u, size_t n) { return addr <= u && u + RoundUp(n, page_) <= end; };
  std::lock_guard<std::mutex> l(views_mu_);
  // Check every view before changing any: a refused call changes nothing.
  for (int i = 0; i < hits.size(); ++i) {
    const ShimMapping& m = hits[i].m;
    bool cut =
        !own_gone_[hits[i].index] && touches(m.user, m.user_len) && !covers(m.user, m.user_len);
    for (const View& v : views_) {
      cut = cut || (v.index == hits[i].index && touches(v.user, v.len) && !covers(v.user, v.len));
    }
    if (cut) {
      UMAP_LOG(kError, "libumap_preload: ", what, " of [0x", absl::Hex(addr), ", 0x",
               absl::Hex(end), ") would cut the Umap mapping of ", FdPath(m.fd), " at 0x",
               absl::Hex(m.user), " (", m.user_len,
               " bytes); refused (EINVAL): unmap the whole mapping");
      return Fail(EINVAL);
    }
  }
  for (int i = 0; i < hits.size(); ++i) {
    const int index = hits[i].index;
    const ShimMapping& m = hits[i].m;
    const bool own_goes = !own_gone_[index] && covers(m.user, m.user_len);
    int views_left = 0, views_going = 0;
    for (const View& v : views_) {
      if (v.index != index) continue;
      (covers(v.user, v.len) ? views_going : views_left)++;
    }
    if (!own_goes && views_going == 0) continue;  // only its padding
    if ((own_goes || own_gone_[index]) && views_left == 0) {
      if (!registry_.Claim(index, m)) continue;  // another thread is unmapping it
      if (UnmapEntry(index, m) != 0) return -1;
      own_gone_[index] = false;
      for (View& v : views_) {
        if (v.index == index) v.index = -1;
      }
      continue;
    }
    // Other views still use the mapping: only these views go.
    own_gone_[index] = own_gone_[index] || own_goes;
    for (View& v : views_) {
      if (v.index == index && covers(v.user, v.len)) v.index = -1;
    }
  }
  return 0;
}

}  // namespace umap::preload
