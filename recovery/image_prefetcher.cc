#include "recovery/image_prefetcher.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace umap::recovery {

ImagePrefetcher::ImagePrefetcher(journal::Journal& journal, const ReplayPlan& plan, Env* env,
                                 const Options& options)
    : plan_(plan), env_(env), options_(options) {
  journal::PendingReaderOptions ro;
  ro.readahead_bytes = options.readahead_bytes;
  reader_ = journal.NewPendingReader(ro);
  uint64_t largest = 1;
  for (const PlanEntry& e : plan.entries()) largest = std::max<uint64_t>(largest, e.length);
  constexpr size_t kAlign = ImageBatch::kAlign;
  const size_t capacity =
      (std::max<size_t>(options.batch_bytes, largest) + kAlign - 1) / kAlign * kAlign;
  for (size_t i = 0; i < std::max<size_t>(2, options.batches); ++i) {
    auto b = std::make_unique<ImageBatch>();
    b->buffer.reset(static_cast<char*>(::operator new(capacity, std::align_val_t{kAlign})));
    b->capacity = capacity;
    free_.push_back(b.get());
    batches_.push_back(std::move(b));
  }
  thread_ = std::thread([this] { Loop(); });
}

ImagePrefetcher::~ImagePrefetcher() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

ImageBatch* ImagePrefetcher::Next() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](std::deque<ImageBatch*>* q) { return !q->empty(); }, &ready_));
  ImageBatch* b = ready_.front();
  ready_.pop_front();
  return b;
}

void ImagePrefetcher::Done(ImageBatch* batch) {
  absl::MutexLock l(&mu_);
  free_.push_back(batch);
}

void ImagePrefetcher::Loop() {
  while (true) {
    ImageBatch* b;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](ImagePrefetcher* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stop_ || !p->free_.empty();
          },
          this));
      if (stop_) return;
      b = free_.front();
      free_.pop_front();
    }
    const uint64_t t0 = env_->NowMicros();
    const bool more = Fill(*reader_, b);
    busy_micros_.fetch_add(env_->NowMicros() - t0, std::memory_order_relaxed);
    absl::MutexLock l(&mu_);
    ready_.push_back(b);
    if (!more) return;
  }
}

bool ImagePrefetcher::Fill(journal::PendingReader& reader, ImageBatch* b) {
  b->pieces.clear();
  b->bytes = 0;
  b->last = false;
  b->error = absl::OkStatus();
  const std::vector<PlanTxn>& txns = plan_.txns();
  const std::vector<PlanEntry>& entries = plan_.entries();
  for (; txn_ < txns.size(); ++txn_, entry_ = 0) {
    const PlanTxn& t = txns[txn_];
    if (t.contents == journal::Contents::kData) {
      for (; entry_ < t.entries; ++entry_) {
        const uint64_t e = t.first_entry + entry_;
        if (!plan_.newest(e)) continue;
        const PlanEntry& pe = entries[e];
        if (b->bytes + pe.length > b->capacity) {
          b->txns_done = txn_;
          return true;  // full: this transaction goes on in the next batch
        }
        absl::StatusOr<absl::string_view> image =
            reader.ReadImage(t.lsn, journal::TxnBlock{pe.block, pe.length, pe.crc});
        if (!image.ok()) {
          b->error = image.status();
          b->error_txn = txn_;
          b->txns_done = txn_;
          b->last = true;
          return false;
        }
        std::memcpy(b->buffer.get() + b->bytes, image->data(), image->size());
        b->pieces.push_back({plan_.OffsetOf(t, pe), b->bytes, txn_, pe.length, pe.crc});
        b->bytes += pe.length;
      }
    }
    // With mappings of different block sizes in one file, two block ranges may overlap
    // without being equal: a batch then never spans two transactions, so that the writes
    // of one batch never overlap and batches keep the LSN order.
    if (plan_.mixed_block_sizes() && !b->pieces.empty()) {
      ++txn_;
      entry_ = 0;
      b->txns_done = txn_;
      b->last = txn_ == txns.size();
      return !b->last;
    }
  }
  b->txns_done = txns.size();
  b->last = true;
  return false;
}

}  // namespace umap::recovery
