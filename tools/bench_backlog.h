// The backlogs umap-recover-bench replays: a file at its initial content and a journal of
// committed, never applied data-mode transactions that rewrite every block once, and the
// check that a replay left every block at its committed image.
#ifndef UMAP_TOOLS_BENCH_BACKLOG_H_
#define UMAP_TOOLS_BENCH_BACKLOG_H_

#include <cstdint>
#include <string>
#include <vector>

namespace umap::tools {

struct BacklogSpec {
  std::string file;
  std::string journal_dir;
  uint64_t size = 0;        // of the file; a multiple of block_size
  uint64_t block_size = 4096;
  uint64_t txn_bytes = 256 << 10;  // transaction n (from 1) rewrites blocks of bytes
                                   // [(n-1) * txn_bytes, n * txn_bytes)
};

// Writes the file at its initial content and fsyncs it. Each returns false after printing
// what failed.
bool MakeFile(const BacklogSpec& spec);
// Commits the transactions with the Journal API and closes the journal: what a process
// killed right after its commits leaves (once RocksDB has flushed them).
bool BuildBacklog(const BacklogSpec& spec);
// One transaction of the whole file (spec.txn_bytes == spec.size). Its records are exactly
// those Journal::Commit writes, but written in chunks: one WriteBatch of several GiB needs
// three copies of the images in memory to build. Recovery cannot tell the difference once
// RocksDB has flushed them; a crash right after a real commit of that size would leave
// them in the WAL, which RocksDB's own recovery reads into memory whole at open.
bool BuildOneTransaction(const BacklogSpec& spec);
// Every block holds the image of the transaction that rewrote it.
bool CheckFile(const BacklogSpec& spec);
// fdatasync, then posix_fadvise(DONTNEED) of these files (directories: every file below),
// so that the replay reads them from the disk; nobody else's pages are touched.
bool EvictFromPageCache(const std::vector<std::string>& paths);

}  // namespace umap::tools

#endif  // UMAP_TOOLS_BENCH_BACKLOG_H_
