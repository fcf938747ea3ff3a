// Journal: marking transactions applied and collecting their records, and reading
// committed transactions back (PendingLsns, ReadTransaction, ReadImage, stats).
#include "journal/journal.h"

#include <malloc.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "base/coding.h"
#include "base/crash_point.h"
#include "base/crc32c.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/private_dir.h"
#include "base/status_macros.h"
#include "journal/fenced_fs.h"
#include "journal/integrity.h"
#include "journal/lock_holder.h"
#include "journal/pending_reader.h"
#include "journal/private_fs.h"
#include "journal/rocksdb_status.h"
#include "journal/table_options.h"
#include "journal/wal_damage.h"
#include "journal/wal_zero_fill.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/iterator.h"
#include "rocksdb/listener.h"
#include "rocksdb/options.h"
#include "rocksdb/snapshot.h"
#include "rocksdb/statistics.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

#include "journal/journal_records.h"

namespace umap::journal {

// ---- apply and GC ------------------------------------------------------------------------

absl::Status Journal::MarkApplied(uint64_t lsn) { return MarkApplied(absl::MakeConstSpan(&lsn, 1)); }

absl::Status Journal::MarkApplied(absl::Span<const uint64_t> lsns) {
  absl::MutexLock w(&watermark_mu_);
  std::vector<std::pair<uint64_t, PendingTxn>> doomed;
  Watermark watermark;
  {
    absl::MutexLock l(&mu_);
    RETURN_IF_ERROR(WritableLocked());
    for (uint64_t lsn : lsns) {
      if (!pending_.contains(lsn)) {
        return absl::NotFoundError(
            absl::StrCat("transaction ", lsn, " is not pending in journal ", dir_));
      }
    }
    for (uint64_t lsn : lsns) {
      PendingTxn& t = pending_[lsn];
      if (!t.applied) {
        t.applied = true;
        --unapplied_;
      }
    }
    doomed = TakeDeletableLocked();
    if (doomed.empty()) return absl::OkStatus();
    watermark = Watermark{last_lsn_, last_mapping_id_};
  }
  // Killed here, the records stay in the journal although they were chosen for deletion:
  // the next open finds them pending again and a replay rewrites images already in the file.
  UMAP_CRASH_POINT("gc.before_delete");
  rocksdb::WriteBatch batch;
  for (const auto& [lsn, t] : doomed) {
    batch.Delete(ToSlice(TxnHeaderKey(lsn)));
    if (t.contents != Contents::kData) continue;
    if (t.blocks.size() >= kRangeDeleteBlocks) {
      // Every payload key of `lsn` lies in [P|lsn|0, P|lsn+1|0): one range tombstone
      // instead of one point tombstone per block (a 4 GiB transaction has a million).
      DeletePayloads(&batch, lsn);
    } else {
      for (uint64_t b : t.blocks) batch.Delete(ToSlice(TxnPayloadKey(lsn, b)));
    }
  }
  // With the deletions, in the same batch: the LSNs they free are never handed out again.
  batch.Put(ToSlice(WatermarkKey()), ToSlice(EncodeWatermark(watermark)));
  // No sync: if the deletions are lost, recovery re-applies images that are already there.
  return WriteAndSettle(&batch, /*sync=*/false, "delete applied transactions", nullptr, [] {});
}

absl::Status Journal::Sync() {
  {
    absl::MutexLock l(&mu_);
    RETURN_IF_ERROR(WritableLocked());
  }
  absl::Status s = FromRocksDb(db_->SyncWAL(), absl::StrCat("sync of journal ", dir_));
  if (!s.ok()) {
    absl::MutexLock l(&mu_);
    PoisonLocked(s);
  }
  return s;
}

std::vector<std::pair<uint64_t, Journal::PendingTxn>> Journal::TakeDeletableLocked() {
  // Walk in LSN order. A transaction must stay while it is unapplied, or while an older
  // transaction that stays shares a block *of the same file* with it: deleting it would let
  // a replay of the older one roll that block back. Blocks are keyed by the file (device,
  // inode), not by the mapping: a later run registers the same file as a new mapping, and its
  // newer transactions must not be deleted while an older run's are still pending.
  using FileBlock = std::tuple<uint64_t, uint64_t, uint64_t>;  // device, inode, block
  auto key = [&](uint64_t mapping_id, uint64_t block) {
    auto m = mappings_.find(mapping_id);
    if (m == mappings_.end()) return FileBlock{~0ull, mapping_id, block};
    return FileBlock{m->second.file.device, m->second.file.inode, block};
  };
  std::vector<std::pair<uint64_t, PendingTxn>> out;
  absl::flat_hash_set<FileBlock> kept_blocks;
  // Past the newest applied transaction nothing can be deleted: the walk stops there, so
  // marking a prefix of a long backlog (recovery's checkpoints) does not hash the blocks of
  // everything after it.
  uint64_t applied_ahead = pending_.size() - unapplied_;
  for (auto it = pending_.begin(); it != pending_.end() && applied_ahead > 0;) {
    const PendingTxn& t = it->second;
    if (t.applied) --applied_ahead;
    bool keep = !t.applied || std::any_of(t.blocks.begin(), t.blocks.end(), [&](uint64_t b) {
      return kept_blocks.contains(key(t.mapping_id, b));
    });
    if (keep) {
      for (uint64_t b : t.blocks) kept_blocks.insert(key(t.mapping_id, b));
      ++it;
    } else {
      out.emplace_back(it->first, std::move(it->second));
      it = pending_.erase(it);
    }
  }
  return out;
}

// ---- reading committed transactions ------------------------------------------------------

std::vector<uint64_t> Journal::PendingLsns() const {
  absl::MutexLock l(&mu_);
  std::vector<uint64_t> out;
  out.reserve(pending_.size());
  for (const auto& [lsn, t] : pending_) out.push_back(lsn);
  return out;
}

std::unique_ptr<PendingReader> Journal::NewPendingReader(const PendingReaderOptions& options) {
  return std::unique_ptr<PendingReader>(new PendingReader(db_, dir_, options));
}

absl::StatusOr<Transaction> Journal::ReadTransaction(uint64_t lsn, Images images) {
  // One snapshot: header and payloads were written, and are deleted, in one batch. The
  // payloads are one short iterator pass, not a lookup per block.
  PendingReaderOptions options;
  options.readahead_bytes = 0;  // RocksDB's own, growing read-ahead suits a short pass
  PendingReader reader(db_, dir_, options);
  ASSIGN_OR_RETURN(TxnHeader header, reader.ReadHeader(lsn));
  Transaction txn;
  txn.lsn = lsn;
  txn.mapping_id = header.mapping_id;
  txn.contents = header.contents;
  txn.images_in_journal =
      images == Images::kLeaveInJournal && header.contents == Contents::kData;
  txn.blocks.reserve(header.blocks.size());
  for (const TxnBlock& b : header.blocks) {
    CommittedBlock cb;
    cb.block = b.block;
    cb.length = b.length;
    cb.crc = b.crc;
    if (header.contents == Contents::kData && !txn.images_in_journal) {
      ASSIGN_OR_RETURN(absl::string_view image, reader.ReadImage(lsn, b));
      cb.data.assign(image.data(), image.size());
    }
    txn.blocks.push_back(std::move(cb));
  }
  return txn;
}

absl::Status Journal::ReadImage(uint64_t lsn, const CommittedBlock& entry, absl::Span<char> dst) {
  const std::string key = TxnPayloadKey(lsn, entry.block);
  rocksdb::PinnableSlice value;
  rocksdb::Status rs =
      db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), ToSlice(key), &value);
  if (rs.IsNotFound()) {
    return absl::NotFoundError(absl::StrCat("journal ", dir_, ": transaction ", lsn,
                                            " has no image of block ", entry.block));
  }
  RETURN_IF_ERROR(FromRocksDb(rs, absl::StrCat("read image in journal ", dir_)));
  ASSIGN_OR_RETURN(TxnPayload p, DecodeTxnPayload(key, ToView(value)));
  if (p.crc != entry.crc || p.data.size() != entry.length) {
    return absl::DataLossError(absl::StrCat(
        "journal ", dir_, ": image of block ", entry.block, " of transaction ", lsn, " has ",
        p.data.size(), " bytes, crc ", p.crc, "; its transaction lists ", entry.length,
        " bytes, crc ", entry.crc));
  }
  std::memcpy(dst.data(), p.data.data(), std::min(p.data.size(), dst.size()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Transaction>> Journal::PendingTransactions() {
  std::vector<Transaction> out;
  for (uint64_t lsn : PendingLsns()) {
    absl::StatusOr<Transaction> txn = ReadTransaction(lsn);
    if (absl::IsNotFound(txn.status())) continue;  // applied and deleted meanwhile
    if (!txn.ok()) return txn.status();
    out.push_back(*std::move(txn));
  }
  return out;
}

Journal::Stats Journal::stats() const {
  Stats st;
  {
    absl::MutexLock l(&mu_);
    st.commits = commits_;
    st.bytes_written = bytes_written_;
    st.staged_bytes = staged_bytes_;
    st.staged_blocks = staged_.size();
    st.pending_txns = pending_.size();
    st.unapplied_txns = unapplied_;
    st.mappings = mappings_.size();
    st.last_lsn = last_lsn_;
    st.last_mapping_id = last_mapping_id_;
  }
  st.wal_syncs = statistics_->getTickerCount(rocksdb::WAL_FILE_SYNCED);
  st.write_groups = statistics_->getTickerCount(rocksdb::WRITE_DONE_BY_SELF);
  return st;
}

}  // namespace umap::journal
