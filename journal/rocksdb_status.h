// The one boundary where rocksdb::Status becomes absl::Status: journal code converts a
// RocksDB error here and nowhere else, so its absl code and errno are chosen in one place.
#ifndef UMAP_JOURNAL_ROCKSDB_STATUS_H_
#define UMAP_JOURNAL_ROCKSDB_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rocksdb/status.h"

namespace umap::journal {

// Converts `s`, prefixing its message with `context` (what was being done, on which
// journal). I/O failures keep an errno payload (base/posix_error.h) so that umsync() can
// return it: ENOSPC for NoSpace, EIO for every other I/O error or corruption.
//   NoSpace                      -> kResourceExhausted, errno ENOSPC
//   other IOError, Busy, TryAgain,
//   ShutdownInProgress, Incomplete -> kUnavailable, errno EIO
//   Corruption                   -> kDataLoss, errno EIO
//   TimedOut                     -> kDeadlineExceeded, errno EIO
//   NotFound, InvalidArgument, NotSupported, Aborted -> kNotFound, kInvalidArgument,
//                                   kUnimplemented, kAborted (no errno payload)
//   anything else                -> kUnknown, errno EIO
absl::Status FromRocksDb(const rocksdb::Status& s, absl::string_view context);

}  // namespace umap::journal

#endif  // UMAP_JOURNAL_ROCKSDB_STATUS_H_
