#include "chaos/journal_rot.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/coding.h"
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
  // Only an image recovery must read: the newest of its block. An older image of a block a
  // later transaction rewrites is never read by the replay (it writes the newest image of
  // each block only), so its damage cannot change the file; rotting it would test nothing.
  // Block numbers of different mappings may coincide: such an image may be left out too.
  {
    std::map<uint64_t, uint64_t> newest;  // block -> highest LSN with an image of it
    std::vector<std::pair<uint64_t, uint64_t>> ids;  // (lsn, block) per payload
    for (const auto& [key, value] : payloads) {
      std::string_view rest(key);
      rest.remove_prefix(1);
      uint64_t lsn = 0, block = 0;
      if (!umap::GetBigEndian64(&rest, &lsn) || !umap::GetBigEndian64(&rest, &block)) {
        return absl::DataLossError(absl::StrCat("journal rot: payload key ",
                                                absl::CHexEscape(key), " is malformed"));
      }
      ids.emplace_back(lsn, block);
      uint64_t& n = newest[block];
      n = std::max(n, lsn);
    }
    std::vector<std::pair<std::string, std::string>> kept;
    for (size_t i = 0; i < payloads.size(); ++i) {
      if (newest[ids[i].second] == ids[i].first) kept.push_back(std::move(payloads[i]));
    }
    payloads = std::move(kept);
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
