#include "journal/table_options.h"

#include <memory>

#include "rocksdb/flush_block_policy.h"
#include "rocksdb/slice.h"

namespace umap::journal {
namespace {

// RocksDB's size policy, plus: a table block never holds records of two tags. Without
// this, a transaction header (the 'T' records sort after the 'P' payloads) lands in the
// block of the last payloads whenever that block has room by the size rule's measure, and a
// header of a million-block transaction makes that a 16 MiB block, which every payload
// reader then loads (and RocksDB's read-ahead buffer grows to) for the last few images.
class TagBoundaryPolicy : public rocksdb::FlushBlockPolicy {
 public:
  explicit TagBoundaryPolicy(rocksdb::FlushBlockPolicy* by_size) : by_size_(by_size) {}

  bool Update(const rocksdb::Slice& key, const rocksdb::Slice& value) override {
    // Internal keys: the user key (its first byte the record tag), then 8 bytes.
    const char tag = key.empty() ? '\0' : key[0];
    const bool new_tag = entries_ > 0 && tag != tag_;
    tag_ = tag;
    // by_size_ is consulted for every record (it is stateless but for the block builder).
    const bool cut = by_size_->Update(key, value) || new_tag;
    entries_ = cut ? 1 : entries_ + 1;
    return cut;
  }

 private:
  const std::unique_ptr<rocksdb::FlushBlockPolicy> by_size_;
  char tag_ = '\0';
  uint64_t entries_ = 0;  // records in the current block, this one included
};

class TagBoundaryPolicyFactory : public rocksdb::FlushBlockPolicyFactory {
 public:
  const char* Name() const override { return "UmapJournalTagBoundaryPolicy"; }
  rocksdb::FlushBlockPolicy* NewFlushBlockPolicy(
      const rocksdb::BlockBasedTableOptions& table_options,
      const rocksdb::BlockBuilder& data_block_builder) const override {
    return new TagBoundaryPolicy(rocksdb::FlushBlockBySizePolicyFactory::NewFlushBlockPolicy(
        table_options.block_size, table_options.block_size_deviation, data_block_builder));
  }
};

}  // namespace

rocksdb::BlockBasedTableOptions JournalTableOptions() {
  rocksdb::BlockBasedTableOptions table;
  // Records are block images of 4 KiB and more: with RocksDB's default 4 KiB table blocks
  // each record is a block of its own, and streaming a backlog (recovery) pays a block
  // fetch, checksum and cache lookup per image. 64 KiB blocks hold a dozen; a point read
  // (a staged block) reads 64 KiB instead of 4 KiB, from the page cache as a rule.
  table.block_size = 64 << 10;
  // A block holds records of one tag only (TagBoundaryPolicy above), and the index holds
  // each block's first key, so an iterator reads a block only when it returns a record of
  // it: a payload scan (recovery) never loads the block of a transaction header, 16 MiB for
  // a million-block transaction. With the plain index a Seek reads the block at the target
  // in every L0 file and level, whatever the iterator's upper bound. Tables written before
  // this layout keep theirs until a compaction rewrites them; both read the same.
  table.flush_block_policy_factory = std::make_shared<TagBoundaryPolicyFactory>();
  table.index_type = rocksdb::BlockBasedTableOptions::kBinarySearchWithFirstKey;
  return table;
}

}  // namespace umap::journal
