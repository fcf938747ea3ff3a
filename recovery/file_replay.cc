#include "recovery/file_replay.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/crash_point.h"
#include "base/crc32c.h"
#include "base/log.h"
#include "base/mutation.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "recovery/block_reader.h"

namespace umap::recovery {

using journal::Contents;

FileReplay::FileReplay(const Context& context, FileGroup* g) : context_(context), g_(g) {
  const std::vector<PlanTxn>& txns = g->plan.txns();
  by_cover_.resize(txns.size());
  std::iota(by_cover_.begin(), by_cover_.end(), 0);
  std::stable_sort(by_cover_.begin(), by_cover_.end(),
                   [&](uint64_t a, uint64_t b) { return txns[a].cover < txns[b].cover; });
  if (writing()) direct_ = std::make_unique<DirectWriter>(g->file.get());
}

absl::Status FileReplay::Run() {
  ImagePrefetcher::Options po;
  po.batch_bytes = context_.batch_bytes;
  po.readers = context_.options->read_threads;
  po.readahead_bytes = context_.options->readahead_bytes;
  po.check_oversize_rounds = writing();
  ImagePrefetcher prefetcher(*context_.journal, g_->plan, context_.env, po);
  absl::Cleanup count_reads = [&] {
    context_.counters->read_us.fetch_add(prefetcher.busy_micros(), std::memory_order_relaxed);
  };
  const uint64_t checkpoint_bytes = context_.options->checkpoint_bytes;
  uint64_t since_checkpoint = 0;
  while (true) {
    ImageBatch* b = prefetcher.Next();
    absl::Status s = writing() ? Write(*b) : absl::OkStatus();
    if (s.ok()) context_.counters->bytes_done.fetch_add(b->bytes, std::memory_order_relaxed);
    since_checkpoint += b->bytes;
    const uint64_t txns_done = b->txns_done, error_txn = b->error_txn;
    const absl::Status read_error = b->error;
    const bool last = b->last;
    prefetcher.Done(b);
    RETURN_IF_ERROR(s);
    if (!read_error.ok()) return StopAt(read_error, error_txn, txns_done);
    if (writing() && checkpoint_bytes != 0 && since_checkpoint >= checkpoint_bytes) {
      RETURN_IF_ERROR(Checkpoint(txns_done));
      since_checkpoint = 0;
    }
    if (last) break;
  }
  return writing() ? Checkpoint(g_->plan.txns().size()) : absl::OkStatus();
}

absl::Status FileReplay::Write(const ImageBatch& b) {
  if (b.pieces.empty()) return absl::OkStatus();
  // A batch holds images of one round, and each offset appears once in a round (its newest
  // version there), so the pieces of a batch never overlap; sorted by offset, neighbours in the file that are neighbours in
  // the buffer too become one piece (fewer iovecs), up to the engine's largest write.
  std::vector<WritePiece> pieces;
  pieces.reserve(b.pieces.size());
  for (const ImageBatch::Piece& p : b.pieces) pieces.push_back({p.offset, b.data(p), p.length});
  auto by_offset = [](const WritePiece& x, const WritePiece& y) { return x.offset < y.offset; };
  if (!std::is_sorted(pieces.begin(), pieces.end(), by_offset)) {
    std::sort(pieces.begin(), pieces.end(), by_offset);
  }
  const size_t max_io = context_.engine->options().max_io_bytes;
  size_t out = 0;
  for (size_t i = 1; i < pieces.size(); ++i) {
    WritePiece& last = pieces[out];
    const WritePiece& p = pieces[i];
    if (last.offset + last.len == p.offset && last.data + last.len == p.data &&
        last.len + p.len <= max_io) {
      last.len += p.len;
    } else {
      pieces[++out] = p;
    }
  }
  pieces.resize(out + 1);
  const uint64_t first_offset = pieces.front().offset;
  const uint64_t end_offset = pieces.back().offset + pieces.back().len;

  const uint64_t t0 = context_.env->NowMicros();
  absl::Status s = WritePieces(std::move(pieces));
  context_.counters->write_us.fetch_add(context_.env->NowMicros() - t0,
                                        std::memory_order_relaxed);
  if (!s.ok()) {
    const ImageBatch::Piece& first = b.pieces.front();
    const uint64_t first_lsn = g_->plan.txns()[first.txn].lsn;
    const uint64_t last_lsn = g_->plan.txns()[b.pieces.back().txn].lsn;
    FailGroup(g_, Problem::kIo,
              Reword(s, absl::StrCat(
                                         "replay of LSN ", first_lsn,
                                         last_lsn == first_lsn ? "" : absl::StrCat("..", last_lsn),
                                         " (mapping ", ReportOf(first.txn).mapping.id, ", ",
                                         b.pieces.size(), " blocks from offset ",
                                         first_offset, " to ", end_offset, ") into ",
                                         g_->path, ": ", s.message(),
                                         "; the journal keeps the transactions; safe to rerun")));
    return s;
  }
  unsynced_ = true;
  for (const ImageBatch::Piece& p : b.pieces) {
    MappingReport& r = ReportOf(p.txn);
    ++r.blocks_written;
    r.bytes_written += p.length;
  }
  if (context_.options->verify_after_replay) {
    written_.insert(written_.end(), b.pieces.begin(), b.pieces.end());
  }
  return absl::OkStatus();
}

absl::Status FileReplay::WritePieces(std::vector<WritePiece> pieces) {
  auto before_each = [] {
    // A kill here leaves some images of committed transactions written and others not:
    // nothing is marked until the fdatasync after them, so the next run writes them again.
    UMAP_CRASH_POINT("recovery.mid_replay");
  };
  return direct_->Write(pieces, [&](File* file, absl::Span<const WritePiece> p) {
    return context_.engine->Write(file, p, before_each);
  });
}

absl::Status FileReplay::Checkpoint(uint64_t txns_done) {
  if (unsynced_) {
    context_.counters->syncing.fetch_add(1, std::memory_order_relaxed);
    const uint64_t t0 = context_.env->NowMicros();
    absl::Status s = g_->file->Sync();
    context_.counters->sync_us.fetch_add(context_.env->NowMicros() - t0,
                                         std::memory_order_relaxed);
    context_.counters->syncing.fetch_sub(1, std::memory_order_relaxed);
    if (!s.ok()) {
      // Never retry a failed fdatasync: the kernel may have dropped the pages. The
      // transactions stay pending; the next run writes them again.
      FailGroup(g_, Problem::kIo,
                Reword(s, absl::StrCat(s.message(), "; the transactions since the "
                                                                 "last checkpoint stay pending; "
                                                                 "safe to rerun")));
      return s;
    }
    unsynced_ = false;
    if (context_.options->verify_after_replay) RETURN_IF_ERROR(ReadBack());
  }
  return Mark(txns_done);
}

absl::Status FileReplay::ReadBack() {
  std::sort(written_.begin(), written_.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::vector<BlockSpan> spans;
  spans.reserve(written_.size());
  for (const ImageBatch::Piece& p : written_) spans.push_back({p.offset, p.length});
  absl::Status mismatch;
  absl::Status s = ReadBlocks(g_->file.get(), spans, [&](size_t i, absl::string_view bytes) {
    const ImageBatch::Piece& p = written_[i];
    bool same = bytes.size() == p.length && crc32c::Value(bytes.data(), bytes.size()) == p.crc;
    UMAP_IF_MUTATION(kSkipCrc) { same = true; }
    if (same) {
      ++ReportOf(p.txn).blocks_verified;
    } else if (mismatch.ok()) {
      mismatch = absl::DataLossError(
          absl::StrCat(g_->path, ": the block at offset ", p.offset, " (LSN ",
                       g_->plan.txns()[p.txn].lsn,
                       ") reads back different bytes after write and fdatasync"));
    }
  });
  if (s.ok()) s = mismatch;
  written_.clear();
  if (!s.ok()) FailGroup(g_, Problem::kIo, s);
  return s;
}

absl::Status FileReplay::Mark(uint64_t txns_done) {
  const std::vector<PlanTxn>& txns = g_->plan.txns();
  std::vector<uint64_t> lsns;
  const size_t first = marked_;
  while (marked_ < by_cover_.size() && txns[by_cover_[marked_]].cover < txns_done) {
    lsns.push_back(txns[by_cover_[marked_++]].lsn);
  }
  if (lsns.empty()) return absl::OkStatus();
  const uint64_t t0 = context_.env->NowMicros();
  absl::Status s = context_.journal->MarkApplied(absl::MakeConstSpan(lsns));
  context_.counters->mark_us.fetch_add(context_.env->NowMicros() - t0,
                                       std::memory_order_relaxed);
  if (!s.ok()) {
    FailGroup(g_, Problem::kJournal,
              Reword(s, absl::StrCat("the file is synced, but marking its "
                                                  "transactions applied failed: ",
                                                  s.message(), "; safe to rerun")));
    return s;
  }
  for (size_t i = first; i < marked_; ++i) {
    MappingReport& r = ReportOf(by_cover_[i]);
    if (txns[by_cover_[i]].contents == Contents::kData) {
      ++r.txns_replayed;
    } else {
      ++r.txns_discarded;
    }
  }
  return absl::OkStatus();
}

absl::Status FileReplay::StopAt(const absl::Status& error, uint64_t error_txn,
                                uint64_t txns_done) {
  // The rounds before the damaged record's are written whole, and none of its round is: keep
  // them (sync, mark their transactions). A failure here is recorded first.
  if (writing()) RETURN_IF_ERROR(Checkpoint(txns_done));
  const bool damaged = absl::IsDataLoss(error);
  const uint64_t lsn = g_->plan.txns()[error_txn].lsn;
  const std::string outcome =
      writing() ? absl::StrCat("the replay of ", g_->path,
                               " stopped before the replay round that holds it: the file is as "
                               "the transactions before LSN ", g_->plan.txns()[txns_done].lsn,
                               " left it, and those from there on stay in the journal")
                : std::string("nothing was written");
  FailGroup(g_, damaged ? Problem::kCorruptRecord : Problem::kIo,
            Reword(error,
                         damaged ? absl::StrCat("committed transaction LSN ", lsn,
                                                " is damaged (", error.message(), "); ", outcome,
                                                ". Keep a copy of the journal and of the file "
                                                "for analysis")
                                 : absl::StrCat("read of transaction LSN ", lsn, ": ",
                                                error.message(), "; ", outcome,
                                                "; safe to rerun")));
  return error;
}

}  // namespace umap::recovery
