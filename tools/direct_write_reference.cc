#include "tools/direct_write_reference.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>

#include "absl/strings/str_cat.h"
#include "base/posix_error.h"
#include "umap/env.h"

namespace umap::tools {

absl::StatusOr<uint64_t> DirectWriteReference(const std::string& path, uint64_t size) {
  constexpr size_t kBlock = 1 << 20;
  constexpr unsigned kDepth = 16;
  const int fd = ::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return PosixError(errno, absl::StrCat("open ", path, " O_DIRECT"));
  struct Free {
    void operator()(char* p) const { ::operator delete(p, std::align_val_t{4096}); }
  };
  // One buffer serves every write: the writes only read it.
  std::unique_ptr<char, Free> buf(
      static_cast<char*>(::operator new(kBlock, std::align_val_t{4096})));
  for (size_t i = 0; i < kBlock; ++i) buf.get()[i] = static_cast<char>(i * 131 + 7);
  io_uring ring;
  if (int rc = io_uring_queue_init(2 * kDepth, &ring, 0); rc < 0) {
    ::close(fd);
    return PosixError(-rc, "io_uring_queue_init");
  }
  Env* env = Env::Default();
  const uint64_t t0 = env->NowMicros();
  uint64_t next = 0, done = 0;
  unsigned inflight = 0;
  absl::Status error;
  while (done < size && error.ok()) {
    while (inflight < kDepth && next < size) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      const size_t n = std::min<uint64_t>(kBlock, size - next);
      io_uring_prep_write(sqe, fd, buf.get(), n, next);
      next += n;
      ++inflight;
    }
    if (int rc = io_uring_submit_and_wait(&ring, 1); rc < 0 && rc != -EINTR) {
      error = PosixError(-rc, "io_uring_submit_and_wait");
      break;
    }
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      if (cqe->res <= 0) {
        error = PosixError(cqe->res < 0 ? -cqe->res : EIO,
                           absl::StrCat("O_DIRECT write of ", path));
      } else {
        done += static_cast<uint64_t>(cqe->res);
      }
    }
    io_uring_cq_advance(&ring, seen);
    inflight -= seen;
  }
  // Writes still in flight after an error are reaped before the buffer goes.
  while (inflight > 0) {
    io_uring_cqe* cqe;
    if (io_uring_wait_cqe(&ring, &cqe) < 0) break;
    io_uring_cqe_seen(&ring, cqe);
    --inflight;
  }
  io_uring_queue_exit(&ring);
  if (error.ok() && ::fdatasync(fd) != 0) error = PosixError(errno, "fdatasync " + path);
  const uint64_t us = env->NowMicros() - t0;
  ::close(fd);
  if (!error.ok()) return error;
  return us;
}

}  // namespace umap::tools
