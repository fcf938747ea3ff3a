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

// True if `status` carries an errno payload (PosixError, WithErrno).
bool HasErrno(const absl::Status& status);

// `status` with its code and errno payload and a new message (to add where and what).
absl::Status Reword(const absl::Status& status, absl::string_view message);

// What an errno says about the next step. The absl code that absl::ErrnoToStatus picks for
// an errno says little about it (ENOTCONN from a dropped mount becomes
// kFailedPrecondition, EIO kUnknown), so whoever must decide classifies the errno, by this
// function only. docs/recovery.md §6 maps each class to an umap-recover exit code.
enum class ErrnoClass {
  kTransient,  // the storage or the way to it failed (EIO, ENOTCONN, ESTALE, ETIMEDOUT,
               // ECONNRESET, ...) or is short of memory: nothing is wrong with the request;
               // trying again later may succeed. Also every errno not listed below
  kNoSpace,    // ENOSPC, EDQUOT: trying again succeeds once there is room
  kDenied,     // EACCES, EPERM, EROFS, ETXTBSY: not allowed; a person must change something
  kMissing,    // ENOENT, ENOTDIR: not there
  kBusy,       // EBUSY: held by another process
  kInvalid,    // EINVAL, EISDIR, ELOOP, ENAMETOOLONG, EBADF, EFBIG, EXDEV, ENOSYS,
               // EOPNOTSUPP, EOVERFLOW: a wrong request, configuration or file
};
ErrnoClass ClassifyErrno(int err);

}  // namespace umap

#endif  // UMAP_BASE_POSIX_ERROR_H_
