// The checks that stand between a journaled mapping and a write into a file
// (docs/recovery.md §3): where the file is now (relocations), whether the file found there is
// the journaled one (device, inode, size), and that the file opened is the one checked.
#ifndef UMAP_RECOVERY_TARGET_CHECK_H_
#define UMAP_RECOVERY_TARGET_CHECK_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "recovery/file_group.h"
#include "recovery/recovery.h"
#include "umap/env.h"

namespace umap::recovery {

// The path `path` is relocated to by the longest matching rule, and whether one matched.
std::pair<std::string, bool> Relocate(const std::string& path,
                                      const std::vector<PathRelocation>& relocations);

// Resolves the mapping's target and compares the file there with the journaled record;
// sets w->found and w->stat_ok when the target could be examined, and refuses the mapping
// (Refuse) when a check fails.
void CheckTarget(MappingWork* w, const RecoverOptions& options, Env* env);

// Opens the group's file (read-only for kVerify, else for writing) into g->file and checks
// that it is still the file CheckTarget examined. On failure every member is refused or
// failed and the error returned.
absl::Status OpenTarget(FileGroup* g, Mode mode, Env* env);

}  // namespace umap::recovery

#endif  // UMAP_RECOVERY_TARGET_CHECK_H_
