// umap: a fresh runtime (umap_config_init() defaults and UMAP_* environment, then the
// BackendOptions) and one umap_ex mapping of the whole file; Sync is umsync, Close is uunmap
// (which writes back like umsync, so its error fails the run). Variants choose the cache:
//   umap        a fixed cache of BackendOptions::cache_bytes (--cache, or fitted to the budget)
//   umap+SIZE   a fixed cache of SIZE bytes (K/M/G suffixes), e.g. umap+16M
//   umap+lazy   the configuration umap_config_init() gives (UMAP_* variables): by default
//               cache_bytes unset and lazy sizing on, so the runtime sizes its cache itself
//               within the memory budget (docs/design.md "Cache sizing")
#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/human.h"
#include "bench/mapped_backend.h"
#include "bench/posix_io.h"
#include "umap/umap.hpp"

namespace umap_bench {
namespace {

std::string StatsLine(const umap_stats& s) {
  return absl::StrFormat(
      "  umap stats: faults_missing %u faults_wp %u blocks_read %u blocks_written %u "
      "evictions %u dirty_evictions %u cache used %u peak %u limit %u io_errors %u sigbus %u\n",
      s.faults_missing, s.faults_wp, s.blocks_read, s.blocks_written, s.evictions,
      s.dirty_evictions, s.cache_bytes_used, s.cache_bytes_peak, s.cache_bytes_limit, s.io_errors,
      s.sigbus_raised);
}

class UmapBackend final : public MappedBackend {
 public:
  // cache_bytes 0: keep the runtime's default (lazy sizing unless UMAP_LAZY_SIZING=0);
  // else a fixed cache of that size.
  UmapBackend(const BackendOptions& o, size_t cache_bytes)
      : options_(o), cache_bytes_(cache_bytes) {}

  absl::Status Open(const BenchFile& file, const OpenParams& params) override {
    ASSIGN_OR_RETURN(fd_, OpenFile(file.path(), params.writable ? O_RDWR : O_RDONLY));
    ASSIGN_OR_RETURN(umap_config cfg, Umap::Runtime::DefaultConfig());
    if (cache_bytes_ != 0) {
      // A fixed cache of that size (the comparison the SIZE variants are for).
      cfg.cache_bytes = cache_bytes_;
      cfg.lazy_sizing = 0;
    }
    cfg.block_size = options_.block_size;
    cfg.handler_threads = options_.handler_threads;
    cfg.writeback_threads = options_.writeback_threads;
    cfg.policy = options_.policy;
    cfg.journal_mode = options_.journal_mode;
    cfg.journal_dir = options_.journal_dir.empty() ? nullptr : options_.journal_dir.c_str();
    absl::StatusOr<Umap::Runtime> created = Umap::Runtime::Create(cfg);
    if (!created.ok()) {
      return absl::Status(
          created.status().code(),
          absl::StrCat("creating a umap runtime (cache ", cfg.cache_bytes, ", block ",
                       cfg.block_size, "): ", created.status().message()));
    }
    runtime_ = std::make_unique<Umap::Runtime>(std::move(*created));
    const int prot = params.writable ? (PROT_READ | PROT_WRITE) : PROT_READ;
    absl::StatusOr<Umap::Mapping> m =
        Umap::Mapping::Open(runtime_->get(), fd_.get(), file.size(), prot);
    if (!m.ok()) {
      return absl::Status(m.status().code(),
                          absl::StrCat("umap of ", file.path(), ": ", m.status().message()));
    }
    mapping_ = std::make_unique<Umap::Mapping>(std::move(*m));
    base_ = mapping_->as<char>();
    len_ = file.size();
    return absl::OkStatus();
  }

  absl::Status Sync(unsigned) override {
    if (umsync(base_, len_, MS_SYNC) != 0) return Errno(errno, "umsync of the whole mapping");
    return absl::OkStatus();
  }

  std::string StallReport() const override {
    return runtime_ ? StatsLine(runtime_->Stats()) : std::string();
  }

  void Collect(RunResult& r) const override {
    const umap_stats st = runtime_->Stats();
    r.faults = st.faults_missing + st.faults_wp;
    r.umap_faults_missing = st.faults_missing;
    r.misses = st.faults_missing;
    r.misses_counted = true;
    r.umap_cache_used = st.cache_bytes_used;
    r.umap_cache_peak = st.cache_bytes_peak;
    r.umap_cache_limit = st.cache_bytes_limit;
    r.umap_cache_capacity = st.cache_capacity_bytes;
    r.umap_cache_virtual = st.cache_virtual_bytes;
    r.umap_cache_ceiling = st.cache_ceiling_bytes;
    r.umap_remisses = st.cache_remisses;
    r.umap_blocks_read = st.blocks_read;
    r.umap_blocks_written = st.blocks_written;
    r.umap_evictions = st.evictions;
    r.umap_dirty_evictions = st.dirty_evictions;
    r.umap_io_errors = st.io_errors;
    r.umap_sigbus = st.sigbus_raised;
    r.umap_io_reads = st.io_reads;
    r.umap_io_bytes = st.io_bytes;
    r.umap_io_writes = st.io_writes;
    r.umap_io_write_bytes = st.io_write_bytes;
    r.umap_prefetched = st.prefetched_blocks;
  }

  absl::Status Close() override {
    absl::Status s;
    if (mapping_) s = mapping_->Unmap();
    // The mapping goes before the runtime.
    mapping_.reset();
    runtime_.reset();
    base_ = nullptr;
    return s;
  }

 private:
  const BackendOptions options_;
  const size_t cache_bytes_;
  Fd fd_;
  // Declaration order: the mapping is destroyed before the runtime.
  std::unique_ptr<Umap::Runtime> runtime_;
  std::unique_ptr<Umap::Mapping> mapping_;
};

absl::StatusOr<std::unique_ptr<BenchBackend>> NewUmapBackend(const std::string& variant,
                                                             const BackendOptions& options) {
  if (variant.empty()) return std::make_unique<UmapBackend>(options, options.cache_bytes);
  if (variant == "lazy") return std::make_unique<UmapBackend>(options, 0);
  absl::StatusOr<uint64_t> cache = ParseBytes(variant);
  if (!cache.ok() || *cache == 0) {
    return absl::InvalidArgumentError("umap takes no variant, +lazy or +SIZE (e.g. +16M)");
  }
  return std::make_unique<UmapBackend>(options, *cache);
}

}  // namespace

UMAP_BENCH_REGISTER_BACKEND("umap",
                            "a umap runtime (--cache, --block-size, ...) and umap_ex; +SIZE: "
                            "that cache; +lazy: the runtime's own cache size",
                            NewUmapBackend);

}  // namespace umap_bench
