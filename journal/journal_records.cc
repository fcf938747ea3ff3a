#include "journal/journal_records.h"

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "base/status_macros.h"
#include "journal/format.h"

namespace umap::journal {

absl::Status ForEachInBlockOrder(absl::Span<const BlockWrite* const> given,
                                 absl::Span<const uint64_t> staged,
                                 absl::FunctionRef<absl::Status(const BlockWrite&)> on_given,
                                 absl::FunctionRef<absl::Status(uint64_t)> on_staged) {
  size_t gi = 0, si = 0;
  while (gi < given.size() || si < staged.size()) {
    if (si == staged.size() || (gi < given.size() && given[gi]->block < staged[si])) {
      RETURN_IF_ERROR(on_given(*given[gi++]));
    } else {
      RETURN_IF_ERROR(on_staged(staged[si++]));
    }
  }
  return absl::OkStatus();
}

CommittedBlock EntryOf(const BlockWrite& b) {
  CommittedBlock cb;
  cb.block = b.block;
  cb.length = static_cast<uint32_t>(b.data.size());
  cb.crc = crc32c::Value(b.data.data(), b.data.size());
  return cb;
}

void PutPayload(rocksdb::WriteBatch* batch, uint64_t lsn, const CommittedBlock& cb,
                absl::string_view image) {
  const std::string key = TxnPayloadKey(lsn, cb.block);
  const std::string head = TxnPayloadHeader(cb.crc, cb.length);
  const rocksdb::Slice key_part = ToSlice(key);
  const rocksdb::Slice value_parts[2] = {ToSlice(head), ToSlice(image)};
  batch->Put(rocksdb::SliceParts(&key_part, 1), rocksdb::SliceParts(value_parts, 2));
}

void DeletePayloads(rocksdb::WriteBatch* batch, uint64_t lsn) {
  batch->DeleteRange(ToSlice(TxnPayloadKey(lsn, 0)), ToSlice(TxnPayloadKey(lsn + 1, 0)));
}

absl::Status StagedVanished(const std::string& dir, uint64_t mapping_id, uint64_t block) {
  return absl::DataLossError(absl::StrCat("journal ", dir, ": staged block ", block,
                                          " of mapping ", mapping_id, " vanished"));
}

}  // namespace umap::journal
