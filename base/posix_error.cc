#include "base/posix_error.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace umap {
namespace {
constexpr char kErrnoUrl[] = "umap.dev/errno";
}

absl::Status PosixError(int err, absl::string_view context) {
  return WithErrno(absl::ErrnoToStatus(err, context), err);
}

absl::Status WithErrno(absl::Status status, int err) {
  if (!status.ok()) status.SetPayload(kErrnoUrl, absl::Cord(absl::StrCat(err)));
  return status;
}

bool HasErrno(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kErrnoUrl).has_value();
}

absl::Status Reword(const absl::Status& status, absl::string_view message) {
  absl::Status out(status.code(), message);
  if (auto p = status.GetPayload(kErrnoUrl)) out.SetPayload(kErrnoUrl, *p);
  return out;
}

ErrnoClass ClassifyErrno(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return ErrnoClass::kNoSpace;
    case EACCES:
    case EPERM:
    case EROFS:
    case ETXTBSY:
      return ErrnoClass::kDenied;
    case ENOENT:
    case ENOTDIR:
      return ErrnoClass::kMissing;
    case EBUSY:
      return ErrnoClass::kBusy;
    case EINVAL:
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG:
    case EBADF:
    case EFBIG:
    case EXDEV:
    case ENOSYS:
    case EOPNOTSUPP:
    case EOVERFLOW:
      return ErrnoClass::kInvalid;
    default:
      return ErrnoClass::kTransient;
  }
}

int ErrnoFromStatus(const absl::Status& status) {
  if (status.ok()) return 0;
  if (auto p = status.GetPayload(kErrnoUrl)) {
    int err = 0;
    if (absl::SimpleAtoi(std::string(*p), &err) && err > 0) return err;
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument: return EINVAL;
    case absl::StatusCode::kNotFound: return ENOENT;
    case absl::StatusCode::kPermissionDenied: return EACCES;
    case absl::StatusCode::kResourceExhausted: return ENOSPC;
    case absl::StatusCode::kDeadlineExceeded: return ETIMEDOUT;
    case absl::StatusCode::kAlreadyExists: return EEXIST;
    case absl::StatusCode::kUnimplemented: return ENOSYS;
    case absl::StatusCode::kFailedPrecondition: return EROFS;
    default: return EIO;
  }
}

}  // namespace umap
