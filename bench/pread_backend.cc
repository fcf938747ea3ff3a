// pread: no mapping; every read op is one pread(2) and every write op one pwrite(2) of the
// op's bytes; Sync is fdatasync. The system-call reference for the mapped backends.
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
  absl::Status Open(const BenchFile& file, bool writable, unsigned) override {
    path_ = file.path();
    ASSIGN_OR_RETURN(fd_, OpenFile(path_, writable ? O_RDWR : O_RDONLY));
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

  absl::Status Close() override { return absl::OkStatus(); }

 private:
  std::string path_;
  Fd fd_;
};

absl::StatusOr<std::unique_ptr<BenchBackend>> NewPreadBackend(const std::string& variant,
                                                              const BackendOptions&) {
  if (!variant.empty()) return absl::InvalidArgumentError("pread takes no variant");
  return std::make_unique<PreadBackend>();
}

}  // namespace

UMAP_BENCH_REGISTER_BACKEND("pread", "one pread/pwrite per op, fdatasync to sync", NewPreadBackend);

}  // namespace umap_bench
