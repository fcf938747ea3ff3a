#include "recovery/block_classifier.h"

#include <vector>

#include "base/crc32c.h"
#include "base/status_macros.h"
#include "recovery/block_reader.h"

namespace umap::recovery {
namespace {

using journal::Contents;

// Judges one range: `versions` are its plan entries, oldest first; `bytes` what the file
// holds there.
void Judge(FileGroup* g, uint64_t offset, absl::Span<const uint64_t> versions,
           absl::string_view bytes, bool all_ranges, size_t max_findings) {
  const ReplayPlan& plan = g->plan;
  const uint64_t newest = versions.back();
  const PlanTxn& t = plan.txns()[plan.TxnOf(newest)];
  const PlanEntry& e = plan.entries()[newest];
  MappingReport& r = *g->members[t.member]->report;
  const uint32_t found = crc32c::Value(bytes.data(), bytes.size());
  if (bytes.size() == e.length && found == e.crc) {
    ++r.blocks_verified;
    return;
  }
  BlockFinding f;
  f.mapping_id = r.mapping.id;
  f.lsn = t.lsn;
  f.block = e.block;
  f.offset = offset;
  f.length = e.length;
  f.expected_crc = e.crc;
  f.found_crc = found;
  f.repairable = t.contents == Contents::kData;
  f.cls = versions.size() == 1 ? BlockClass::kNotAppliedOrTorn : BlockClass::kTorn;
  for (size_t k = versions.size() - 1; k-- > 0;) {
    const PlanEntry& older = plan.entries()[versions[k]];
    if (bytes.size() == older.length && found == older.crc) {
      f.cls = BlockClass::kNotApplied;
      f.matched_lsn = plan.txns()[plan.TxnOf(versions[k])].lsn;
      break;
    }
  }
  // A data-mode range that replay is about to rewrite is not a finding.
  if (f.repairable && !all_ranges) return;
  switch (f.cls) {
    case BlockClass::kNotApplied: ++r.blocks_not_applied; break;
    case BlockClass::kTorn: ++r.blocks_torn; break;
    default: ++r.blocks_not_applied_or_torn; break;
  }
  if (r.findings.size() < max_findings) {
    r.findings.push_back(f);
  } else {
    ++r.findings_omitted;
  }
}

}  // namespace

absl::Status ClassifyBlocks(FileGroup* g, bool all_ranges, size_t max_findings) {
  // Judged a chunk of ranges at a time, so that verifying a large backlog holds a bounded
  // list of ranges, not one per block.
  constexpr size_t kChunk = 4096;
  struct Range {
    uint64_t offset;
    absl::Span<const uint64_t> versions;
  };
  std::vector<Range> ranges;
  std::vector<BlockSpan> spans;
  absl::Status status;
  auto flush = [&] {
    if (status.ok()) {
      status = ReadBlocks(g->file.get(), spans, [&](size_t i, absl::string_view bytes) {
        Judge(g, ranges[i].offset, ranges[i].versions, bytes, all_ranges, max_findings);
      });
    }
    ranges.clear();
    spans.clear();
  };
  const ReplayPlan& plan = g->plan;
  plan.ForEachRange([&](uint64_t offset, absl::Span<const uint64_t> versions) {
    const uint64_t newest = versions.back();
    if (!all_ranges && plan.txns()[plan.TxnOf(newest)].contents != Contents::kIntent) return;
    ranges.push_back({offset, versions});
    spans.push_back({offset, plan.entries()[newest].length});
    if (ranges.size() == kChunk) flush();
  });
  flush();
  return status;
}

}  // namespace umap::recovery
