// Journal: staging dirty blocks and committing transactions (Stage, Commit and its
// streamed form for transactions larger than a batch, the commit mark).
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

// ---- staging -----------------------------------------------------------------------------

absl::Status Journal::Stage(uint64_t mapping_id, uint64_t block, absl::string_view data) {
  Claim claim;
  claim.mapping_id = mapping_id;
  claim.blocks = {block};
  const StagedId id(mapping_id, block);
  {
    absl::MutexLock l(&mu_);
    AcquireLocked(&claim);
    absl::Status s = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      RETURN_IF_ERROR(WritableLocked());
      ASSIGN_OR_RETURN(const MappingInfo* m, FindMappingLocked(mapping_id));
      if (m->policy != Policy::kAtomic) {
        return absl::InvalidArgumentError(
            absl::StrCat("mapping ", mapping_id, " is relaxed: only atomic mappings stage"));
      }
      if (data.empty() || data.size() > m->block_size) {
        return absl::InvalidArgumentError(absl::StrCat("staged image of ", data.size(),
                                                       " bytes for block size ",
                                                       m->block_size));
      }
      auto old = staged_.find(id);
      const uint64_t old_size = old == staged_.end() ? 0 : old->second;
      if (staged_bytes_ - old_size + data.size() > staged_quota_) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "journal ", dir_, ": staging block ", block, " of mapping ", mapping_id,
            " would exceed the staged quota of ", staged_quota_, " bytes (", staged_bytes_,
            " staged); sync more often, raise the quota, or use the relaxed policy"));
      }
      // Counted now: the claim keeps every other call off this block until the write ends.
      staged_bytes_ = staged_bytes_ - old_size + data.size();
      staged_[id] = data.size();
      return absl::OkStatus();
    }();
    if (!s.ok()) {
      ReleaseLocked(&claim);
      return s;
    }
  }
  rocksdb::WriteBatch batch;
  batch.Put(ToSlice(StagedKey(mapping_id, block)), ToSlice(EncodeStaged(data)));
  // No sync: a staged image is worthless after a crash (Open discards it).
  return WriteAndSettle(&batch, /*sync=*/false, "stage block", &claim, [] {});
}

absl::StatusOr<std::optional<std::string>> Journal::ReadStaged(uint64_t mapping_id,
                                                               uint64_t block) {
  const std::string key = StagedKey(mapping_id, block);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), ToSlice(key), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  RETURN_IF_ERROR(FromRocksDb(s, absl::StrCat("read staged block in journal ", dir_)));
  ASSIGN_OR_RETURN(StagedBlock staged, DecodeStaged(key, value));
  return std::optional<std::string>(std::string(staged.data));
}

absl::StatusOr<StagedBlock> Journal::ReadStagedRecord(uint64_t mapping_id, uint64_t block,
                                                      std::string* value) {
  const std::string key = StagedKey(mapping_id, block);
  rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), ToSlice(key), value);
  if (rs.IsNotFound()) {
    return StagedVanished(dir_, mapping_id, block);
  }
  RETURN_IF_ERROR(FromRocksDb(rs, absl::StrCat("read staged block in journal ", dir_)));
  return DecodeStaged(key, *value);
}

// ---- commit ------------------------------------------------------------------------------

