// C++ RAII layer over the C API.
//
//   Umap::Runtime rt = Umap::Runtime::Create(config).value();   // or use the default runtime
//   Umap::Mapping m = Umap::Mapping::Open(rt.get(), fd, size, PROT_READ | PROT_WRITE).value();
//   double* x = m.as<double>();  ...  m.Sync().IgnoreError();  // destructor unmaps
//
// The namespace is `Umap`, not `umap`: C++ cannot have both the function umap() (which
// umap.h declares, for mmap source compatibility) and a namespace of the same name.
#ifndef UMAP_UMAP_HPP_
#define UMAP_UMAP_HPP_

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "umap/umap.h"

namespace Umap {

inline absl::Status ErrnoStatus(int err, const char* what) {
  return absl::ErrnoToStatus(err, what);
}

// Owns a umap_runtime; destroying it unmaps (with write-back) what is still mapped.
class Runtime {
 public:
  static absl::StatusOr<Runtime> Create(const umap_config& config) {
    umap_runtime* r = umap_runtime_create(&config);
    if (r == nullptr) return ErrnoStatus(errno, "umap_runtime_create");
    return Runtime(r);
  }
  // A config with the documented defaults and UMAP_* environment values applied.
  static absl::StatusOr<umap_config> DefaultConfig() {
    umap_config c;
    if (umap_config_init(&c) != 0) return ErrnoStatus(errno, "umap_config_init");
    return c;
  }
  Runtime(Runtime&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  Runtime& operator=(Runtime&& o) noexcept {
    std::swap(r_, o.r_);
    return *this;
  }
  ~Runtime() {
    if (r_ != nullptr) umap_runtime_destroy(r_);
  }
  umap_runtime* get() const { return r_; }
  umap_stats Stats() const {
    umap_stats s{};
    umap_get_stats(r_, &s);
    return s;
  }

 private:
  explicit Runtime(umap_runtime* r) : r_(r) {}
  umap_runtime* r_;
};

// One mapping; the destructor calls uunmap (write-back included). Call Unmap() yourself to
// see its error: a failed write-back leaves the mapping in place.
class Mapping {
 public:
  // runtime may be null: the process's default runtime.
  static absl::StatusOr<Mapping> Open(umap_runtime* runtime, int fd, size_t length, int prot,
                                      off_t offset = 0) {
    void* p = runtime ? umap_ex(runtime, nullptr, length, prot, MAP_SHARED, fd, offset)
                      : ::umap(nullptr, length, prot, MAP_SHARED, fd, offset);
    if (p == MAP_FAILED) return ErrnoStatus(errno, "umap");
    return Mapping(p, length);
  }
  // With per-mapping options (umap_ex2): the coherence mode and, for partitioned-write, the
  // byte ranges the mapping writes. EBUSY: another writer holds one of them (the log names
  // it); see docs/consistency.md.
  static absl::StatusOr<Mapping> Open(umap_runtime* runtime, int fd, size_t length, int prot,
                                      off_t offset, const umap_map_options& options) {
    umap_runtime* r = runtime ? runtime : umap_default_runtime();
    if (r == nullptr) return ErrnoStatus(errno, "umap_default_runtime");
    void* p = umap_ex2(r, nullptr, length, prot, MAP_SHARED, fd, offset, &options);
    if (p == MAP_FAILED) return ErrnoStatus(errno, "umap_ex2");
    return Mapping(p, length);
  }
  Mapping(Mapping&& o) noexcept
      : addr_(std::exchange(o.addr_, nullptr)), length_(std::exchange(o.length_, 0)) {}
  Mapping& operator=(Mapping&& o) noexcept {
    std::swap(addr_, o.addr_);
    std::swap(length_, o.length_);
    return *this;
  }
  ~Mapping() {
    if (addr_ != nullptr) uunmap(addr_, length_);
  }

  void* data() const { return addr_; }
  size_t size() const { return length_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(addr_);
  }

  // Durable write-back of [offset, offset+length) (default: everything).
  absl::Status Sync(size_t offset = 0, size_t length = 0) {
    if (length == 0) length = length_ - offset;
    if (umsync(static_cast<char*>(addr_) + offset, length, MS_SYNC) != 0) {
      return ErrnoStatus(errno, "umsync");
    }
    return absl::OkStatus();
  }
  absl::Status Unmap() {
    if (addr_ == nullptr) return absl::OkStatus();
    if (uunmap(addr_, length_) != 0) return ErrnoStatus(errno, "uunmap");
    addr_ = nullptr;
    length_ = 0;
    return absl::OkStatus();
  }

 private:
  Mapping(void* addr, size_t length) : addr_(addr), length_(length) {}
  void* addr_;
  size_t length_;
};

// Checkpoints (umap_quiesce/umap_resume in umap.h): every runtime of the process.
inline absl::Status Quiesce() {
  return umap_quiesce() == 0 ? absl::OkStatus() : ErrnoStatus(errno, "umap_quiesce");
}
inline absl::Status Resume() {
  return umap_resume() == 0 ? absl::OkStatus() : ErrnoStatus(errno, "umap_resume");
}

}  // namespace Umap

#endif  // UMAP_UMAP_HPP_
