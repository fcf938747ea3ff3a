// pread: no mapping; every read op is one pread(2) and every write op one pwrite(2) of the
// op's bytes; Sync is fdatasync. "pread" goes through the page cache (the system-call
// reference); "pread+direct" opens the file O_DIRECT, so every op is a storage request: the
// raw device reference for misses (op size and offsets must then be multiples of 4 KiB).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "bench/backend.h"
#include "bench/posix_io.h"

namespace umap_bench {
namespace {

class PreadBackend final : public BenchBackend {
 public:
  explicit PreadBackend(bool direct) : direct_(direct) {}

  absl::Status Open(const BenchFile& file, const OpenParams& params) override {
    path_ = file.path();
    if (direct_ && params.op_size % kDirectAlign != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("pread+direct needs an op size that is a multiple of ", kDirectAlign,
                       " (O_DIRECT), not ", params.op_size));
    }
    ASSIGN_OR_RETURN(
        fd_, OpenFile(path_, (params.writable ? O_RDWR : O_RDONLY) | (direct_ ? O_DIRECT : 0)));
    return absl::OkStatus();
  }

  absl::Status Read(unsigned, uint64_t off, char* buf, size_t n) override {
    return PreadFull(fd_.get(), buf, n, off, path_);
  }

  absl::Status Write(unsigned, uint64_t off, char* buf, size_t n, uint32_t tag) override {
    FillWords(reinterpret_cast<uint64_t*>(buf), off / 8, n / 8, tag);
    return PwriteFull(fd_.get(), buf, n, off, path_);
  }

  absl::Status Sync(unsigned) override {
    if (::fdatasync(fd_.get()) != 0) return Errno(errno, absl::StrCat("fdatasync ", path_));
    return absl::OkStatus();
  }

  void Collect(RunResult& r) const override {
    // Buffered: the page cache's misses are not visible from here.
    if (!direct_) return;
    r.misses = r.ops;
    r.misses_counted = true;
  }

  absl::Status Close() override { return absl::OkStatus(); }

 private:
  static constexpr size_t kDirectAlign = 4096;
  const bool direct_;
  std::string path_;
  Fd fd_;
};

absl::StatusOr<std::unique_ptr<BenchBackend>> NewPreadBackend(const std::string& variant,
                                                              const BackendOptions&) {
  if (variant.empty()) return std::make_unique<PreadBackend>(false);
  if (variant == "direct") return std::make_unique<PreadBackend>(true);
  return absl::InvalidArgumentError("pread takes no variant or +direct");
}

}  // namespace

UMAP_BENCH_REGISTER_BACKEND("pread",
                            "one pread/pwrite per op, fdatasync to sync; +direct: O_DIRECT",
                            NewPreadBackend);

}  // namespace umap_bench
