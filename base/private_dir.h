// Private directories: a journal holds block images of the user's files and decides what
// recovery writes into them, so nobody but its owner may read it, replace it or plant files
// in it (docs/operations.md, "Who may touch a journal").
#ifndef UMAP_BASE_PRIVATE_DIR_H_
#define UMAP_BASE_PRIVATE_DIR_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace umap {

struct PrivateDirPolicy {
  // Who must own the directory and every file in it.
  uid_t owner = 0;
  // The caller is root and was told to accept a directory of another user (umap-recover
  // --owner): named in the refusal's remedy. Modes are then left as found.
  bool root_for_other = false;
};

// Checks the directory at `path` (which must exist), refusing (kPermissionDenied, errno
// EPERM, naming the culprit and the remedy):
//   - a symbolic link on the way that is owned by neither `owner` nor root (its owner could
//     point it elsewhere at any time);
//   - a directory on the way (the resolved path's ancestors) that others may write to,
//     unless it has the sticky bit (/tmp, /var/tmp): they could rename the journal away and
//     put another in its place;
//   - the directory itself not owned by `owner`, not a directory, or writable by group or
//     others; a file in it not owned by `owner`, or a symbolic link in it.
// Then, when the caller owns it, it makes the directory 0700 and every file in it 0600 (the
// files keep nothing from anyone who may reach the directory). Errors of the system calls:
// their errno.
absl::Status CheckPrivateDir(const std::string& path, const PrivateDirPolicy& policy);

// Creates the directory `path` with mode 0700 if it is missing (its parent must exist), then
// CheckPrivateDir.
absl::Status MakePrivateDir(const std::string& path, const PrivateDirPolicy& policy);

// The parent of automatic journal directories for the effective user:
// /var/tmp/umap-journal-UID, made and checked as above (on a local disk that survives a
// reboot, unlike $XDG_RUNTIME_DIR's tmpfs). When anything but a private directory of the
// user stands at that name (another user's directory or link, a regular file, a FIFO:
// anyone may create it first in /var/tmp), a fresh /var/tmp/umap-journal-UID.XXXXXX
// (mkdtemp: created 0700, atomically, with an unpredictable name) is used instead and a
// warning says what and whose the taken one is. `base` replaces /var/tmp (tests).
absl::StatusOr<std::string> AutomaticJournalRoot(const std::string& base = "/var/tmp");

// Makes the file `path` mode 0600 (the journal's files, as its file system creates them),
// and user `give_to`'s when given (root working on another user's journal).
absl::Status RestrictToOwner(const std::string& path, std::optional<uid_t> give_to = {});

}  // namespace umap

#endif  // UMAP_BASE_PRIVATE_DIR_H_
