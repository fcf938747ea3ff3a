// InternalIo: marks a thread doing Umap's own I/O on a data file (a fill's pread, a
// write-back's pwrite and fdatasync, recovery's replay) for the length of a scope.
//
// The LD_PRELOAD shim keeps the program's own read(2)/write(2) of a mapped file coherent
// with the mapping (docs/preload.md, "One copy"); Umap's own calls on the same file reach
// the same interposed symbols (the runtime lives in the shim's library), and must go
// straight to the kernel. async-signal-safe: faults resolved in a signal handler use it.
#ifndef UMAP_BASE_INTERNAL_IO_H_
#define UMAP_BASE_INTERNAL_IO_H_

namespace umap {

class InternalIo {
 public:
  InternalIo() : was_(active_) { active_ = true; }
  ~InternalIo() { active_ = was_; }
  InternalIo(const InternalIo&) = delete;
  InternalIo& operator=(const InternalIo&) = delete;
  static bool active() { return active_; }

 private:
  // initial-exec: reading it never calls __tls_get_addr (which may allocate).
  static thread_local bool active_ __attribute__((tls_model("initial-exec")));
  const bool was_;
};

}  // namespace umap

#endif  // UMAP_BASE_INTERNAL_IO_H_