absl::StatusOr<Transaction> Journal::Commit(uint64_t mapping_id,
                                            absl::Span<const BlockWrite> blocks,
                                            uint64_t first_block, uint64_t end_block,
                                            ImageCopies copies) {
  if (first_block > end_block) {
    return absl::InvalidArgumentError(
        absl::StrCat("commit range [", first_block, ", ", end_block, ") is inverted"));
  }
  // Only the owner commits: a former owner cut off from a shared journal and back again
  // must not add to what the new owner replays. A check younger than the fence's window
  // stands (on a shared file system a check is three round trips, as long as a small
  // commit): a takeover waits for the file system to drop this process's lock, which takes
  // seconds, and FencedFs checks each of RocksDB's writes the same way.
  RETURN_IF_ERROR(CheckOwnerFresh());
  std::vector<const BlockWrite*> given;
  given.reserve(blocks.size());
  for (const BlockWrite& b : blocks) given.push_back(&b);
  std::sort(given.begin(), given.end(),
            [](const BlockWrite* a, const BlockWrite* b) { return a->block < b->block; });
  Claim claim;
  claim.mapping_id = mapping_id;
  claim.first = first_block;
  claim.end = end_block;
  for (const BlockWrite* b : given) {
    if (!claim.blocks.empty() && claim.blocks.back() == b->block) {
      return absl::InvalidArgumentError(absl::StrCat("block ", b->block, " listed twice"));
    }
    claim.blocks.push_back(b->block);
  }

  Transaction txn;
  txn.mapping_id = mapping_id;
  std::vector<uint64_t> staged_to_take;    // staged in range, not given: their images commit
  std::vector<uint64_t> staged_to_delete;  // every staged block this commit supersedes
  uint64_t image_bytes = 0;                // of the whole transaction
  {
    absl::MutexLock l(&mu_);
    AcquireLocked(&claim);
    absl::Status s = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      RETURN_IF_ERROR(WritableLocked());
      ASSIGN_OR_RETURN(const MappingInfo* m, FindMappingLocked(mapping_id));
      txn.contents = m->contents;
      for (const BlockWrite* b : given) {
        if (b->data.empty() || b->data.size() > m->block_size) {
          return absl::InvalidArgumentError(absl::StrCat("image of block ", b->block, " has ",
                                                         b->data.size(), " bytes; block size ",
                                                         m->block_size));
        }
        image_bytes += b->data.size();
        if (!claim.InRange(b->block) && staged_.contains({mapping_id, b->block})) {
          staged_to_delete.push_back(b->block);
        }
      }
      for (auto it = staged_.lower_bound({mapping_id, first_block});
           it != staged_.end() && it->first.first == mapping_id && it->first.second < end_block;
           ++it) {
        const uint64_t b = it->first.second;
        staged_to_delete.push_back(b);
        if (!std::binary_search(claim.blocks.begin(), claim.blocks.end(), b)) {
          staged_to_take.push_back(b);
          image_bytes += it->second;
        }
      }
      if (given.empty() && staged_to_take.empty()) return absl::OkStatus();  // nothing to do
      txn.lsn = ++last_lsn_;
      return absl::OkStatus();
    }();
    if (!s.ok() || txn.lsn == kNoLsn) {
      ReleaseLocked(&claim);
      if (!s.ok()) return s;
      return txn;
    }
  }
  // What ends the commit, in the batch that is written with sync: the header (its presence
  // is the commit) and the deletion of the staged records it supersedes.
  auto put_tail = [&](rocksdb::WriteBatch* batch) {
    TxnHeader header;
    header.lsn = txn.lsn;
    header.mapping_id = mapping_id;
    header.contents = txn.contents;
    header.blocks.reserve(txn.blocks.size());
    for (const CommittedBlock& cb : txn.blocks) {
      header.blocks.push_back({cb.block, cb.length, cb.crc});
    }
    batch->Put(ToSlice(TxnHeaderKey(txn.lsn)), ToSlice(EncodeTxnHeader(header)));
    for (uint64_t b : staged_to_delete) batch->Delete(ToSlice(StagedKey(mapping_id, b)));
  };
  auto settle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (uint64_t b : staged_to_delete) {
      auto it = staged_.find({mapping_id, b});
      staged_bytes_ -= it->second;
      staged_.erase(it);
    }
    PendingTxn& p = pending_[txn.lsn];
    p.mapping_id = mapping_id;
    p.contents = txn.contents;
    p.blocks.reserve(txn.blocks.size());
    for (const CommittedBlock& cb : txn.blocks) p.blocks.push_back(cb.block);
    ++unapplied_;
    ++commits_;
  };
  if (txn.contents == Contents::kData && commit_batch_bytes_ != 0 &&
      image_bytes > commit_batch_bytes_) {
    RETURN_IF_ERROR(CommitStreamed(&txn, given, staged_to_take, put_tail, &claim, settle));
    return txn;
  }
  absl::Cleanup release = [this, &claim] {
    absl::MutexLock l(&mu_);
    ReleaseLocked(&claim);
  };

  // Merge the given images and the staged ones we take, in block order.
  std::vector<CommittedBlock>& out = txn.blocks;
  out.reserve(given.size() + staged_to_take.size());
  // The image of out[i]: the caller's for a given block (copied into out[i] or not), the
  // staged one in out[i].data (filled in after the merge: a move may relocate short ones).
  std::vector<absl::string_view> images;
  images.reserve(given.size() + staged_to_take.size());
  std::string value;
  RETURN_IF_ERROR(ForEachInBlockOrder(
      given, staged_to_take,
      [&](const BlockWrite& b) {
        out.push_back(EntryOf(b));
        if (copies == ImageCopies::kCopy) out.back().data.assign(b.data.data(), b.data.size());
        images.push_back(b.data);
        return absl::OkStatus();
      },
      [&](uint64_t block) -> absl::Status {
        ASSIGN_OR_RETURN(StagedBlock staged, ReadStagedRecord(mapping_id, block, &value));
        CommittedBlock cb;
        cb.block = block;
        cb.data.assign(staged.data.data(), staged.data.size());
        cb.crc = staged.crc;
        cb.length = static_cast<uint32_t>(cb.data.size());
        out.push_back(std::move(cb));
        images.push_back({});
        return absl::OkStatus();
      }));
  for (size_t i = 0; i < out.size(); ++i) {
    if (images[i].data() == nullptr) images[i] = out[i].data;
  }

  // At least (about) its final size, reused from an earlier commit when one is kept
  // (TakeBatch): a batch grown by doubling discards buffers of up to half its size, and
  // glibc keeps freed blocks in the committing thread's arena.
  size_t reserve = 64 + 17 * out.size() + 48 * staged_to_delete.size();
  if (txn.contents == Contents::kData) {
    for (const CommittedBlock& cb : out) reserve += 64 + cb.length;  // key, image header
  }
  std::unique_ptr<rocksdb::WriteBatch> pooled = TakeBatch(reserve);
  absl::Cleanup give_back = [&] { ReturnBatch(std::move(pooled)); };
  rocksdb::WriteBatch& batch = *pooled;
  if (txn.contents == Contents::kData) {
    for (size_t i = 0; i < out.size(); ++i) PutPayload(&batch, txn.lsn, out[i], images[i]);
  }
  put_tail(&batch);
  // The commit point: header, payloads and staged deletions reach the WAL as one record.
  std::move(release).Cancel();  // WriteAndSettle releases the claim
  RETURN_IF_ERROR(WriteAndSettle(&batch, /*sync=*/true,
                                 absl::StrCat("commit transaction ", txn.lsn), &claim, settle));
  RETURN_IF_ERROR(PublishCommit(batch, txn.lsn));
  return txn;
}

