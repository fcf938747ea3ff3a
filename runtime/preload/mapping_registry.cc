#include "runtime/preload/mapping_registry.h"

#include <sys/mman.h>

#include <algorithm>

namespace umap::preload {

bool ShimMapping::writable() const { return (prot & PROT_WRITE) != 0; }

uintptr_t ShimMapping::data_end() const {
  if (file_size <= map_offset) return base;
  return base + static_cast<uintptr_t>(std::min<uint64_t>(file_size - map_offset, map_len));
}

bool MappingRegistry::Load(int i, ShimMapping* out) const {
  const Slot& s = slots_[i];
  const uint64_t v1 = s.version.load(std::memory_order_acquire);
  if ((v1 & 1) == 0) return false;
  out->user = s.user.load(std::memory_order_relaxed);
  out->user_len = s.user_len.load(std::memory_order_relaxed);
  out->base = s.base.load(std::memory_order_relaxed);
  out->map_len = s.map_len.load(std::memory_order_relaxed);
  out->region_len = s.region_len.load(std::memory_order_relaxed);
  out->map_offset = s.map_offset.load(std::memory_order_relaxed);
  out->file_size = s.file_size.load(std::memory_order_relaxed);
  out->dev = s.dev.load(std::memory_order_relaxed);
  out->ino = s.ino.load(std::memory_order_relaxed);
  out->prot = s.prot.load(std::memory_order_relaxed);
  out->fd = s.fd.load(std::memory_order_relaxed);
  // Order the field loads before the second version load (seqlock reader).
  std::atomic_thread_fence(std::memory_order_acquire);
  return s.version.load(std::memory_order_relaxed) == v1;
}

int MappingRegistry::Add(const ShimMapping& m) {
  std::lock_guard<std::mutex> l(mu_);
  int i = 0;
  const int high = high_.load(std::memory_order_relaxed);
  while (i < high && ((slots_[i].version.load(std::memory_order_relaxed) & 1) != 0 ||
                      slots_[i].claimed.load(std::memory_order_relaxed))) {
    ++i;
  }
  if (i == kCapacity) return -1;
  Slot& s = slots_[i];
  const uint64_t v = s.version.load(std::memory_order_relaxed);
  s.user.store(m.user, std::memory_order_relaxed);
  s.user_len.store(m.user_len, std::memory_order_relaxed);
  s.base.store(m.base, std::memory_order_relaxed);
  s.map_len.store(m.map_len, std::memory_order_relaxed);
  s.region_len.store(m.region_len, std::memory_order_relaxed);
  s.map_offset.store(m.map_offset, std::memory_order_relaxed);
  s.file_size.store(m.file_size, std::memory_order_relaxed);
  s.dev.store(m.dev, std::memory_order_relaxed);
  s.ino.store(m.ino, std::memory_order_relaxed);
  s.prot.store(m.prot, std::memory_order_relaxed);
  s.fd.store(m.fd, std::memory_order_relaxed);
  s.version.store(v + 1, std::memory_order_release);
  if (i == high) high_.store(i + 1, std::memory_order_release);
  live_.fetch_add(1, std::memory_order_relaxed);
  return i;
}

bool MappingRegistry::Claim(int i, const ShimMapping& expected) {
  Slot& s = slots_[i];
  bool no = false;
  if (!s.claimed.compare_exchange_strong(no, true, std::memory_order_acq_rel)) return false;
  ShimMapping now;
  if (!Load(i, &now) || now.base != expected.base || now.map_len != expected.map_len) {
    s.claimed.store(false, std::memory_order_release);
    return false;
  }
  return true;
}

void MappingRegistry::Release(int i) { slots_[i].claimed.store(false, std::memory_order_release); }

void MappingRegistry::Remove(int i) {
  std::lock_guard<std::mutex> l(mu_);
  Slot& s = slots_[i];
  s.version.fetch_add(1, std::memory_order_release);  // even: free
  s.claimed.store(false, std::memory_order_release);
  live_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace umap::preload
