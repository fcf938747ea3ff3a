#include "chaos/journal_rot.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "chaos/workload.h"
#include "journal/format.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace chaos {

absl::StatusOr<std::string> RotOnePayload(const std::string& dir, uint64_t seed) {
  rocksdb::Options o;
  o.create_if_missing = false;
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, dir, &raw);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("journal rot: open ", dir, ": ", s.ToString()));
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  const std::string prefix(1, static_cast<char>(umap::journal::RecordTag::kTxnPayload));
  std::vector<std::pair<std::string, std::string>> payloads;
  {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      payloads.emplace_back(it->key().ToString(), it->value().ToString());
    }
    if (!it->status().ok()) {
      return absl::DataLossError(
          absl::StrCat("journal rot: scan ", dir, ": ", it->status().ToString()));
    }
  }
  if (payloads.empty()) return std::string();
  Rng rng(seed);
  auto& [key, value] = payloads[rng.Range(0, payloads.size() - 1)];
  // Value: crc32c(4) | length(4) | image (docs/journal_format.md). Flip one bit of the image.
  if (value.size() <= 8) {
    return absl::DataLossError(absl::StrCat("journal rot: payload ", absl::CHexEscape(key),
                                            " in ", dir, " is only ", value.size(), " bytes"));
  }
  const uint64_t at = rng.Range(8, value.size() - 1);
  value[at] ^= static_cast<char>(1u << rng.Range(0, 7));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  s = db->Put(wo, key, value);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("journal rot: rewrite ", dir, ": ", s.ToString()));
  }
  s = db->Close();
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("journal rot: close ", dir, ": ", s.ToString()));
  }
  return absl::StrCat("flipped a bit at value byte ", at, " of payload ", absl::CHexEscape(key));
}

}  // namespace chaos
