// uring: the raw io_uring reference for umap's miss path. The file is opened O_DIRECT; each
// worker thread has its own ring and submits one read (or write) per op, waiting for its
// completion, so at T threads T requests are in flight: the depth umap's I/O channels see
// when T threads each fault on a different block. Sync is fdatasync. Op size and offsets
// must be multiples of 4 KiB.
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "bench/backend.h"
#include "bench/posix_io.h"

namespace umap_bench {
namespace {

class UringBackend final : public BenchBackend {
 public:
  ~UringBackend() override { CloseRings(); }

  absl::Status Open(const BenchFile& file, const OpenParams& params) override {
    path_ = file.path();
    if (params.op_size % kDirectAlign != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("uring needs an op size that is a multiple of ", kDirectAlign,
                       " (O_DIRECT), not ", params.op_size));
    }
    ASSIGN_OR_RETURN(fd_, OpenFile(path_, (params.writable ? O_RDWR : O_RDONLY) | O_DIRECT));
    rings_ = std::vector<Ring>(params.threads);
    for (Ring& r : rings_) {
      if (int err = io_uring_queue_init(kRingEntries, &r.ring, 0); err < 0) {
        return Errno(-err, "io_uring_queue_init");
      }
      r.ready = true;
    }
    return absl::OkStatus();
  }

  absl::Status Read(unsigned thread, uint64_t off, char* buf, size_t n) override {
    return Transfer(rings_[thread].ring, /*write=*/false, off, buf, n);
  }

  absl::Status Write(unsigned thread, uint64_t off, char* buf, size_t n, uint32_t tag) override {
    FillWords(reinterpret_cast<uint64_t*>(buf), off / 8, n / 8, tag);
    return Transfer(rings_[thread].ring, /*write=*/true, off, buf, n);
  }

  absl::Status Sync(unsigned) override {
    if (::fdatasync(fd_.get()) != 0) return Errno(errno, absl::StrCat("fdatasync ", path_));
    return absl::OkStatus();
  }

  void Collect(RunResult& r) const override {
    r.misses = r.ops;
    r.misses_counted = true;
  }

  absl::Status Close() override {
    CloseRings();
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kDirectAlign = 4096;
  static constexpr unsigned kRingEntries = 4;
  // A ring per worker thread; rings_ is sized in Open and never resized while workers run.
  struct Ring {
    io_uring ring{};
    bool ready = false;
  };

  // One request for [off, off+n), resubmitting the rest of a short transfer.
  absl::Status Transfer(io_uring& ring, bool write, uint64_t off, char* buf, size_t n) {
    size_t done = 0;
    while (done < n) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) return absl::InternalError("io_uring: no free submission entry");
      if (write) {
        io_uring_prep_write(sqe, fd_.get(), buf + done, static_cast<unsigned>(n - done),
                            off + done);
      } else {
        io_uring_prep_read(sqe, fd_.get(), buf + done, static_cast<unsigned>(n - done), off + done);
      }
      // -EINTR means nothing was submitted (the kernel reports a submission that was
      // interrupted while waiting as submitted): the entry is still queued, submit again.
      int err;
      do {
        err = io_uring_submit_and_wait(&ring, 1);
      } while (err == -EINTR);
      if (err < 0) return Errno(-err, absl::StrCat("io_uring_submit_and_wait ", path_));
      io_uring_cqe* cqe = nullptr;
      do {
        err = io_uring_wait_cqe(&ring, &cqe);
      } while (err == -EINTR);
      if (err < 0) return Errno(-err, absl::StrCat("io_uring_wait_cqe ", path_));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      if (res == -EINTR || res == -EAGAIN) continue;
      if (res < 0) {
        return Errno(-res, absl::StrCat(write ? "io_uring write " : "io_uring read ", path_,
                                        " offset ", off + done));
      }
      if (res == 0) {
        return absl::OutOfRangeError(
            absl::StrCat("io_uring read ", path_, ": end of file at offset ", off + done));
      }
      done += static_cast<size_t>(res);
    }
    return absl::OkStatus();
  }

  void CloseRings() {
    for (Ring& r : rings_) {
      if (r.ready) io_uring_queue_exit(&r.ring);
      r.ready = false;
    }
  }

  std::string path_;
  Fd fd_;
  std::vector<Ring> rings_;
};

absl::StatusOr<std::unique_ptr<BenchBackend>> NewUringBackend(const std::string& variant,
                                                              const BackendOptions&) {
  if (!variant.empty()) return absl::InvalidArgumentError("uring takes no variant");
  return std::make_unique<UringBackend>();
}

}  // namespace

UMAP_BENCH_REGISTER_BACKEND("uring",
                            "io_uring O_DIRECT, one request in flight per thread "
                            "(the raw miss reference)",
                            NewUringBackend);

}  // namespace umap_bench
