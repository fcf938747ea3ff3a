#include "journal/pending_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "journal/rocksdb_status.h"
#include "rocksdb/db.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "rocksdb/snapshot.h"

namespace umap::journal {
namespace {

rocksdb::Slice ToSlice(absl::string_view s) { return rocksdb::Slice(s.data(), s.size()); }
absl::string_view ToView(const rocksdb::Slice& s) { return absl::string_view(s.data(), s.size()); }

// A request this few records ahead of the iterator is reached by Next() calls; farther, by
// a Seek, which walks the index again. Stepping reads the records in between (sequentially,
// inside the read-ahead window) without decoding them.
constexpr int kMaxSteps = 8;

}  // namespace

PendingReader::PendingReader(rocksdb::DB* db, std::string dir, const PendingReaderOptions& options)
    : db_(db),
      dir_(std::move(dir)),
      options_(options),
      snapshot_(std::make_unique<rocksdb::ManagedSnapshot>(db)),
      payload_end_(TagEnd(RecordTag::kTxnPayload)),
      payload_end_slice_(std::make_unique<rocksdb::Slice>(ToSlice(payload_end_))) {}

PendingReader::~PendingReader() {
  payloads_.reset();  // before the snapshot it reads
}

absl::Status PendingReader::ForEachHeader(
    absl::FunctionRef<absl::Status(const TxnHeader&)> fn) {
  const std::string begin = TagBegin(RecordTag::kTxnHeader);
  const std::string end = TagEnd(RecordTag::kTxnHeader);
  rocksdb::Slice upper = ToSlice(end);
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot_->snapshot();
  ro.iterate_upper_bound = &upper;
  ro.fill_cache = false;  // read once: keep the block cache for the runtime's lookups
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->Seek(ToSlice(begin)); it->Valid(); it->Next()) {
    absl::StatusOr<TxnHeader> h = DecodeTxnHeader(ToView(it->key()), ToView(it->value()));
    if (!h.ok()) {
      return absl::DataLossError(
          absl::StrCat("journal ", dir_, ": transaction header: ", h.status().message()));
    }
    RETURN_IF_ERROR(fn(*h));
  }
  return FromRocksDb(it->status(), absl::StrCat("read transaction headers in journal ", dir_));
}

absl::StatusOr<TxnHeader> PendingReader::ReadHeader(uint64_t lsn) {
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot_->snapshot();
  const std::string key = TxnHeaderKey(lsn);
  std::string value;
  rocksdb::Status s = db_->Get(ro, ToSlice(key), &value);
  if (s.IsNotFound()) {
    return absl::NotFoundError(absl::StrCat("transaction ", lsn, " not in journal ", dir_));
  }
  RETURN_IF_ERROR(FromRocksDb(s, absl::StrCat("read transaction ", lsn, " in journal ", dir_)));
  return DecodeTxnHeader(key, value);
}

void PendingReader::PositionAt(const std::string& key) {
  const rocksdb::Slice target = ToSlice(key);
  if (payloads_ == nullptr) {
    rocksdb::ReadOptions ro;
    ro.snapshot = snapshot_->snapshot();
    ro.iterate_upper_bound = payload_end_slice_.get();
    ro.readahead_size = options_.readahead_bytes;
    ro.fill_cache = false;  // each payload is read once
    // Every image is checked against its own CRC (and its key against the header) as it
    // is returned, which catches a damaged table block too: RocksDB's block checksum would
    // be a second CRC pass over the same bytes. Blocks RocksDB cannot parse still fail.
    ro.verify_checksums = false;
    payloads_.reset(db_->NewIterator(ro));
    payloads_->Seek(target);
    return;
  }
  for (int i = 0; i < kMaxSteps && payloads_->Valid(); ++i) {
    if (payloads_->key().compare(target) >= 0) return;
    payloads_->Next();
  }
  if (!payloads_->status().ok()) return;  // the caller reports it
  if (payloads_->Valid() && payloads_->key().compare(target) >= 0) return;
  payloads_->Seek(target);
}

absl::StatusOr<absl::string_view> PendingReader::ReadImage(uint64_t lsn, const TxnBlock& entry) {
  key_ = TxnPayloadKey(lsn, entry.block);
  PositionAt(key_);
  auto where = [&] {
    return absl::StrCat("journal ", dir_, ": transaction ", lsn, ", block ", entry.block);
  };
  if (!payloads_->Valid()) {
    RETURN_IF_ERROR(FromRocksDb(payloads_->status(), absl::StrCat("read ", where())));
  }
  if (!payloads_->Valid() || ToView(payloads_->key()) != key_) {
    return absl::DataLossError(absl::StrCat(where(), ": payload record missing"));
  }
  absl::StatusOr<TxnPayload> p = DecodeTxnPayload(key_, ToView(payloads_->value()));
  if (!p.ok()) return absl::DataLossError(absl::StrCat(where(), ": ", p.status().message()));
  if (p->crc != entry.crc || p->data.size() != entry.length) {
    return absl::DataLossError(absl::StrCat(where(), ": payload does not match its header"));
  }
  return p->data;
}

}  // namespace umap::journal
