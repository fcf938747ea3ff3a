// ReplayPlan: what the replay of one file writes, computed from the pending transaction
// headers alone, before any image is read (docs/recovery.md §2).
//
// A plan holds the file's pending transactions in LSN order and their block entries (block,
// length, CRC: 16 bytes a block, the images stay in the journal). Finish() cuts the
// transactions into rounds: runs of consecutive transactions whose images together fit in
// one replay buffer (a transaction larger than that is a round of its own, "oversize").
// Within a round it works out, for every block range (keyed by file offset), which entry is
// the round's newest version of it: replay writes only those, once each per round, rounds in
// LSN order, and the file ends exactly as if every transaction had been applied in LSN
// order. Replay reads and checks a whole round before it writes any of it, so a damaged
// image stops the replay at a round boundary and the file is left as the transactions
// before that round made it: the state of some umsync, never a mix of early and late
// transactions. It also works out when each transaction is safe to mark applied: once the
// round's newest versions of all of its blocks are written and synced (`cover`).
//
// Not thread-safe; after Finish() it is read-only and may be read from several threads.
#ifndef UMAP_RECOVERY_REPLAY_PLAN_H_
#define UMAP_RECOVERY_REPLAY_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "journal/format.h"

namespace umap::recovery {

// One pending transaction of the file.
struct PlanTxn {
  uint64_t lsn = 0;
  uint32_t member = 0;      // which mapping of the file (index into the file's members)
  uint32_t block_size = 0;  // that mapping's
  journal::Contents contents = journal::Contents::kData;
  uint64_t first_entry = 0;  // its blocks are entries [first_entry, first_entry + entries)
  uint64_t entries = 0;
  uint64_t bytes = 0;        // image bytes of all its blocks
  uint64_t round = 0;        // Finish(): the round it belongs to (index into rounds())
  // Finish(): the index (into txns) of the newest transaction that holds the newest version
  // of one of this transaction's blocks; >= its own index. Once every transaction up to
  // and including `cover` has had its newest images written and synced, this one is safe
  // to mark applied.
  uint64_t cover = 0;
};

// Consecutive plan transactions [first_txn, end_txn) that replay reads and checks before it
// writes any of them.
struct PlanRound {
  uint64_t first_txn = 0, end_txn = 0;
  uint64_t bytes = 0;     // image bytes of all their blocks (superseded ones included)
  bool oversize = false;  // one transaction larger than the round budget
};

// One block of a pending transaction, as its header lists it.
struct PlanEntry {
  uint64_t block = 0;
  uint32_t length = 0;
  uint32_t crc = 0;
};

class ReplayPlan {
 public:
  // Appends a transaction; LSNs must increase from call to call.
  void Add(uint64_t lsn, uint32_t member, uint32_t block_size, journal::Contents contents,
           absl::Span<const journal::TxnBlock> blocks);
  // The plans of a file's mappings (each in LSN order), as one plan in LSN order; part i
  // becomes member i.
  static ReplayPlan Merge(std::vector<ReplayPlan> parts);
  // Cuts the rounds (at most `round_bytes` of images each, unless one transaction is larger),
  // then computes each round's newest entry of every block range and each transaction's
  // cover. With mappings of different block sizes every transaction is a round of its own
  // (their block ranges may overlap without being equal). With `keep_versions`, keeps the
  // offset-sorted index ForEachRange reads (24 bytes an entry) until DropVersions().
  void Finish(bool keep_versions, uint64_t round_bytes = UINT64_MAX);
  void DropVersions();

  const std::vector<PlanTxn>& txns() const { return txns_; }
  const std::vector<PlanRound>& rounds() const { return rounds_; }
  const std::vector<PlanEntry>& entries() const { return entries_; }
  uint64_t OffsetOf(const PlanTxn& t, const PlanEntry& e) const { return e.block * t.block_size; }
  // After Finish(): whether entry `e` is its round's newest version of its block range.
  bool newest(uint64_t e) const { return newest_[e]; }
  // The index of the transaction that lists entry `e`.
  uint64_t TxnOf(uint64_t e) const;
  // Whether two mappings of the file have different block sizes: their block ranges can
  // then overlap without being equal, and replay must keep whole transactions in LSN order.
  bool mixed_block_sizes() const { return mixed_block_sizes_; }

  // After Finish(true): calls fn for every block range in offset order with its entries,
  // oldest first (the last is the newest).
  void ForEachRange(
      absl::FunctionRef<void(uint64_t offset, absl::Span<const uint64_t> entries)> fn) const;

 private:
  void CutRounds(uint64_t round_bytes);

  std::vector<PlanTxn> txns_;
  std::vector<PlanRound> rounds_;
  std::vector<PlanEntry> entries_;
  std::vector<bool> newest_;
  bool mixed_block_sizes_ = false;
  // Finish(true): entry indices sorted by (offset, LSN), and where each range starts.
  std::vector<uint64_t> by_offset_;
  std::vector<uint64_t> range_starts_;
};

}  // namespace umap::recovery

#endif  // UMAP_RECOVERY_REPLAY_PLAN_H_
