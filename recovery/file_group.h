// What recovery knows about each mapping it works on, and about each file: the mappings
// whose target is one file (same device and inode) are replayed together, in one LSN order,
// so that two mappings of one file can never roll each other's blocks back.
#ifndef UMAP_RECOVERY_FILE_GROUP_H_
#define UMAP_RECOVERY_FILE_GROUP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "recovery/recovery.h"
#include "recovery/replay_plan.h"
#include "umap/env.h"

namespace umap::recovery {

struct MappingWork {
  MappingReport* report = nullptr;
  ReplayPlan plan;        // its pending transactions, as the scan found them (until grouped)
  bool bad_txn = false;   // a transaction writes outside the journaled file (refused)
  FileIdentity found;     // what IdentifyPath found at the target
  bool stat_ok = false;
};

struct FileGroup {
  std::string path;
  std::vector<MappingWork*> members;  // plan member i is members[i]
  ReplayPlan plan;                    // all members' transactions, in LSN order
  std::unique_ptr<File> file;
  uint64_t bytes_to_write = 0;
};

// Records why a mapping was refused (or failed: kIo, kJournal); the first cause wins.
void Refuse(MappingWork* w, Problem p, absl::Status s);
// Refuse() for every member of the file.
void FailGroup(FileGroup* g, Problem p, const absl::Status& s);

}  // namespace umap::recovery

#endif  // UMAP_RECOVERY_FILE_GROUP_H_
