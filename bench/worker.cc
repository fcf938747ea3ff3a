#include "bench/worker.h"

#include <bit>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/item_gen.h"

namespace umap_bench {
namespace {

// Checks the words of one read op. Accepts the original or (when writes run) the tag value.
inline bool CheckRead(const uint64_t* buf, uint64_t first_word, size_t n, ReadCheck how,
                      bool writes, uint32_t tag, size_t* bad_index) {
  auto ok = [&](size_t i) {
    const uint64_t k = first_word + i;
    return buf[i] == OriginalWord(k) || (writes && buf[i] == WrittenWord(k, tag));
  };
  if (how == ReadCheck::kAll) {
    for (size_t i = 0; i < n; ++i) {
      if (!ok(i)) {
        *bad_index = i;
        return false;
      }
    }
    return true;
  }
  if (!ok(0)) {
    *bad_index = 0;
    return false;
  }
  if (!ok(n - 1)) {
    *bad_index = n - 1;
    return false;
  }
  return true;
}

}  // namespace

void WorkerLoop(BenchBackend& backend, const Workload& w, uint64_t items, unsigned t, int repeat,
                uint32_t tag, const WorkerFlags& flags, Worker& me) {
  const size_t op = w.op_size;
  const size_t words = op / 8;
  char* buf = static_cast<char*>(std::aligned_alloc(4096, (op + 4095) / 4096 * 4096));
  if (buf == nullptr) {
    me.error = absl::ResourceExhaustedError("allocating the op buffer");
    return;
  }
  std::memset(buf, 0, op);
  ItemGen gen(w, items, t,
              w.seed * 0x9e3779b97f4a7c15ull + t * 0x632be59bd9b4e019ull + repeat * 7919 + tag);
  const bool writes = w.writes();
  if (writes) me.written.assign((items + 63) / 64, 0);
  flags.go.wait(false, std::memory_order_acquire);
  for (uint64_t i = 0; i < w.ops_per_thread; ++i) {
    if (flags.stop.load(std::memory_order_relaxed)) [[unlikely]] {
      break;
    }
    const uint64_t item = gen.Next();
    me.item_now.store(item, std::memory_order_relaxed);
    const uint64_t off = item * op;
    if (writes && gen.NextIsWrite()) {
      me.error = backend.Write(t, off, buf, op, tag);
      me.written[item >> 6] |= 1ull << (item & 63);
    } else {
      me.error = backend.Read(t, off, buf, op);
      if (me.error.ok()) {
        size_t bad = 0;
        ++me.read_checks;
        if (!CheckRead(reinterpret_cast<const uint64_t*>(buf), off / 8, words, w.read_check, writes,
                       tag, &bad)) [[unlikely]] {
          if (me.bad_reads++ == 0) {
            const uint64_t k = off / 8 + bad;
            me.first_bad = absl::StrFormat(
                "thread %u op %u: item %u, file offset %u holds 0x%016x (%g), expected "
                "0x%016x (%g)%s",
                t, i, item, k * 8, reinterpret_cast<const uint64_t*>(buf)[bad],
                std::bit_cast<double>(reinterpret_cast<const uint64_t*>(buf)[bad]), OriginalWord(k),
                std::bit_cast<double>(OriginalWord(k)),
                writes ? absl::StrFormat(" or 0x%016x", WrittenWord(k, tag)) : "");
          }
        }
      }
    }
    if (me.error.ok() && w.sync_every > 0 && (i + 1) % w.sync_every == 0 && writes) {
      me.error = backend.Sync(t);
    }
    if (!me.error.ok()) {
      me.error = absl::Status(
          me.error.code(), absl::StrCat("thread ", t, " op ", i, " (item ", item, ", file offset ",
                                        off, "): ", me.error.message()));
      break;
    }
    me.done.store(i + 1, std::memory_order_relaxed);
  }
  std::free(buf);
}

}  // namespace umap_bench
