// ClassifyBlocks: judges what a file holds for a block range against the range's pending
// versions (docs/recovery.md §4): the newest one (applied), an older one (not applied), or
// neither (torn, or not applied or torn when no older version is known). Used for the
// ranges whose newest version is intent-only (there is no image to write), and by verify for
// every range.
#ifndef UMAP_RECOVERY_BLOCK_CLASSIFIER_H_
#define UMAP_RECOVERY_BLOCK_CLASSIFIER_H_

#include <cstddef>

#include "absl/status/status.h"
#include "recovery/file_group.h"

namespace umap::recovery {

// Reads the group's file and counts each judged range in the report of the mapping of its
// newest version (blocks_verified, _not_applied, _torn, _not_applied_or_torn), keeping up to
// `max_findings` findings per mapping. `all_ranges` judges data-mode ranges too (verify);
// otherwise only intent-mode ones. REQUIRES: g->plan finished with its versions kept, and
// g->file open. Returns a read error (the counts then cover the ranges before it).
absl::Status ClassifyBlocks(FileGroup* g, bool all_ranges, size_t max_findings);

}  // namespace umap::recovery

#endif  // UMAP_RECOVERY_BLOCK_CLASSIFIER_H_
