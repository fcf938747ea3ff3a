#include "journal/table_options.h"

namespace umap::journal {

rocksdb::BlockBasedTableOptions JournalTableOptions() {
  rocksdb::BlockBasedTableOptions table;
  // Records are block images of 4 KiB and more: with RocksDB's default 4 KiB table blocks
  // each record is a block of its own, and streaming a backlog (recovery) pays a block
  // fetch, checksum and cache lookup per image. 64 KiB blocks hold a dozen; a point read
  // (a staged block) reads 64 KiB instead of 4 KiB, from the page cache as a rule.
  table.block_size = 64 << 10;
  // Not kBinarySearchWithFirstKey, and no flush policy cutting blocks where the record tag
  // changes, although together they keep a payload reader out of a transaction header's
  // table block (a 4 GiB one-transaction replay peaked at 131 MiB with them, 165 MiB
  // without): with them, Debian's RocksDB 7.8.3 (assertions on) aborted in the
  // journal-damage property (tests/journal/journal_damage_test.cc, an assertion in
  // DBIter::FindNextUserEntryInternal on a journal whose WAL was damaged), where it
  // otherwise reports the damage.
  return table;
}

}  // namespace umap::journal
