#include "recovery/file_group.h"

#include <utility>

namespace umap::recovery {

void Refuse(MappingWork* w, Problem p, absl::Status s) {
  MappingReport& r = *w->report;
  if (r.state == MappingState::kRefused || r.state == MappingState::kIoError) return;
  r.state = p == Problem::kIo || p == Problem::kJournal ? MappingState::kIoError
                                                       : MappingState::kRefused;
  r.problem = p;
  r.status = std::move(s);
}

void FailGroup(FileGroup* g, Problem p, const absl::Status& s) {
  for (MappingWork* w : g->members) Refuse(w, p, s);
}

}  // namespace umap::recovery
