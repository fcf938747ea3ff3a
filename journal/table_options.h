// The table layout of the journal's RocksDB files (journal.cc opens the journal with it;
// tools that write a journal's tables directly, such as umap-recover-bench's one-transaction
// backlog, use it too, so that what they measure is the journal's layout).
#ifndef UMAP_JOURNAL_TABLE_OPTIONS_H_
#define UMAP_JOURNAL_TABLE_OPTIONS_H_

#include "rocksdb/table.h"

namespace umap::journal {

rocksdb::BlockBasedTableOptions JournalTableOptions();

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_TABLE_OPTIONS_H_
