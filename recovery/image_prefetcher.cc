#include "recovery/image_prefetcher.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace umap::recovery {

ImagePrefetcher::ImagePrefetcher(journal::Journal& journal, const ReplayPlan& plan, Env* env,
                                 const Options& options)
    : journal_(journal), plan_(plan), env_(env), options_(options) {
  uint64_t largest = 1;
  for (const PlanEntry& e : plan.entries()) largest = std::max<uint64_t>(largest, e.length);
  constexpr size_t kAlign = ImageBatch::kAlign;
  const size_t capacity =
      (std::max<size_t>(options.batch_bytes, largest) + kAlign - 1) / kAlign * kAlign;
  CutSegments(capacity);
  const size_t readers = std::clamp<size_t>(options.readers, 1, segments_.size());
  for (size_t i = 0; i < readers + 1; ++i) {
    auto b = std::make_unique<ImageBatch>();
    b->buffer.reset(static_cast<char*>(::operator new(capacity, std::align_val_t{kAlign})));
    b->capacity = capacity;
    free_.push_back(b.get());
    batches_.push_back(std::move(b));
  }
  ready_.assign(segments_.size(), nullptr);
  journal::PendingReaderOptions ro;
  ro.readahead_bytes = options.readahead_bytes;
  for (size_t j = 0; j < readers; ++j) readers_.push_back(journal.NewPendingReader(ro));
  for (size_t j = 0; j < readers; ++j) {
    threads_.emplace_back([this, j] { Read(j, readers_[j].get()); });
  }
}

ImagePrefetcher::~ImagePrefetcher() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void ImagePrefetcher::CutSegments(size_t capacity) {
  // A round that is not oversize fits one buffer (the plan cut it so); an oversize one is
  // cut wherever its next image would overflow the buffer, and only its last segment
  // completes it (txns_done).
  const std::vector<PlanTxn>& txns = plan_.txns();
  segments_.clear();
  for (uint64_t r = 0; r < plan_.rounds().size(); ++r) {
    const PlanRound& round = plan_.rounds()[r];
    segments_.push_back({round.first_txn, 0, round.first_txn, r, round.oversize});
    uint64_t bytes = 0;
    for (uint64_t t = round.first_txn; round.oversize && t < round.end_txn; ++t) {
      const PlanTxn& pt = txns[t];
      if (pt.contents != journal::Contents::kData) continue;
      for (uint64_t k = 0; k < pt.entries; ++k) {
        if (!plan_.newest(pt.first_entry + k)) continue;
        const uint32_t length = plan_.entries()[pt.first_entry + k].length;
        if (bytes > 0 && bytes + length > capacity) {
          segments_.push_back({t, k, round.first_txn, r, false});
          bytes = 0;
        }
        bytes += length;
      }
    }
    segments_.back().txns_done = round.end_txn;
  }
  if (segments_.empty()) segments_.push_back({});  // one empty, last batch
}

ImageBatch* ImagePrefetcher::Next() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](ImagePrefetcher* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
        return p->ready_[p->next_out_] != nullptr;
      },
      this));
  ImageBatch* b = ready_[next_out_];
  ready_[next_out_++] = nullptr;
  return b;
}

void ImagePrefetcher::Done(ImageBatch* batch) {
  absl::MutexLock l(&mu_);
  free_.push_back(batch);
}

void ImagePrefetcher::Read(size_t first_segment, journal::PendingReader* reader) {
  const size_t stride = readers_.size();
  for (size_t s = first_segment; s < segments_.size(); s += stride) {
    ImageBatch* b;
    {
      // Buffers go to segments in order: the segment Next() waits for always gets one.
      absl::MutexLock l(&mu_);
      auto my_turn = [this, s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (next_buffer_ == s && !free_.empty());
      };
      mu_.Await(absl::Condition(&my_turn));
      if (stop_) return;
      b = free_.front();
      free_.pop_front();
      ++next_buffer_;
    }
    const uint64_t t0 = env_->NowMicros();
    Fill(s, *reader, b);
    busy_micros_.fetch_add(env_->NowMicros() - t0, std::memory_order_relaxed);
    absl::MutexLock l(&mu_);
    ready_[s] = b;
    if (!b->error.ok()) return;  // the stream ends here; later segments are not needed
  }
}

absl::Status ImagePrefetcher::CheckRound(uint64_t round, uint64_t* bad_txn) {
  const PlanRound& r = plan_.rounds()[round];
  journal::PendingReaderOptions ro;
  ro.readahead_bytes = options_.readahead_bytes;
  std::unique_ptr<journal::PendingReader> reader = journal_.NewPendingReader(ro);
  for (uint64_t t = r.first_txn; t < r.end_txn; ++t) {
    const PlanTxn& pt = plan_.txns()[t];
    if (pt.contents != journal::Contents::kData) continue;
    for (uint64_t e = pt.first_entry; e < pt.first_entry + pt.entries; ++e) {
      if (!plan_.newest(e)) continue;
      const PlanEntry& pe = plan_.entries()[e];
      absl::StatusOr<absl::string_view> image =
          reader->ReadImage(pt.lsn, journal::TxnBlock{pe.block, pe.length, pe.crc});
      if (!image.ok()) {
        *bad_txn = t;
        return image.status();
      }
    }
  }
  return absl::OkStatus();
}

void ImagePrefetcher::Fill(size_t s, journal::PendingReader& reader, ImageBatch* b) {
  b->pieces.clear();
  b->bytes = 0;
  b->error = absl::OkStatus();
  const std::vector<PlanTxn>& txns = plan_.txns();
  const Segment& seg = segments_[s];
  const bool final = s + 1 == segments_.size();
  const uint64_t round_start = plan_.rounds().empty() ? 0 : plan_.rounds()[seg.round].first_txn;
  // Stops the stream at plan transaction t: nothing of its round goes out.
  auto stop = [&](absl::Status error, uint64_t t) {
    b->pieces.clear();
    b->bytes = 0;
    b->error = std::move(error);
    b->error_txn = t;
    b->txns_done = round_start;
    b->last = true;
  };
  if (seg.check_round && options_.check_oversize_rounds) {
    uint64_t bad_txn = round_start;
    if (absl::Status checked = CheckRound(seg.round, &bad_txn); !checked.ok()) {
      return stop(checked, bad_txn);
    }
  }
  // The segment ends where the next one starts: before entry `end_entry` of `end_txn`.
  const uint64_t end_txn = final ? txns.size() : segments_[s + 1].txn;
  const uint64_t end_entry = final ? 0 : segments_[s + 1].entry;
  for (uint64_t t = seg.txn; t < end_txn || (t == end_txn && end_entry > 0); ++t) {
    const PlanTxn& pt = txns[t];
    if (pt.contents != journal::Contents::kData) continue;
    const uint64_t to = t == end_txn ? end_entry : pt.entries;
    for (uint64_t k = t == seg.txn ? seg.entry : 0; k < to; ++k) {
      const uint64_t e = pt.first_entry + k;
      if (!plan_.newest(e)) continue;
      const PlanEntry& pe = plan_.entries()[e];
      absl::StatusOr<absl::string_view> image =
          reader.ReadImage(pt.lsn, journal::TxnBlock{pe.block, pe.length, pe.crc});
      if (!image.ok()) return stop(image.status(), t);
      std::memcpy(b->buffer.get() + b->bytes, image->data(), image->size());
      b->pieces.push_back({plan_.OffsetOf(pt, pe), b->bytes, t, pe.length, pe.crc});
      b->bytes += pe.length;
    }
  }
  b->txns_done = seg.txns_done;
  b->last = final;
}

}  // namespace umap::recovery
