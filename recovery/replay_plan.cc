#include "recovery/replay_plan.h"

#include <algorithm>
#include <utility>

namespace umap::recovery {

void ReplayPlan::Add(uint64_t lsn, uint32_t member, uint32_t block_size,
                     journal::Contents contents, absl::Span<const journal::TxnBlock> blocks) {
  PlanTxn t;
  t.lsn = lsn;
  t.member = member;
  t.block_size = block_size;
  t.contents = contents;
  t.first_entry = entries_.size();
  t.entries = blocks.size();
  t.cover = txns_.size();
  for (const journal::TxnBlock& b : blocks) {
    entries_.push_back({b.block, b.length, b.crc});
    t.bytes += b.length;
  }
  if (!txns_.empty() && txns_.front().block_size != block_size) mixed_block_sizes_ = true;
  txns_.push_back(t);
}

ReplayPlan ReplayPlan::Merge(std::vector<ReplayPlan> parts) {
  if (parts.size() == 1) return std::move(parts.front());
  ReplayPlan out;
  std::vector<size_t> next(parts.size(), 0);
  while (true) {
    // The part whose next transaction has the lowest LSN.
    size_t best = parts.size();
    for (size_t p = 0; p < parts.size(); ++p) {
      if (next[p] == parts[p].txns_.size()) continue;
      if (best == parts.size() || parts[p].txns_[next[p]].lsn < parts[best].txns_[next[best]].lsn) {
        best = p;
      }
    }
    if (best == parts.size()) break;
    const ReplayPlan& from = parts[best];
    const PlanTxn& t = from.txns_[next[best]++];
    std::vector<journal::TxnBlock> blocks;
    blocks.reserve(t.entries);
    for (uint64_t e = t.first_entry; e < t.first_entry + t.entries; ++e) {
      blocks.push_back({from.entries_[e].block, from.entries_[e].length, from.entries_[e].crc});
    }
    out.Add(t.lsn, static_cast<uint32_t>(best), t.block_size, t.contents, blocks);
  }
  return out;
}

uint64_t ReplayPlan::TxnOf(uint64_t e) const {
  auto it = std::upper_bound(txns_.begin(), txns_.end(), e,
                             [](uint64_t v, const PlanTxn& t) { return v < t.first_entry; });
  return static_cast<uint64_t>(it - txns_.begin()) - 1;
}

void ReplayPlan::CutRounds(uint64_t round_bytes) {
  rounds_.clear();
  for (uint64_t t = 0; t < txns_.size(); ++t) {
    PlanTxn& pt = txns_[t];
    const bool fits = !rounds_.empty() && !mixed_block_sizes_ && !rounds_.back().oversize &&
                      rounds_.back().bytes + pt.bytes <= round_bytes;
    if (!fits) rounds_.push_back({t, t, 0, pt.bytes > round_bytes});
    PlanRound& r = rounds_.back();
    r.end_txn = t + 1;
    r.bytes += pt.bytes;
    pt.round = rounds_.size() - 1;
  }
}

void ReplayPlan::Finish(bool keep_versions, uint64_t round_bytes) {
  CutRounds(round_bytes);
  // (offset, entry) of every entry. Entries were added in LSN order, so within one offset
  // the entry order is the LSN order and the last one is the newest.
  std::vector<std::pair<uint64_t, uint64_t>> order;
  order.reserve(entries_.size());
  for (const PlanTxn& t : txns_) {
    for (uint64_t e = t.first_entry; e < t.first_entry + t.entries; ++e) {
      order.emplace_back(OffsetOf(t, entries_[e]), e);
    }
  }
  // A backlog written front to back is already in order: no sort then.
  if (!std::is_sorted(order.begin(), order.end())) std::sort(order.begin(), order.end());
  newest_.assign(entries_.size(), false);
  if (keep_versions) {
    by_offset_.clear();
    by_offset_.reserve(order.size());
    range_starts_.clear();
  }
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    while (j < order.size() && order[j].first == order[i].first) ++j;
    // Versions [i, j) of one range, oldest first; rounds are runs of transactions, so each
    // round's versions are a run here too and its newest is the run's last.
    for (size_t k = i; k < j;) {
      const uint64_t round = txns_[TxnOf(order[k].second)].round;
      size_t end = k + 1;
      while (end < j && txns_[TxnOf(order[end].second)].round == round) ++end;
      const uint64_t newest_entry = order[end - 1].second;
      newest_[newest_entry] = true;
      const uint64_t newest_txn = TxnOf(newest_entry);
      for (size_t m = k; m + 1 < end; ++m) {
        PlanTxn& older = txns_[TxnOf(order[m].second)];
        older.cover = std::max(older.cover, newest_txn);
      }
      k = end;
    }
    if (keep_versions) {
      range_starts_.push_back(by_offset_.size());
      for (size_t k = i; k < j; ++k) by_offset_.push_back(order[k].second);
    }
    i = j;
  }
}

void ReplayPlan::DropVersions() {
  std::vector<uint64_t>().swap(by_offset_);
  std::vector<uint64_t>().swap(range_starts_);
}

void ReplayPlan::ForEachRange(
    absl::FunctionRef<void(uint64_t offset, absl::Span<const uint64_t> entries)> fn) const {
  for (size_t r = 0; r < range_starts_.size(); ++r) {
    const uint64_t begin = range_starts_[r];
    const uint64_t end = r + 1 < range_starts_.size() ? range_starts_[r + 1] : by_offset_.size();
    const uint64_t e = by_offset_[begin];
    const PlanTxn& t = txns_[TxnOf(e)];
    fn(OffsetOf(t, entries_[e]), absl::MakeConstSpan(by_offset_.data() + begin, end - begin));
  }
}

}  // namespace umap::recovery
