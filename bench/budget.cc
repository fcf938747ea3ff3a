#include "bench/budget.h"

#include "absl/strings/str_cat.h"
#include "bench/human.h"

namespace umap_bench {

CacheFit FitCacheToBudget(uint64_t budget, const umap_config& cfg, unsigned writer_threads) {
  CacheFit f;
  f.io_buffer_bytes =
      (uint64_t{cfg.handler_threads} * cfg.io_depth + cfg.io_channels) * cfg.io_max_bytes;
  f.writer_bytes = kWriterReservePerThread * writer_threads;
  f.margin_bytes = budget / 8;
  const uint64_t rest = f.io_buffer_bytes + kProcessReserve + f.writer_bytes + f.margin_bytes;
  const uint64_t block = cfg.block_size ? cfg.block_size : 4096;
  f.cache_bytes = budget > rest ? (budget - rest) / block * block : 0;
  f.how = absl::StrCat(HumanBytes(budget), " budget - ", HumanBytes(f.io_buffer_bytes),
                       " I/O buffers - ", HumanBytes(kProcessReserve), " process - ");
  if (writer_threads > 0) {
    absl::StrAppend(&f.how, HumanBytes(f.writer_bytes), " for ", writer_threads,
                    " writing threads - ");
  }
  absl::StrAppend(&f.how, HumanBytes(f.margin_bytes), " margin");
  return f;
}

}  // namespace umap_bench
