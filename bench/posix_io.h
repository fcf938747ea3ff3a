// Small POSIX helpers shared by the benchmark programs: an owning file descriptor, full
// pread/pwrite loops and one-value files (procfs, cgroup controls). Every error names the
// call and the path.
#ifndef UMAP_BENCH_POSIX_IO_H_
#define UMAP_BENCH_POSIX_IO_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace umap_bench {

// errno `err` as a status whose message starts with `what`.
absl::Status Errno(int err, const std::string& what);

// Closes the descriptor it holds on destruction.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  ~Fd();
  int get() const { return fd_; }

 private:
  int fd_;
};

// open(2) with O_CLOEXEC (mode 0644 when creating).
absl::StatusOr<Fd> OpenFile(const std::string& path, int flags);

// Reads/writes exactly len bytes at off, retrying short transfers and EINTR. End of file
// before len is OutOfRange.
absl::Status PreadFull(int fd, char* buf, size_t len, uint64_t off, const std::string& path);
absl::Status PwriteFull(int fd, const char* buf, size_t len, uint64_t off, const std::string& path);

// Writes `text` to an existing file in one write(2) (procfs and cgroup control files).
absl::Status WriteSmallFile(const std::string& path, const std::string& text);
// The whole content of a small file; NotFound/PermissionDenied/... when it cannot be read.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path);
// The first decimal number in a small file.
absl::StatusOr<uint64_t> ReadNumberFile(const std::string& path);

}  // namespace umap_bench

#endif  // UMAP_BENCH_POSIX_IO_H_