absl::Status Journal::CommitStreamed(Transaction* txn, absl::Span<const BlockWrite* const> given,
                                     absl::Span<const uint64_t> staged_to_take,
                                     absl::FunctionRef<void(rocksdb::WriteBatch*)> tail,
                                     const Claim* claim, absl::FunctionRef<void()> on_success) {
  const uint64_t lsn = txn->lsn;
  txn->images_in_journal = true;
  txn->blocks.reserve(given.size() + staged_to_take.size());
  std::unique_ptr<rocksdb::WriteBatch> pooled =
      TakeBatch(std::min<size_t>(commit_batch_bytes_, kSpareBatchBytes) + (64 << 10));
  absl::Cleanup give_back = [&] { ReturnBatch(std::move(pooled)); };
  rocksdb::WriteBatch& batch = *pooled;
  bool payloads_written = false;
  // The staged images are read in one ordered pass over the mapping's staged records (their
  // keys are in block order, as staged_to_take is), not a lookup each: a lookup reads a
  // whole 64 KiB table block for one image. Not kept in RocksDB's block cache: read once.
  const std::string staged_end = StagedMappingEnd(txn->mapping_id);
  const rocksdb::Slice staged_upper = ToSlice(staged_end);
  rocksdb::ReadOptions sro;
  sro.fill_cache = false;
  sro.readahead_size = kStagedReadaheadBytes;
  sro.iterate_upper_bound = &staged_upper;
  std::unique_ptr<rocksdb::Iterator> staged_it;
  if (!staged_to_take.empty()) {
    staged_it.reset(db_->NewIterator(sro));
    staged_it->Seek(ToSlice(StagedKey(txn->mapping_id, staged_to_take.front())));
  }
  // The staged record of `block`, the iterator's next wanted one: steps over the staged
  // records it does not take (blocks also given).
  auto next_staged = [&](uint64_t block) -> absl::StatusOr<StagedBlock> {
    const std::string key = StagedKey(txn->mapping_id, block);
    while (staged_it->Valid() && staged_it->key().compare(ToSlice(key)) < 0) staged_it->Next();
    RETURN_IF_ERROR(FromRocksDb(staged_it->status(), absl::StrCat("read journal ", dir_)));
    if (!staged_it->Valid() || staged_it->key().compare(ToSlice(key)) != 0) {
      return StagedVanished(dir_, txn->mapping_id, block);
    }
    return DecodeStaged(ToView(staged_it->key()), ToView(staged_it->value()));
  };
  // The payloads, merged in block order, written whenever the batch holds commit_batch_bytes_.
  auto add = [&](CommittedBlock cb, absl::string_view image) -> absl::Status {
    PutPayload(&batch, lsn, cb, image);
    txn->blocks.push_back(std::move(cb));
    if (batch.GetDataSize() < commit_batch_bytes_) return absl::OkStatus();
    // Not synced, not committed: without the header these records are nothing (the next
    // Open deletes them), and the header's synced write makes them durable with it.
    {
      absl::MutexLock l(&mu_);
      RETURN_IF_ERROR(WritableLocked());
    }
    absl::Status w =
        Write(&batch, /*sync=*/false, absl::StrCat("write payloads of transaction ", lsn));
    {
      absl::MutexLock l(&mu_);
      if (!w.ok()) PoisonLocked(w);
      if (w.ok()) bytes_written_ += batch.GetDataSize();
    }
    RETURN_IF_ERROR(w);
    payloads_written = true;
    UMAP_CRASH_POINT("journal.mid_stream");
    batch.Clear();
    return absl::OkStatus();
  };
  absl::Status s = ForEachInBlockOrder(
      given, staged_to_take, [&](const BlockWrite& b) { return add(EntryOf(b), b.data); },
      [&](uint64_t block) -> absl::Status {
        ASSIGN_OR_RETURN(StagedBlock staged, next_staged(block));
        CommittedBlock cb;
        cb.block = block;
        cb.crc = staged.crc;
        cb.length = static_cast<uint32_t>(staged.data.size());
        return add(std::move(cb), staged.data);
      });
  if (!s.ok()) {
    // Not committed. Payloads already written are deleted (unsynced; if this is lost or
    // fails, the next Open deletes them: they have no header).
    absl::Status undo;
    if (payloads_written) {
      rocksdb::WriteBatch drop;
      DeletePayloads(&drop, lsn);
      undo = Write(&drop, /*sync=*/false, absl::StrCat("drop payloads of transaction ", lsn));
    }
    absl::MutexLock l(&mu_);
    ReleaseLocked(claim);
    if (!undo.ok()) PoisonLocked(undo);
    return s;
  }
  staged_it.reset();  // it pins the memtables and tables it read
  tail(&batch);
  // The commit point: the header, with the last payloads and the staged deletions, synced
  // (which makes the earlier payload batches durable too: the WAL is written in order).
  RETURN_IF_ERROR(WriteAndSettle(&batch, /*sync=*/true, absl::StrCat("commit transaction ", lsn),
                                 claim, on_success));
  return PublishCommit(batch, lsn);
}

absl::Status Journal::PublishCommit(const rocksdb::WriteBatch& batch, uint64_t lsn) {
  if (mark_ == nullptr) return absl::OkStatus();
  // RocksDB numbers a written batch in its first 8 bytes (fixed64, as the WAL holds it),
  // one number per record in it.
  UMAP_CRASH_POINT("journal.before_mark");
  std::string_view rep(batch.Data());
  uint64_t first = 0;
  if (!GetFixed64(&rep, &first) || first == 0) {
    return absl::InternalError(absl::StrCat("journal ", dir_, ": commit of transaction ", lsn,
                                            " was given no sequence number by RocksDB"));
  }
  absl::Status s = mark_->Publish({first + batch.Count() - 1, lsn});
  if (!s.ok()) {
    absl::MutexLock l(&mu_);
    PoisonLocked(s);
  }
  return s;
}

}  // namespace umap::journal
