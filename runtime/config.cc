// The one place where UMAP_* environment variables are read (docs/configuration.md).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "runtime/options.h"
#include "runtime/sizing/memory_budget.h"
#include "runtime/sizing/memory_probe.h"
#include "runtime/sizing/system_memory_probe.h"

namespace umap::runtime {
namespace {

// "64M", "1G", "4096", "2k": a byte count with an optional binary suffix.
bool ParseBytes(const char* text, size_t* out) {
  std::string s = absl::AsciiStrToLower(text);
  uint64_t mult = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'k': mult = 1ull << 10; break;
      case 'm': mult = 1ull << 20; break;
      case 'g': mult = 1ull << 30; break;
      case 't': mult = 1ull << 40; break;
      default: break;
    }
    if (mult != 1) s.pop_back();
  }
  uint64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v > (~0ull) / mult) return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

}  // namespace

RuntimeOptions RuntimeOptions::FromConfig(const umap_config& c) {
  RuntimeOptions o;
  o.cache_bytes = c.cache_bytes;
  o.lazy_sizing = c.lazy_sizing != 0;
  o.block_size = c.block_size;
  o.handler_threads = c.handler_threads;
  o.writeback_threads = c.writeback_threads;
  o.journal_dir = c.journal_dir ? c.journal_dir : "";
  o.policy = c.policy;
  o.journal_mode = c.journal_mode;
  if (c.journal_staged_quota != 0) o.journal_staged_quota = c.journal_staged_quota;
  if (c.umsync_chunk_bytes != 0) o.umsync_chunk_bytes = c.umsync_chunk_bytes;
  o.io_engine = c.io_engine;
  o.io_channels = c.io_channels;
  o.io_depth = c.io_depth;
  o.io_max_bytes = c.io_max_bytes;
  o.io_timeout_ms = c.io_timeout_ms;
  o.io_retries = c.io_retries;
  o.io_direct = c.io_direct != 0;
  o.prefetch_bytes = c.prefetch_bytes;
  o.fault_mode = c.fault_mode;
  o.stats_period_ms = c.stats_period_ms;
  o.coherence = c.coherence;
  o.defer_file_sync = c.defer_file_sync != 0;
  return o;
}

