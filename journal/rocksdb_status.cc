#include "journal/rocksdb_status.h"

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/posix_error.h"

namespace umap::journal {

absl::Status FromRocksDb(const rocksdb::Status& s, absl::string_view context) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat(context, ": rocksdb: ", s.ToString());
  // NoSpace is an IOError subcode: test it first.
  if (s.IsNoSpace()) return WithErrno(absl::ResourceExhaustedError(msg), ENOSPC);
  if (s.IsIOError() || s.IsBusy() || s.IsTryAgain() || s.IsShutdownInProgress() ||
      s.IsIncomplete()) {
    return WithErrno(absl::UnavailableError(msg), EIO);
  }
  if (s.IsCorruption()) return WithErrno(absl::DataLossError(msg), EIO);
  if (s.IsTimedOut()) return WithErrno(absl::DeadlineExceededError(msg), EIO);
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsNotSupported()) return absl::UnimplementedError(msg);
  if (s.IsAborted()) return absl::AbortedError(msg);
  return WithErrno(absl::UnknownError(msg), EIO);
}

}  // namespace umap::journal
