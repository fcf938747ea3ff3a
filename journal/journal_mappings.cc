// Journal: the mappings it journals (RegisterMapping, UnregisterMapping, Mappings).
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

// ---- mappings ----------------------------------------------------------------------------

absl::StatusOr<uint64_t> Journal::RegisterMapping(const FileIdentity& file, uint32_t block_size,
                                                  Policy policy, Contents contents) {
  if (!IsPowerOfTwo(block_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block size ", block_size, " is not a power of two"));
  }
  if (contents == Contents::kIntent && policy == Policy::kAtomic) {
    return absl::InvalidArgumentError("intent journaling needs the relaxed policy");
  }
  absl::MutexLock w(&watermark_mu_);
  MappingInfo info;
  info.file = file;
  info.block_size = block_size;
  info.policy = policy;
  info.contents = contents;
  Watermark watermark;
  {
    absl::MutexLock l(&mu_);
    RETURN_IF_ERROR(WritableLocked());
    info.id = ++last_mapping_id_;
    watermark = Watermark{last_lsn_, last_mapping_id_};
    // A journal of an older format keeps its layout, so that the build that wrote it can
    // still drain it: its mappings go without a birth (checked by device and inode only).
    if (format_version_ < kFormatWithBirth) {
      info.file.birth = FileBirth::kUnknown;
      info.file.birth_a = info.file.birth_b = 0;
    }
  }
  rocksdb::WriteBatch batch;
  batch.Put(ToSlice(MappingKey(info.id)), ToSlice(EncodeMapping(info)));
  batch.Put(ToSlice(WatermarkKey()), ToSlice(EncodeWatermark(watermark)));
  const uint64_t id = info.id;
  RETURN_IF_ERROR(WriteAndSettle(&batch, /*sync=*/true, "register mapping", nullptr,
                                 [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                   mappings_.emplace(id, std::move(info));
                                 }));
  return id;
}

absl::StatusOr<const MappingInfo*> Journal::FindMappingLocked(uint64_t mapping_id) const {
  auto m = mappings_.find(mapping_id);
  if (m == mappings_.end()) {
    return absl::NotFoundError(absl::StrCat("journal mapping ", mapping_id, " not registered"));
  }
  return &m->second;
}

absl::Status Journal::UnregisterMapping(uint64_t mapping_id) {
  rocksdb::WriteBatch batch;
  {
    absl::MutexLock l(&mu_);
    RETURN_IF_ERROR(WritableLocked());
    RETURN_IF_ERROR(FindMappingLocked(mapping_id).status());
    // Let running Stage/Commit calls on it finish; later ones find no mapping.
    auto busy = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::any_of(claims_.begin(), claims_.end(),
                         [&](const Claim* c) { return c->mapping_id == mapping_id; });
    };
    while (busy()) claims_changed_.Wait(&mu_);
    RETURN_IF_ERROR(WritableLocked());
    RETURN_IF_ERROR(FindMappingLocked(mapping_id).status());
    const auto unapplied = std::count_if(pending_.begin(), pending_.end(), [&](const auto& p) {
      return p.second.mapping_id == mapping_id;
    });
    if (unapplied > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("journal mapping ", mapping_id, " has ", unapplied,
                       " committed transactions not yet applied; apply them first"));
    }
    mappings_.erase(mapping_id);
    batch.Delete(ToSlice(MappingKey(mapping_id)));
    auto it = staged_.lower_bound({mapping_id, 0});
    while (it != staged_.end() && it->first.first == mapping_id) {
      batch.Delete(ToSlice(StagedKey(mapping_id, it->first.second)));
      staged_bytes_ -= it->second;
      it = staged_.erase(it);
    }
  }
  return WriteAndSettle(&batch, /*sync=*/false, "unregister mapping", nullptr, [] {});
}

std::vector<MappingInfo> Journal::Mappings() const {
  absl::MutexLock l(&mu_);
  std::vector<MappingInfo> out;
  out.reserve(mappings_.size());
  for (const auto& [id, info] : mappings_) out.push_back(info);
  std::sort(out.begin(), out.end(),
            [](const MappingInfo& a, const MappingInfo& b) { return a.id < b.id; });
  return out;
}

}  // namespace umap::journal
