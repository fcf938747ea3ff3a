#include "tools/bench_backlog.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "base/crc32c.h"
#include "journal/format.h"
#include "journal/journal.h"
#include "journal/table_options.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
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

uint64_t BlocksPerTxn(const BacklogSpec& s) {
  return std::max<uint64_t>(1, s.txn_bytes / s.block_size);
}

double Secs(uint64_t us) { return us / 1e6; }

// Opens the journal, registers the file; nullptr (after printing why) on failure.
std::unique_ptr<journal::Journal> OpenAndRegister(const BacklogSpec& spec, uint64_t* mapping) {
  journal::JournalOptions jo;
  jo.dir = spec.journal_dir;
  auto j = journal::Journal::Open(jo);
  if (!j.ok()) {
    std::fprintf(stderr, "%s\n", j.status().ToString().c_str());
    return nullptr;
  }
  auto id = Env::Default()->IdentifyPath(spec.file);
  if (!id.ok()) {
    std::fprintf(stderr, "%s\n", id.status().ToString().c_str());
    return nullptr;
  }
  auto m = (*j)->RegisterMapping(*id, static_cast<uint32_t>(spec.block_size),
                                 journal::Policy::kAtomic, journal::Contents::kData);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    return nullptr;
  }
  *mapping = *m;
  return *std::move(j);
}

}  // namespace

bool MakeFile(const BacklogSpec& spec) {
  const int fd = ::open(spec.file.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror(("open " + spec.file).c_str());
    return false;
  }
  std::string chunk(8 << 20, '\0');
  bool ok = true;
  for (uint64_t off = 0; off < spec.size && ok; off += chunk.size()) {
    const size_t n = std::min<uint64_t>(chunk.size(), spec.size - off);
    for (size_t b = 0; b < n; b += spec.block_size) {
      Fill(0, (off + b) / spec.block_size, &chunk[b], spec.block_size);
    }
    ok = ::pwrite(fd, chunk.data(), n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  if (!ok) std::perror(("write " + spec.file).c_str());
  ::close(fd);
  return ok;
}

bool BuildBacklog(const BacklogSpec& spec) {
  uint64_t mapping = 0;
  std::unique_ptr<journal::Journal> j = OpenAndRegister(spec, &mapping);
  if (j == nullptr) return false;
  Env* env = Env::Default();
  const uint64_t t0 = env->NowMicros();
  const uint64_t per_txn = BlocksPerTxn(spec), nblocks = spec.size / spec.block_size;
  std::string buf(per_txn * spec.block_size, '\0');
  uint64_t txns = 0;
  for (uint64_t first = 0; first < nblocks; first += per_txn) {
    const uint64_t n = std::min(per_txn, nblocks - first);
    std::vector<journal::BlockWrite> writes;
    for (uint64_t k = 0; k < n; ++k) {
      char* p = buf.data() + k * spec.block_size;
      Fill(txns + 1, first + k, p, spec.block_size);
      writes.push_back({first + k, absl::string_view(p, spec.block_size)});
    }
    auto t = j->Commit(mapping, writes, 0, 0);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
      return false;
    }
    ++txns;
  }
  const uint64_t us = env->NowMicros() - t0;
  std::printf("backlog: %llu transactions committed in %.2f s (%.0f MiB/s)\n",
              static_cast<unsigned long long>(txns), Secs(us),
              us == 0 ? 0.0 : spec.size / 1048576.0 / Secs(us));
  return true;  // the journal closes here: like a process killed after its commits
}

bool BuildOneTransaction(const BacklogSpec& spec) {
  {
    uint64_t mapping = 0;
    std::unique_ptr<journal::Journal> j = OpenAndRegister(spec, &mapping);
    if (j == nullptr) return false;
    if (mapping != 1) return false;
  }
  // The journal is fresh: its first transaction is LSN 1, of mapping 1.
  constexpr uint64_t kLsn = 1;
  rocksdb::DB* raw = nullptr;
  // The journal's own table layout: uncompressed, its table options.
  rocksdb::Options o;
  o.compression = rocksdb::kNoCompression;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(journal::JournalTableOptions()));
  rocksdb::Status s = rocksdb::DB::Open(o, spec.journal_dir, &raw);
  if (!s.ok()) {
    std::fprintf(stderr, "open %s: %s\n", spec.journal_dir.c_str(), s.ToString().c_str());
    return false;
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  Env* env = Env::Default();
  const uint64_t t0 = env->NowMicros();
  journal::TxnHeader header;
  header.lsn = kLsn;
  header.mapping_id = 1;
  const uint64_t nblocks = spec.size / spec.block_size;
  std::string image(spec.block_size, '\0');
  rocksdb::WriteBatch batch;
  for (uint64_t b = 0; b < nblocks && s.ok(); ++b) {
    Fill(kLsn, b, image.data(), image.size());
    header.blocks.push_back({b, static_cast<uint32_t>(image.size()),
                             crc32c::Value(image.data(), image.size())});
    batch.Put(journal::TxnPayloadKey(kLsn, b), journal::EncodeTxnPayload(image));
    if (batch.GetDataSize() >= (32u << 20) || b + 1 == nblocks) {
      s = db->Write(rocksdb::WriteOptions(), &batch);
      batch.Clear();
    }
  }
  // The header last: with it, the transaction is committed.
  rocksdb::WriteOptions sync;
  sync.sync = true;
  if (s.ok()) {
    s = db->Put(sync, journal::TxnHeaderKey(kLsn), journal::EncodeTxnHeader(header));
  }
  if (s.ok()) s = db->Flush(rocksdb::FlushOptions());
  if (!s.ok()) {
    std::fprintf(stderr, "write %s: %s\n", spec.journal_dir.c_str(), s.ToString().c_str());
    return false;
  }
  std::printf("backlog: one transaction of %llu blocks written in %.2f s\n",
              static_cast<unsigned long long>(nblocks), Secs(env->NowMicros() - t0));
  return true;
}

bool CheckFile(const BacklogSpec& spec) {
  const int fd = ::open(spec.file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::perror(("open " + spec.file).c_str());
    return false;
  }
  const uint64_t per_txn = BlocksPerTxn(spec), nblocks = spec.size / spec.block_size;
  std::string got(8 << 20, '\0'), want(spec.block_size, '\0');
  const uint64_t chunk_blocks = got.size() / spec.block_size;
  bool ok = true;
  for (uint64_t first = 0; first < nblocks && ok; first += chunk_blocks) {
    const uint64_t n = std::min(chunk_blocks, nblocks - first);
    const size_t bytes = n * spec.block_size;
    ok = ::pread(fd, got.data(), bytes, static_cast<off_t>(first * spec.block_size)) ==
         static_cast<ssize_t>(bytes);
    for (uint64_t k = 0; k < n && ok; ++k) {
      const uint64_t b = first + k;
      Fill(b / per_txn + 1, b, want.data(), want.size());
      if (std::memcmp(got.data() + k * spec.block_size, want.data(), want.size()) != 0) {
        std::fprintf(stderr, "block %llu differs after replay\n",
                     static_cast<unsigned long long>(b));
        ok = false;
      }
    }
  }
  ::close(fd);
  return ok;
}

bool EvictFromPageCache(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      files.push_back(p);
    }
  }
  for (const std::string& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // a file RocksDB removed meanwhile
    const bool ok = ::fdatasync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
    ::close(fd);
    if (!ok) {
      std::perror(("evict " + f).c_str());
      return false;
    }
  }
  return true;
}

}  // namespace umap::tools
