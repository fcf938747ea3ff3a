// The part umap and mmap share: the workers read and write the mapping with plain loads and
// stores, exactly as an application would.
#ifndef UMAP_BENCH_MAPPED_BACKEND_H_
#define UMAP_BENCH_MAPPED_BACKEND_H_

#include <cstring>

#include "bench/backend.h"

namespace umap_bench {

class MappedBackend : public BenchBackend {
 public:
  absl::Status Read(unsigned, uint64_t off, char* buf, size_t n) final {
    std::memcpy(buf, base_ + off, n);
    // The copy counts as used, so the compiler cannot elide it.
    asm volatile("" : : "r"(buf) : "memory");
    return absl::OkStatus();
  }
  absl::Status Write(unsigned, uint64_t off, char*, size_t n, uint32_t tag) final {
    FillWords(reinterpret_cast<uint64_t*>(base_ + off), off / 8, n / 8, tag);
    return absl::OkStatus();
  }
  const char* mapped_base() const final { return base_; }

 protected:
  char* base_ = nullptr;  // set by Open
  size_t len_ = 0;
};

}  // namespace umap_bench

#endif  // UMAP_BENCH_MAPPED_BACKEND_H_
