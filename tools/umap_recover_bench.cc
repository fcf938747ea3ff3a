// umap-recover-bench: recovery throughput. Builds a backlog of committed, never applied
// data-mode transactions (as a process killed right after its commits leaves), then replays
// it with recovery::Recover (the code umap-recover runs) and reports the time and MiB/s.
// Usage and measured numbers: docs/recovery.md.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "journal/journal.h"
#include "recovery/recovery.h"
#include "tools/render.h"
#include "umap/env.h"

namespace umap::tools {
namespace {

// The bytes of `block` as written by transaction `lsn` (lsn 0: the file's initial bytes).
void Fill(uint64_t lsn, uint64_t block, char* dst, size_t n) {
  uint64_t x = (lsn * 0x9E3779B97F4A7C15ull) ^ (block * 0xC2B2AE3D27D4EB4Full) ^ 1;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(dst + i, &x, 8);
  }
}

double Secs(uint64_t us) { return us / 1e6; }
double MiBps(uint64_t bytes, uint64_t us) { return us == 0 ? 0 : (bytes / 1048576.0) / Secs(us); }

int Main(int argc, char** argv) {
  CLI::App app{"umap-recover-bench: time to replay a committed journal backlog",
               "umap-recover-bench"};
  std::string dir;
  uint64_t size_mib = 1024, txn_kib = 256, block_size = 4096, checkpoint_mib = 256;
  uint64_t scan_threads = 2, scan_cache_mib = 256;
  bool keep = false, drop_caches = false, verify_after = false;
  app.add_option("--dir", dir, "Where to create the file and the journal (default $TMPDIR or "
                               "/var/tmp); the file is written here, so put it on the disk or "
                               "DFS to measure");
  app.add_option("--size-mib", size_mib, "Backlog size (= file size) in MiB")->capture_default_str();
  app.add_option("--txn-kib", txn_kib, "Bytes per transaction in KiB")->capture_default_str();
  app.add_option("--block-size", block_size, "Block size in bytes")->capture_default_str();
  app.add_option("--checkpoint-mib", checkpoint_mib, "Recovery checkpoint interval")
      ->capture_default_str();
  app.add_option("--scan-threads", scan_threads, "Threads reading the backlog")
      ->capture_default_str();
  app.add_option("--scan-cache-mib", scan_cache_mib, "Images kept from the scan for the replay")
      ->capture_default_str();
  app.add_flag("--verify-after", verify_after, "Recovery reads every written block back");
  app.add_flag("--drop-caches", drop_caches,
               "echo 3 > /proc/sys/vm/drop_caches before the replay (root; cold journal)");
  app.add_flag("--keep", keep, "Keep the directory");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  if (dir.empty()) {
    const char* t = std::getenv("TMPDIR");
    dir = t != nullptr ? t : "/var/tmp";
  }
  std::string tmpl = dir + "/umap-recover-bench-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string root = tmpl, file_path = root + "/data", journal_dir = root + "/journal";
  const uint64_t size = size_mib << 20;
  const uint64_t blocks_per_txn = std::max<uint64_t>(1, (txn_kib << 10) / block_size);
  const uint64_t nblocks = size / block_size;
  Env* env = Env::Default();
  int rc = 0;
  {
    // The file, at its initial content, durable.
    const uint64_t t0 = env->NowMicros();
    int fd = ::open(file_path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    std::vector<char> chunk(8 << 20);
    for (uint64_t off = 0; off < size; off += chunk.size()) {
      const size_t n = std::min<uint64_t>(chunk.size(), size - off);
      for (size_t b = 0; b < n; b += block_size) Fill(0, (off + b) / block_size, &chunk[b], block_size);
      if (::pwrite(fd, chunk.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
        std::perror("pwrite");
        return 1;
      }
    }
    ::fsync(fd);
    ::close(fd);
    std::printf("file:    %s, %s written in %.2f s\n", file_path.c_str(), HumanBytes(size).c_str(),
                Secs(env->NowMicros() - t0));
  }
  {
    // The backlog: every block rewritten once, committed, never applied.
    journal::JournalOptions jo;
    jo.dir = journal_dir;
    auto j = journal::Journal::Open(jo);
    if (!j.ok()) {
      std::fprintf(stderr, "%s\n", j.status().ToString().c_str());
      return 1;
    }
    auto id = env->IdentifyPath(file_path);
    auto m = (*j)->RegisterMapping(*id, static_cast<uint32_t>(block_size), journal::Policy::kAtomic,
                                   journal::Contents::kData);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
      return 1;
    }
    const uint64_t t0 = env->NowMicros();
    std::string buf(blocks_per_txn * block_size, '\0');
    uint64_t txns = 0;
    for (uint64_t first = 0; first < nblocks; first += blocks_per_txn) {
      const uint64_t n = std::min(blocks_per_txn, nblocks - first);
      std::vector<journal::BlockWrite> writes;
      for (uint64_t k = 0; k < n; ++k) {
        char* p = buf.data() + k * block_size;
        Fill(txns + 1, first + k, p, block_size);
        writes.push_back({first + k, absl::string_view(p, block_size)});
      }
      auto t = (*j)->Commit(*m, writes, 0, 0);
      if (!t.ok()) {
        std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
        return 1;
      }
      ++txns;
    }
    const uint64_t us = env->NowMicros() - t0;
    std::printf("backlog: %llu transactions of %s committed in %.2f s (%.0f MiB/s)\n",
                static_cast<unsigned long long>(txns),
                HumanBytes(blocks_per_txn * block_size).c_str(), Secs(us), MiBps(size, us));
  }  // closed: like a process killed after its commits
  if (drop_caches) {
    ::sync();
    FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
    if (f != nullptr) {
      std::fputs("3\n", f);
      std::fclose(f);
    } else {
      std::printf("(cannot drop caches: not root?)\n");
    }
  }
  recovery::RecoverOptions o;
  o.journal_dir = journal_dir;
  o.checkpoint_bytes = checkpoint_mib << 20;
  o.verify_after_replay = verify_after;
  o.scan_threads = scan_threads;
  o.scan_cache_bytes = scan_cache_mib << 20;
  const uint64_t t0 = env->NowMicros();
  absl::StatusOr<recovery::Report> report = recovery::Recover(o);
  const uint64_t us = env->NowMicros() - t0;
  if (!report.ok()) {
    std::fprintf(stderr, "recover: %s\n", report.status().ToString().c_str());
    return 1;
  }
  uint64_t written = 0, txns = 0;
  for (const auto& m : report->mappings) {
    written += m.bytes_written;
    txns += m.txns_replayed;
  }
  std::printf("replay:  %llu transactions, %s written+synced+marked in %.2f s: %.0f MiB/s "
              "(exit code %d)\n",
              static_cast<unsigned long long>(txns), HumanBytes(written).c_str(), Secs(us),
              MiBps(written, us), static_cast<int>(recovery::ExitCodeOf(*report)));
  const recovery::Report::Timings& tm = report->timings;
  std::printf("phases:  open %.2f s, scan (read + CRC-check the backlog) %.2f s, read again "
              "%.2f s, write %.2f s, fdatasync %.2f s, mark applied %.2f s, close %.2f s\n",
              Secs(tm.open), Secs(tm.scan), Secs(tm.read), Secs(tm.write), Secs(tm.sync),
              Secs(tm.mark), Secs(tm.close));
  {
    // Every block must now hold its committed image.
    int fd = ::open(file_path.c_str(), O_RDONLY);
    std::vector<char> got(block_size), want(block_size);
    for (uint64_t b = 0; b < nblocks; ++b) {
      if (::pread(fd, got.data(), block_size, static_cast<off_t>(b * block_size)) !=
          static_cast<ssize_t>(block_size)) {
        rc = 1;
        break;
      }
      Fill(b / blocks_per_txn + 1, b, want.data(), block_size);
      if (got != want) {
        std::fprintf(stderr, "block %llu differs after replay\n", static_cast<unsigned long long>(b));
        rc = 1;
        break;
      }
    }
    ::close(fd);
    std::printf("check:   %s\n", rc == 0 ? "every block holds its committed image" : "FAILED");
  }
  if (!keep) std::filesystem::remove_all(root);
  return rc;
}

}  // namespace
}  // namespace umap::tools

int main(int argc, char** argv) { return umap::tools::Main(argc, argv); }