namespace {

constexpr char kBlockSizeName[] = "block_size (UMAP_BLOCK_SIZE, umap_config.block_size)";
constexpr char kIoMaxName[] = "io_max_bytes (UMAP_IO_MAX_BYTES, umap_config.io_max_bytes)";

// The sizes that decide how much memory the runtime takes outside its cache before it
// maps anything, checked before any of it is allocated: a block is read and written whole
// (so the largest I/O must hold one), and (CheckFixedMemory) the fixed buffers (shadow
// buffers, populated at creation, and the I/O channels' buffers) must fit in the memory
// the process may use.
absl::Status CheckSizes(const RuntimeOptions& o, size_t page) {
  if (o.block_size < page || (o.block_size & (o.block_size - 1)) != 0) {
    return PosixError(EINVAL, absl::StrCat(kBlockSizeName, " = ", o.block_size,
                                           " must be a power of two >= the page size ", page,
                                           " (e.g. 4096, 64K, 1M)"));
  }
  constexpr size_t kMaxIo = size_t{64} << 20;
  if (o.block_size > kMaxIo) {
    return PosixError(EINVAL, absl::StrCat(kBlockSizeName, " = ", o.block_size,
                                           " is larger than the largest I/O, 64 MiB: a block "
                                           "is read and written whole; use at most 64M"));
  }
  if (o.io_max_bytes < o.block_size || o.io_max_bytes > kMaxIo ||
      o.io_max_bytes % o.block_size != 0) {
    return PosixError(
        EINVAL,
        absl::StrCat(kIoMaxName, " = ", o.io_max_bytes, " must be a multiple of ", kBlockSizeName,
                     " = ", o.block_size, ", at most 64 MiB",
                     o.io_max_bytes < o.block_size ? ": a block is read and written whole; raise "
                                                     "UMAP_IO_MAX_BYTES to the block size or lower "
                                                     "UMAP_BLOCK_SIZE"
                                                   : ""));
  }
  return absl::OkStatus();
}

absl::Status CheckFixedMemory(const RuntimeOptions& o, uint64_t shadows) {
  std::unique_ptr<MemoryProbe> own;
  MemoryProbe* probe = o.memory_probe.get();
  if (probe == nullptr) {
    own = SystemMemoryProbe::Create("", /*pressure=*/false);
    probe = own.get();
  }
  absl::StatusOr<MemorySample> sample = probe->Sample();
  if (!sample.ok() || sample->limit == 0) return absl::OkStatus();  // nothing to compare with
  const uint64_t shadow_bytes = shadows * o.block_size;
  const uint64_t io_bytes =
      uint64_t{o.handler_threads + o.io_channels} * o.io_depth * o.io_max_bytes;
  const uint64_t room =
      sample->limit - std::min(sample->limit, MemoryBudget::BaseMargin(sample->limit));
  if (shadow_bytes + io_bytes > room) {
    return PosixError(
        ENOMEM,
        absl::StrCat("the runtime's fixed buffers would take ", (shadow_bytes + io_bytes) >> 20,
                     " MiB (", shadows, " shadow buffers of ", kBlockSizeName, " = ", o.block_size,
                     ", and up to ", o.handler_threads + o.io_channels, " x ", o.io_depth,
                     " I/O buffers (handler_threads + io_channels, x UMAP_IO_DEPTH) "
                     "of ",
                     kIoMaxName, " = ", o.io_max_bytes, "), more than the ", room >> 20,
                     " MiB this process may use (", probe->Describe(),
                     "); nothing was allocated. Lower UMAP_BLOCK_SIZE, UMAP_IO_MAX_BYTES or "
                     "UMAP_IO_DEPTH, or raise the memory limit"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Geometry> ComputeGeometry(const RuntimeOptions& o) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  RETURN_IF_ERROR(CheckSizes(o, page));
  if (o.handler_threads == 0 || o.handler_threads > 64) {
    return PosixError(EINVAL, absl::StrCat("handler_threads ", o.handler_threads,
                                           " must be in 1..64"));
  }
  if (o.writeback_threads == 0 || o.writeback_threads > 64) {
    return PosixError(EINVAL, absl::StrCat("writeback_threads ", o.writeback_threads,
                                           " must be in 1..64"));
  }
  // Unset: all of RAM is the structural bound (the budget keeps the cache far below it;
  // the per-block metadata is touched only as blocks are used).
  const uint64_t ram = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * page;
  const uint64_t bytes = o.cache_bytes != 0 ? o.cache_bytes : ram;
  uint64_t total = std::min<uint64_t>(bytes / o.block_size,
                                      o.cache_bytes != 0 ? ~0ull : 0x7fffffffull);
  // Shadows take 1/16 of the budget (4..256 of them); at least 8 blocks stay for residents.
  uint64_t shadows = std::min<uint64_t>(256, std::max<uint64_t>(4, total / 16));
  if (total < shadows + 8 || total - shadows > 0x7fffffffull) {
    return PosixError(EINVAL, absl::StrCat("cache_bytes ", o.cache_bytes, " gives ", total,
                                           " blocks of ", o.block_size,
                                           "; need at least 12 and at most 2^31"));
  }
  RETURN_IF_ERROR(CheckFixedMemory(o, shadows));
  const uint32_t cache = static_cast<uint32_t>(total - shadows);
  const uint64_t start = std::max<uint64_t>(o.lazy_start_bytes / o.block_size, 16);
  return Geometry{o.block_size, cache, static_cast<uint32_t>(shadows),
                  static_cast<uint32_t>(std::min<uint64_t>(start, cache))};
}

}  // namespace umap::runtime

extern "C" int umap_config_init(umap_config* c) {
  if (c == nullptr) {
    errno = EINVAL;
    return -1;
  }
  std::memset(c, 0, sizeof(*c));
  // The defaults live in RuntimeOptions (runtime/options.h) only.
  const umap::runtime::RuntimeOptions d;
  c->cache_bytes = d.cache_bytes;
  c->lazy_sizing = d.lazy_sizing ? 1 : 0;
  c->block_size = d.block_size;
  c->handler_threads = d.handler_threads;
  c->writeback_threads = d.writeback_threads;
  c->journal_dir = nullptr;
  c->policy = d.policy;
  c->journal_mode = d.journal_mode;
  c->journal_staged_quota = d.journal_staged_quota;
  c->umsync_chunk_bytes = d.umsync_chunk_bytes;
  c->io_engine = d.io_engine;
  c->io_channels = d.io_channels;
  c->io_depth = d.io_depth;
  c->io_max_bytes = d.io_max_bytes;
  c->io_timeout_ms = d.io_timeout_ms;
  c->io_retries = d.io_retries;
  c->io_direct = d.io_direct ? 1 : 0;
  c->prefetch_bytes = d.prefetch_bytes;
  c->fault_mode = d.fault_mode;
  c->stats_period_ms = d.stats_period_ms;
  c->coherence = d.coherence;
  c->defer_file_sync = d.defer_file_sync ? 1 : 0;

  bool ok = true;
  auto bytes = [&](const char* name, size_t* field) {
    if (const char* v = std::getenv(name)) {
      if (!umap::runtime::ParseBytes(v, field)) {
        UMAP_LOG(kError, name, "=", v, " is not a byte count (e.g. 4096, 64M, 2G)");
        ok = false;
      }
    }
  };
  auto count = [&](const char* name, unsigned* field) {
    if (const char* v = std::getenv(name)) {
      if (!absl::SimpleAtoi(v, field)) {
        UMAP_LOG(kError, name, "=", v, " is not a number");
        ok = false;
      }
    }
  };
  auto flag = [&](const char* name, int* field) {
    if (const char* v = std::getenv(name)) {
      if (std::strcmp(v, "1") == 0) *field = 1;
      else if (std::strcmp(v, "0") == 0) *field = 0;
      else { UMAP_LOG(kError, name, "=", v, " must be 0 or 1"); ok = false; }
    }
  };
  bytes("UMAP_CACHE_BYTES", &c->cache_bytes);
  bytes("UMAP_BLOCK_SIZE", &c->block_size);
  bytes("UMAP_JOURNAL_STAGED_QUOTA", &c->journal_staged_quota);
  bytes("UMAP_UMSYNC_CHUNK_BYTES", &c->umsync_chunk_bytes);
  count("UMAP_HANDLER_THREADS", &c->handler_threads);
  count("UMAP_WRITEBACK_THREADS", &c->writeback_threads);
  count("UMAP_IO_CHANNELS", &c->io_channels);
  count("UMAP_IO_DEPTH", &c->io_depth);
  count("UMAP_IO_TIMEOUT_MS", &c->io_timeout_ms);
  count("UMAP_IO_RETRIES", &c->io_retries);
  count("UMAP_STATS_PERIOD_MS", &c->stats_period_ms);
  bytes("UMAP_IO_MAX_BYTES", &c->io_max_bytes);
  bytes("UMAP_PREFETCH_BYTES", &c->prefetch_bytes);
  flag("UMAP_LAZY_SIZING", &c->lazy_sizing);
  flag("UMAP_DEFER_FILE_SYNC", &c->defer_file_sync);
  flag("UMAP_CHECKPOINT", &c->checkpoint_control);
  flag("UMAP_IO_DIRECT", &c->io_direct);
  if (const char* v = std::getenv("UMAP_IO_ENGINE")) {
    if (std::strcmp(v, "auto") == 0) c->io_engine = UMAP_IO_AUTO;
    else if (std::strcmp(v, "uring") == 0) c->io_engine = UMAP_IO_URING;
    else if (std::strcmp(v, "posix") == 0) c->io_engine = UMAP_IO_POSIX;
    else { UMAP_LOG(kError, "UMAP_IO_ENGINE=", v, " must be auto, uring or posix"); ok = false; }
  }
  if (const char* v = std::getenv("UMAP_FAULT_MODE")) {
    if (std::strcmp(v, "auto") == 0) c->fault_mode = UMAP_FAULT_AUTO;
    else if (std::strcmp(v, "signal") == 0) c->fault_mode = UMAP_FAULT_SIGNAL;
    else if (std::strcmp(v, "handler") == 0) c->fault_mode = UMAP_FAULT_HANDLER;
    else { UMAP_LOG(kError, "UMAP_FAULT_MODE=", v, " must be auto, signal or handler"); ok = false; }
  }
  if (const char* v = std::getenv("UMAP_JOURNAL_DIR")) c->journal_dir = *v ? v : nullptr;
  if (const char* v = std::getenv("UMAP_POLICY")) {
    if (std::strcmp(v, "atomic") == 0) c->policy = UMAP_POLICY_ATOMIC;
    else if (std::strcmp(v, "relaxed") == 0) c->policy = UMAP_POLICY_RELAXED;
    else { UMAP_LOG(kError, "UMAP_POLICY=", v, " must be atomic or relaxed"); ok = false; }
  }
  if (const char* v = std::getenv("UMAP_JOURNAL_MODE")) {
    if (std::strcmp(v, "data") == 0) c->journal_mode = UMAP_JOURNAL_DATA;
    else if (std::strcmp(v, "intent") == 0) c->journal_mode = UMAP_JOURNAL_INTENT;
    else if (std::strcmp(v, "off") == 0) c->journal_mode = UMAP_JOURNAL_OFF;
    else { UMAP_LOG(kError, "UMAP_JOURNAL_MODE=", v, " must be data, intent or off"); ok = false; }
  }
  if (const char* v = std::getenv("UMAP_COHERENCE")) {
    if (std::strcmp(v, "auto") == 0) c->coherence = UMAP_COHERENCE_AUTO;
    else if (std::strcmp(v, "read-only") == 0) c->coherence = UMAP_COHERENCE_READ_ONLY;
    else if (std::strcmp(v, "partitioned-write") == 0) c->coherence = UMAP_COHERENCE_PARTITIONED_WRITE;
    else if (std::strcmp(v, "shared-write") == 0) c->coherence = UMAP_COHERENCE_SHARED_WRITE;
    else {
      UMAP_LOG(kError, "UMAP_COHERENCE=", v,
               " must be auto, read-only, partitioned-write or shared-write");
      ok = false;
    }
  }
  if (!ok) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}
