// Shim: the calls on existing address ranges (munmap, msync, mremap, madvise, mprotect).
// Each splits its range into the Umap mappings it touches and the gaps between them; the
// gaps go to libc, so a call that covers both behaves as the kernel would for the rest.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/round.h"
#include "runtime/preload/range_set.h"
#include "runtime/preload/real_calls.h"
#include "runtime/preload/shim.h"
#include "runtime/preload/umap_c_api.h"

namespace umap::preload {

using c_api::umap_ex;
using c_api::umsync;
using c_api::uunmap;
namespace {

int Fail(int err) {
  errno = err;
  return -1;
}

void* FailPtr(int err) {
  errno = err;
  return MAP_FAILED;
}

// Advice about residency: Umap's cache decides what is resident, so these change nothing
// (dropping pages behind the runtime's back would lose data and confuse its tables).
bool IsResidencyAdvice(int advice) {
  switch (advice) {
    case MADV_NORMAL:
    case MADV_RANDOM:
    case MADV_SEQUENTIAL:
    case MADV_WILLNEED:
    case MADV_DONTNEED:
    case MADV_COLD:
    case MADV_PAGEOUT:
    case MADV_HUGEPAGE:
    case MADV_NOHUGEPAGE:
    case MADV_DONTDUMP:
    case MADV_DODUMP:
    case MADV_DONTFORK:
      return true;
    default:
      return false;
  }
}

}  // namespace

int Shim::Munmap(void* addr, size_t len) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (registry_.live() == 0 || len == 0 || a % page_ != 0) return RealMunmap(addr, len);
  RangeSet hits(registry_, a, a + RoundUp(len, page_));
  if (hits.empty()) return RealMunmap(addr, len);
  if (ReleaseRange(a, len, "munmap") != 0) return -1;
  // The rest of the range is libc's. The released regions are not unmapped again: another
  // thread may already have mapped something new there.
  return hits.ForEachGap([](uintptr_t g, size_t n) {
    return RealMunmap(reinterpret_cast<void*>(g), n) == 0 ? 0 : -1;
  });
}

int Shim::Msync(void* addr, size_t len, int flags) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (registry_.live() == 0) return RealMsync(addr, len, flags);
  RangeSet hits(registry_, a, a + RoundUp(len, page_));
  if (hits.empty()) return RealMsync(addr, len, flags);
  if (a % page_ != 0 || (flags & ~(MS_SYNC | MS_ASYNC | MS_INVALIDATE)) != 0 ||
      ((flags & MS_SYNC) && (flags & MS_ASYNC)) || hits.overflow()) {
    return Fail(EINVAL);  // what the kernel says for the first three
  }
  if (flags & MS_SYNC) {
    for (int i = 0; i < hits.size(); ++i) {
      const ShimMapping& m = hits[i].m;
      const uintptr_t lo = std::max(a, m.base);
      const uintptr_t hi = std::min(a + len, m.base + m.map_len);
      if (lo >= hi) continue;
      if (umsync(reinterpret_cast<void*>(lo), hi - lo, MS_SYNC) != 0) return -1;
    }
  }
  return hits.ForEachGap([flags](uintptr_t g, size_t n) {
    return RealMsync(reinterpret_cast<void*>(g), n, flags) == 0 ? 0 : -1;
  });
}

