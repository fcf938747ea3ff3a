// The backlog mode of recovery_kill_worker: commits with the Journal API, applies nothing.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "journal/journal.h"
#include "tests/recovery/kill_workload.h"
#include "umap/env.h"

namespace recoverytest {

int RunBacklog(const std::string& file, const std::string& journal, uint64_t rounds,
               bool intent) {
  umap::journal::JournalOptions o;
  o.dir = journal;
  auto j = umap::journal::Journal::Open(o);
  if (!j.ok()) {
    std::fprintf(stderr, "%s\n", j.status().ToString().c_str());
    return 20;
  }
  auto id = umap::Env::Default()->IdentifyPath(file);
  if (!id.ok()) {
    std::fprintf(stderr, "%s\n", id.status().ToString().c_str());
    return 21;
  }
  auto m = (*j)->RegisterMapping(*id, kKillBlockSize,
                                 intent ? umap::journal::Policy::kRelaxed
                                        : umap::journal::Policy::kAtomic,
                                 intent ? umap::journal::Contents::kIntent
                                        : umap::journal::Contents::kData);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    return 22;
  }
  for (uint64_t r = 1; r <= rounds; ++r) {
    std::vector<std::string> images;
    std::vector<umap::journal::BlockWrite> writes;
    for (uint64_t b : RoundBlocks(r)) images.push_back(Image(r, b, kKillBlockSize));
    size_t i = 0;
    for (uint64_t b : RoundBlocks(r)) writes.push_back({b, images[i++]});
    auto t = (*j)->Commit(*m, writes, 0, 0);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
      return 23;
    }
  }
  // Die without closing the journal: the commits are in the WAL only, as after a kill.
  std::fflush(stdout);
  ::_exit(0);
}

}  // namespace recoverytest
