// ZeroedArray<T>: a fixed-size array in its own anonymous mapping, whose pages become memory
// only when first written.
//
// The cache's per-block metadata (the pool's cache blocks, the I/O scheduler's nodes, the
// fill owners) is sized for the hard cap, which with lazy sizing may be far above what the
// cache ever uses (all of RAM when cache_bytes is unset). Constructing such arrays with
// `new T[n]` would touch every page; here untouched entries cost address space only.
//
// REQUIRES: all-zero bytes are a valid initial state of T (so T's constructor is never run),
// and T needs no destructor. Allocation failure leaves data() null (the owner checks ok()).
#ifndef UMAP_RUNTIME_CACHE_ZEROED_ARRAY_H_
#define UMAP_RUNTIME_CACHE_ZEROED_ARRAY_H_

#include <sys/mman.h>

#include <cstddef>
#include <type_traits>

namespace umap::runtime {

template <typename T>
class ZeroedArray {
  static_assert(std::is_trivially_destructible_v<T>);

 public:
  explicit ZeroedArray(size_t n) : n_(n) {
    if (n == 0) return;
    void* p = ::mmap(nullptr, bytes(), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<T*>(p);
  }
  ~ZeroedArray() {
    if (data_ != nullptr) ::munmap(data_, bytes());
  }
  ZeroedArray(const ZeroedArray&) = delete;
  ZeroedArray& operator=(const ZeroedArray&) = delete;

  bool ok() const { return n_ == 0 || data_ != nullptr; }
  size_t size() const { return n_; }
  T* data() { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  size_t bytes() const { return n_ * sizeof(T); }

  const size_t n_;
  T* data_ = nullptr;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_CACHE_ZEROED_ARRAY_H_
