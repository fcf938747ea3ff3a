// MappingRegistry: the Umap mappings the LD_PRELOAD shim made, as the application sees them.
//
// An application asks mmap() for `user_len` bytes at file offset `off`; Umap maps from the
// offset rounded down to its block size, so the shim's umap_ex mapping starts `delta` bytes
// before the address the application gets:
//
//   base                 user                              user + user_len
//   |<------ delta ----->|<----------- user_len ----------->|
//   |<------------------ map_len (given to umap_ex) ------->|
//   file offset map_offset = off - delta (a block multiple)
//
// Lookups are lock-free and allocate nothing: every read()/write() the application makes
// asks whether its buffer overlaps a mapping. Each slot is published with a version (odd:
// live), so a reader that raced with a removal or a reuse of the slot notices and skips
// it. Add and removal are serialised by a mutex (mmap/munmap are slow paths).
#ifndef UMAP_RUNTIME_PRELOAD_MAPPING_REGISTRY_H_
#define UMAP_RUNTIME_PRELOAD_MAPPING_REGISTRY_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace umap::preload {

struct ShimMapping {
  uintptr_t user = 0;       // address returned to the application
  size_t user_len = 0;      // length it asked for
  uintptr_t base = 0;       // what umap_ex returned (user - delta)
  size_t map_len = 0;       // length given to umap_ex (user_len + delta)
  size_t region_len = 0;    // address space Umap reserved: map_len rounded up to its block
  uint64_t map_offset = 0;  // block-aligned file offset given to umap_ex
  uint64_t file_size = 0;   // the file's size as last seen: pages past it raise SIGBUS
  uint64_t dev = 0;         // the file (st_dev, st_ino): the process's file API calls on
  uint64_t ino = 0;         // any descriptor of it are kept coherent with the mapping
  int prot = 0;
  int fd = -1;  // the shim's own close-on-exec duplicate of the descriptor

  bool writable() const;
  // End of the application's view, rounded up to the page size (what munmap covers).
  uintptr_t user_end(size_t page) const { return user + (user_len + page - 1) / page * page; }
  // End of the bytes backed by the file at map time (no further than the mapping).
  uintptr_t data_end() const;
};

class MappingRegistry {
 public:
  static constexpr int kCapacity = 4096;

  // Live entries; 0 means no address belongs to a shim mapping (one relaxed load).
  uint32_t live() const { return live_.load(std::memory_order_relaxed); }

  // Calls fn(index, mapping) for every live entry whose [base, base + region_len) overlaps
  // [addr, addr + len). Lock-free; `mapping` is a consistent snapshot.
  template <typename Fn>
  void ForEachOverlapping(uintptr_t addr, size_t len, Fn&& fn) const {
    const int high = high_.load(std::memory_order_acquire);
    for (int i = 0; i < high; ++i) {
      ShimMapping m;
      if (!Load(i, &m)) continue;
      if (addr < m.base + m.region_len && m.base < addr + len) fn(i, m);
    }
  }
  // A consistent snapshot of live entry i; false when the slot is free or changed meanwhile.
  bool Load(int i, ShimMapping* out) const;

  // Adds a mapping; returns its index, or -1 when the registry is full.
  int Add(const ShimMapping& m);
  // Takes entry i (seen as `expected`) for removal or replacement, so that two threads never
  // unmap one mapping twice. False when another thread took it or it changed.
  bool Claim(int i, const ShimMapping& expected);
  // Gives a claimed entry back unchanged (the unmap failed).
  void Release(int i);
  // Removes a claimed entry.
  void Remove(int i);
  // The file of entry i has `size` bytes now (it was written or resized through the file
  // API). Lock-free; a racing reader sees the old or the new size.
  void SetFileSize(int i, uint64_t size) {
    slots_[i].file_size.store(size, std::memory_order_relaxed);
  }
  // Entry i's protection changed (a fork child's mapping, made read-only again).
  void SetProt(int i, int prot) { slots_[i].prot.store(prot, std::memory_order_relaxed); }

  // Calls fn(index, mapping) for every live entry. Lock-free (a fork() child may use it).
  template <typename Fn>
  void ForEachLive(Fn&& fn) const {
    const int high = high_.load(std::memory_order_acquire);
    for (int i = 0; i < high; ++i) {
      ShimMapping m;
      if (Load(i, &m)) fn(i, m);
    }
  }

 private:
  // All fields are atomics: lookups read them while another thread may rewrite the slot,
  // and the version tells afterwards whether what they read was whole.
  struct Slot {
    std::atomic<uint64_t> version{0};  // odd: live
    std::atomic<bool> claimed{false};
    std::atomic<uint64_t> user{0}, user_len{0}, base{0}, map_len{0}, region_len{0}, map_offset{0},
        file_size{0}, dev{0}, ino{0};
    std::atomic<int> prot{0}, fd{-1};
  };

  std::mutex mu_;  // Add / Remove
  Slot slots_[kCapacity];
  std::atomic<int> high_{0};
  std::atomic<uint32_t> live_{0};
};

}  // namespace umap::preload

#endif  // UMAP_RUNTIME_PRELOAD_MAPPING_REGISTRY_H_
