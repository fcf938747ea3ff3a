// Recoverer: one recovery run over an open journal (what recovery::Recover does; the steps
// are listed in recovery.h). Each step is one function: select the mappings, scan the
// transaction headers, check the targets and group mappings by file, plan each file, process
// the files (in parallel: classify, replay or check), forget the drained mappings.
//
// Thread safety: Run() once, from one thread; it starts and joins the threads of the files.
#ifndef UMAP_RECOVERY_RECOVERER_H_
#define UMAP_RECOVERY_RECOVERER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/write_engine.h"
#include "journal/journal.h"
#include "recovery/file_group.h"
#include "recovery/file_replay.h"
#include "recovery/progress_reporter.h"
#include "recovery/recovery.h"

namespace umap::recovery {

class Recoverer {
 public:
  // `owned`: the run opened the journal itself (Recover(options)), so no other user of it
  // can be running, and staged blocks dropped with a mapping are this run's to count.
  Recoverer(journal::Journal& journal, const RecoverOptions& options, bool owned);
  absl::StatusOr<Report> Run(Report report);

 private:
  bool Included(const journal::MappingInfo& m) const;
  void SelectMappings(Report* report);
  absl::Status ScanHeaders(Report* report);
  void AddHeader(MappingWork* w, const journal::TxnHeader& h);
  std::vector<std::unique_ptr<FileGroup>> CheckAndGroup();
  // Refuses every member of a file one of whose mappings was refused; true if so.
  bool RefuseTogether(FileGroup* g);
  void PlanGroup(FileGroup* g);
  // Each prefetcher buffer's size (and so each replay round's budget) when `groups` files
  // are replayed.
  size_t BatchBytes(size_t groups) const;
  void ProcessGroups(const std::vector<std::unique_ptr<FileGroup>>& groups);
  void ProcessGroup(FileGroup* g);
  // Intent-mode ranges (all ranges in kVerify) against the file; false on a read error.
  bool Classify(FileGroup* g);
  void ForgetDrained(Report* report);
  MappingWork* WorkOf(uint64_t mapping_id) {
    auto it = work_.find(mapping_id);
    return it == work_.end() ? nullptr : &it->second;
  }

  journal::Journal& journal_;
  const RecoverOptions& options_;
  const bool owned_;
  Env* const env_;
  const uint64_t start_;
  ProgressReporter progress_;
  std::unique_ptr<WriteEngine> own_engine_;  // when options_.write_engine is null
  WriteEngine* engine_;

  std::map<uint64_t, MappingWork> work_;  // the included mappings, by id
  ReplayCounters counters_;
  uint64_t replay_total_ = 0;  // image bytes the files' replays write (or check)
  size_t batch_bytes_ = 0;     // each prefetcher buffer
};

}  // namespace umap::recovery

#endif  // UMAP_RECOVERY_RECOVERER_H_
