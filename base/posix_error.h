// errno -> absl::Status, with the errno kept as a payload so that the C API can hand the
// exact value back to the caller (umsync returns ENOSPC, not "some resource error").
#ifndef UMAP_BASE_POSIX_ERROR_H_
#define UMAP_BASE_POSIX_ERROR_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace umap {

// A status for `err` with `context` (what failed, on which file) in the message.
absl::Status PosixError(int err, absl::string_view context);

// The errno carried by `status`, or a best guess from its code (EIO when unknown, 0 for OK).
int ErrnoFromStatus(const absl::Status& status);

// Attaches an errno payload to any status (used at foreign boundaries: RocksDB, io_uring).
absl::Status WithErrno(absl::Status status, int err);

}  // namespace umap

#endif  // UMAP_BASE_POSIX_ERROR_H_
