// mmap(MAP_SHARED) of the whole file: the kernel's page cache and fault path, the reference
// umap replaces. "mmap" uses --madvise (default: no madvise call at all); "mmap+normal",
// "mmap+random" and "mmap+seq" (or "+sequential") call madvise with that advice.
#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "bench/mapped_backend.h"
#include "bench/posix_io.h"

namespace umap_bench {
namespace {

class MmapBackend final : public MappedBackend {
 public:
  explicit MmapBackend(Advice advice) : advice_(advice) {}

  absl::Status Open(const BenchFile& file, const OpenParams& params) override {
    ASSIGN_OR_RETURN(fd_, OpenFile(file.path(), params.writable ? O_RDWR : O_RDONLY));
    const int prot = params.writable ? (PROT_READ | PROT_WRITE) : PROT_READ;
    void* p = ::mmap(nullptr, file.size(), prot, MAP_SHARED, fd_.get(), 0);
    if (p == MAP_FAILED) return Errno(errno, absl::StrCat("mmap ", file.path()));
    base_ = static_cast<char*>(p);
    len_ = file.size();
    int adv = -1;
    switch (advice_) {
      case Advice::kDefault:
        break;
      case Advice::kNormal:
        adv = MADV_NORMAL;
        break;
      case Advice::kRandom:
        adv = MADV_RANDOM;
        break;
      case Advice::kSequential:
        adv = MADV_SEQUENTIAL;
        break;
    }
    if (adv >= 0 && ::madvise(base_, len_, adv) != 0) {
      return Errno(errno, absl::StrCat("madvise ", AdviceName(advice_), " ", file.path()));
    }
    return absl::OkStatus();
  }

  absl::Status Sync(unsigned) override {
    if (::msync(base_, len_, MS_SYNC) != 0) return Errno(errno, "msync of the whole mapping");
    return absl::OkStatus();
  }

  void Collect(RunResult& r) const override {
    r.misses = r.major_faults;
    r.misses_counted = true;
  }

  absl::Status Close() override {
    if (base_ != nullptr && ::munmap(base_, len_) != 0) return Errno(errno, "munmap");
    base_ = nullptr;
    return absl::OkStatus();
  }

  ~MmapBackend() override {
    if (base_ != nullptr) ::munmap(base_, len_);
  }

 private:
  const Advice advice_;
  Fd fd_;
};

absl::StatusOr<std::unique_ptr<BenchBackend>> NewMmapBackend(const std::string& variant,
                                                             const BackendOptions& options) {
  Advice advice = options.advice;
  if (!variant.empty()) {
    ASSIGN_OR_RETURN(advice, ParseAdvice(variant));
  }
  return std::make_unique<MmapBackend>(advice);
}

}  // namespace

UMAP_BENCH_REGISTER_BACKEND("mmap",
                            "mmap(MAP_SHARED) with --madvise; +normal, +random, +seq: that "
                            "madvise",
                            NewMmapBackend);

}  // namespace umap_bench
