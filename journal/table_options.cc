#include "journal/table_options.h"

namespace umap::journal {

rocksdb::BlockBasedTableOptions JournalTableOptions() {
  rocksdb::BlockBasedTableOptions table;
  // Records are block images of 4 KiB and more: with RocksDB's default 4 KiB table blocks
  // each record is a block of its own, and streaming a backlog (recovery) pays a block
  // fetch, checksum and cache lookup per image. 64 KiB blocks hold a dozen; a point read
  // (a staged block) reads 64 KiB instead of 4 KiB, from the page cache as a rule.
  table.block_size = 64 << 10;
  // The index holds each block's first key, so an iterator reads a block only when it
  // returns a record of it. With the plain index a Seek reads the block at the target in
  // every L0 file and level, including blocks whose first key is past the iterator's upper
  // bound: a payload scan (recovery) would load the table block of a transaction header,
  // 16 MiB for a million-block transaction, into every reader's prefetch buffer. Tables
  // written before this layout keep their index until a compaction rewrites them; both
  // read the same.
  table.index_type = rocksdb::BlockBasedTableOptions::kBinarySearchWithFirstKey;
  return table;
}

}  // namespace umap::journal