void* Shim::Mremap(void* old_addr, size_t old_len, size_t new_len, int flags, void* new_addr) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(old_addr);
  if (registry_.live() == 0) return RealMremap(old_addr, old_len, new_len, flags, new_addr);
  RangeSet hits(registry_, a, a + RoundUp(std::max<size_t>(old_len, 1), page_));
  if (hits.empty()) {
    if ((flags & MREMAP_FIXED) != 0 &&
        ReleaseRange(reinterpret_cast<uintptr_t>(new_addr), new_len, "mremap(MREMAP_FIXED)")) {
      return MAP_FAILED;
    }
    return RealMremap(old_addr, old_len, new_len, flags, new_addr);
  }
  const ShimMapping m = hits[0].m;
  if (hits.size() != 1 || m.user != a || RoundUp(old_len, page_) != RoundUp(m.user_len, page_)) {
    UMAP_LOG(kError, "libumap_preload: mremap of part of a Umap mapping (at 0x", absl::Hex(a), ", ",
             old_len, " bytes) is refused (EINVAL)");
    return FailPtr(EINVAL);
  }
  if ((flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)) == 0 &&
      RoundUp(new_len, page_) == RoundUp(m.user_len, page_)) {
    return old_addr;  // the same pages: nothing to do
  }
  if ((flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)) != 0) {
    UMAP_LOG(kError,
             "libumap_preload: mremap with MREMAP_FIXED or MREMAP_DONTUNMAP of a Umap "
             "mapping is refused (EINVAL)");
    return FailPtr(EINVAL);
  }
  {
    std::lock_guard<std::mutex> l(views_mu_);
    if (own_gone_[hits[0].index] || ViewsOf(hits[0].index) > 0) {
      UMAP_LOG(kError,
               "libumap_preload: mremap of a Umap mapping that other mappings of the "
               "same file share (views of one cache) is refused (EINVAL)");
      return FailPtr(EINVAL);
    }
  }
  if ((flags & MREMAP_MAYMOVE) == 0) {
    UMAP_LOG(kWarn,
             "libumap_preload: a Umap mapping cannot be resized in place (ENOMEM); "
             "mremap with MREMAP_MAYMOVE moves it");
    return FailPtr(ENOMEM);
  }
  // Move: write the old mapping back and drop it (uunmap), then map anew: the new mapping
  // reads what the old one held and takes its write locks, which two live mappings of one
  // range could not both hold (docs/consistency.md). If the new mapping cannot be made, the
  // old one is made again where it was (its bytes are in the file): a failed mremap leaves
  // the mapping as it found it.
  if (!registry_.Claim(hits[0].index, m)) return FailPtr(EINVAL);
  const size_t delta = m.user - m.base;
  umap_runtime* rt = Runtime();
  if (rt == nullptr || uunmap(reinterpret_cast<void*>(m.base), m.map_len) != 0) {
    const int err = rt == nullptr ? ENOMEM : errno;
    registry_.Release(hits[0].index);
    return FailPtr(err);
  }
  void* p = umap_ex(rt, nullptr, new_len + delta, m.prot, MAP_SHARED, m.fd,
                    static_cast<off_t>(m.map_offset));
  if (p == MAP_FAILED) {
    const int err = errno;
    void* back = umap_ex(rt, reinterpret_cast<void*>(m.base), m.map_len, m.prot,
                         MAP_SHARED | MAP_FIXED_NOREPLACE, m.fd, static_cast<off_t>(m.map_offset));
    if (back == reinterpret_cast<void*>(m.base)) {
      registry_.Release(hits[0].index);
    } else {
      // The old range is gone; what it held is in the file.
      UMAP_LOG(kError, "libumap_preload: mremap failed (", std::strerror(err),
               ") and its mapping of descriptor ", m.fd, " could not be made again where it was (",
               std::strerror(errno), "); its bytes are in the file");
      registry_.Remove(hits[0].index);
    }
    return FailPtr(err);
  }
  ShimMapping moved = m;
  moved.base = reinterpret_cast<uintptr_t>(p);
  moved.user = moved.base + delta;
  moved.user_len = new_len;
  moved.map_len = new_len + delta;
  moved.region_len = RoundUp(moved.map_len, config_.block_size);
  registry_.Remove(hits[0].index);
  if (registry_.Add(moved) < 0) {
    // Unreachable: a slot was just freed. Keep the promise of no silent loss anyway.
    UMAP_LOG(kError, "libumap_preload: mremap lost track of its mapping");
  }
  return reinterpret_cast<void*>(moved.user);
}

int Shim::Madvise(void* addr, size_t len, int advice) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (registry_.live() == 0) return RealMadvise(addr, len, advice);
  RangeSet hits(registry_, a, a + RoundUp(len, page_));
  if (hits.empty()) return RealMadvise(addr, len, advice);
  if (!IsResidencyAdvice(advice)) {
    UMAP_LOG(kError, "libumap_preload: madvise(", advice, ") on a Umap mapping (at 0x",
             absl::Hex(a), ") is not supported (EINVAL)");
    return Fail(EINVAL);
  }
  return hits.ForEachGap([advice](uintptr_t g, size_t n) {
    return RealMadvise(reinterpret_cast<void*>(g), n, advice) == 0 ? 0 : -1;
  });
}

int Shim::Mprotect(void* addr, size_t len, int prot) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (registry_.live() == 0) return RealMprotect(addr, len, prot);
  RangeSet hits(registry_, a, a + RoundUp(len, page_));
  if (hits.empty()) return RealMprotect(addr, len, prot);
  for (int i = 0; i < hits.size(); ++i) {
    const ShimMapping& m = hits[i].m;
    if (prot == m.prot) continue;
    const bool adds_write = (prot & PROT_WRITE) != 0 && (m.prot & PROT_WRITE) == 0;
    UMAP_LOG(kError, "libumap_preload: mprotect(", prot, ") of the Umap mapping at 0x",
             absl::Hex(m.user), " (protection ", m.prot, ") is not supported (",
             adds_write ? "EACCES" : "EINVAL", ")");
    return Fail(adds_write ? EACCES : EINVAL);
  }
  return hits.ForEachGap([prot](uintptr_t g, size_t n) {
    return RealMprotect(reinterpret_cast<void*>(g), n, prot) == 0 ? 0 : -1;
  });
}

}  // namespace umap::preload
