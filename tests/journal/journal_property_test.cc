// Properties of the journal as a whole:
//  - JournalModel: random Stage / Commit / Apply (+ MarkApplied of a random subset, in random
//    order) / Reopen against a model. After every step, the file (images of applied
//    transactions) plus a replay of PendingTransactions in LSN order equals the model's file
//    (every committed transaction applied in LSN order); every pending transaction is one the
//    model committed, so a staged block never shows up as committed.
// Damage to the journal's files: journal_damage_test.cc.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "journal/journal.h"
#include "tests/journal/journal_test_util.h"

namespace umap::journal {
namespace {

constexpr uint64_t kBlocks = 8;
constexpr uint32_t kBlockSize = 64;

rc::Gen<std::string> GenImage() {
  return rc::gen::apply(
      [](size_t n, char fill) { return std::string(n, fill); },
      rc::gen::inRange<size_t>(1, kBlockSize + 1), rc::gen::inRange('a', static_cast<char>('z' + 1)));
}

// Images for a random subset of the blocks (each block in with probability 1/3).
std::map<uint64_t, std::string> SomeBlockImages(bool non_empty) {
  std::map<uint64_t, std::string> out;
  for (uint64_t b = 0; b < kBlocks; ++b) {
    if (*rc::gen::inRange(0, 3) == 0) out[b] = *GenImage();
  }
  if (non_empty && out.empty()) out[*rc::gen::inRange<uint64_t>(0, kBlocks)] = *GenImage();
  return out;
}

struct Model {
  struct Txn {
    BlockFile images;
    bool marked = false;  // MarkApplied was called
  };
  BlockFile target;                        // the file with every committed txn applied
  std::map<uint64_t, std::string> staged;  // block -> staged image
  std::vector<Txn> txns;                   // every committed transaction, in commit order
  size_t applied = 0;                      // txns[0, applied) were applied to the file
};

struct Sut : JournalFixture {
  uint64_t mapping = 0;
  std::vector<uint64_t> lsns;  // LSN of Model::txns[i]
  BlockFile file;              // what the file holds: images of applied transactions
};

BlockFile Images(const Transaction& t) {
  BlockFile f;
  Apply(t, &f);
  return f;
}

// The invariant, checked against the model state after a command:
//  - the pending transactions are committed ones, in LSN order, with their images, and
//    include every transaction not marked applied;
//  - the file plus a replay of the pending transactions is the committed state;
//  - once every transaction is marked, none is pending (applied records are collected);
//  - the staged blocks are the model's, and were never committed by themselves.
void CheckInvariant(const Model& m, Sut& s) {
  absl::StatusOr<std::vector<Transaction>> pending = s.journal_->PendingTransactions();
  RC_ASSERT(pending.ok());
  std::map<uint64_t, size_t> index;  // LSN -> commit order
  for (size_t i = 0; i < s.lsns.size(); ++i) index[s.lsns[i]] = i;
  std::set<size_t> pending_txns;
  BlockFile replayed = s.file;
  uint64_t last_lsn = 0;
  for (const Transaction& t : *pending) {
    RC_ASSERT(t.lsn > last_lsn);
    last_lsn = t.lsn;
    auto it = index.find(t.lsn);
    RC_ASSERT(it != index.end());
    RC_ASSERT(Images(t) == m.txns[it->second].images);
    pending_txns.insert(it->second);
    Apply(t, &replayed);
  }
  bool all_marked = true;
  for (size_t i = 0; i < m.txns.size(); ++i) {
    if (!m.txns[i].marked) RC_ASSERT(pending_txns.contains(i));
    all_marked = all_marked && m.txns[i].marked;
  }
  if (all_marked) RC_ASSERT(pending->empty());
  RC_ASSERT(replayed == m.target);
  for (uint64_t b = 0; b < kBlocks; ++b) {
    absl::StatusOr<std::optional<std::string>> staged = s.journal_->ReadStaged(s.mapping, b);
    RC_ASSERT(staged.ok());
    auto it = m.staged.find(b);
    RC_ASSERT(staged->has_value() == (it != m.staged.end()));
    if (it != m.staged.end()) RC_ASSERT(**staged == it->second);
  }
  RC_ASSERT(s.journal_->stats().staged_blocks == m.staged.size());
}

struct StageCmd : rc::state::Command<Model, Sut> {
  uint64_t block = *rc::gen::inRange<uint64_t>(0, kBlocks);
  std::string image = *GenImage();

  void apply(Model& m) const override { m.staged[block] = image; }
  void run(const Model& m, Sut& s) const override {
    RC_ASSERT(s.journal_->Stage(s.mapping, block, image).ok());
    CheckInvariant(nextState(m), s);
  }
  void show(std::ostream& os) const override {
    os << "Stage(" << block << ", " << image.size() << "x" << image[0] << ")";
  }
};

struct CommitCmd : rc::state::Command<Model, Sut> {
  std::map<uint64_t, std::string> given = SomeBlockImages(/*non_empty=*/false);
  uint64_t first = *rc::gen::inRange<uint64_t>(0, kBlocks + 1);
  uint64_t end = first + *rc::gen::inRange<uint64_t>(0, kBlocks + 1 - first);

  BlockFile Expected(const Model& m) const {
    BlockFile txn;
    for (const auto& [b, image] : m.staged) {
      if (first <= b && b < end) txn[b] = image;
    }
    for (const auto& [b, image] : given) txn[b] = image;
    return txn;
  }
  void apply(Model& m) const override {
    BlockFile txn = Expected(m);
    for (auto it = m.staged.begin(); it != m.staged.end();) {
      const bool superseded = (first <= it->first && it->first < end) || given.contains(it->first);
      it = superseded ? m.staged.erase(it) : std::next(it);
    }
    if (txn.empty()) return;
    for (const auto& [b, image] : txn) m.target[b] = image;
    m.txns.push_back({std::move(txn), false});
  }
  void run(const Model& m, Sut& s) const override {
    std::vector<BlockWrite> writes;
    for (const auto& [b, image] : given) writes.push_back({b, image});
    absl::StatusOr<Transaction> t = s.journal_->Commit(s.mapping, writes, first, end);
    RC_ASSERT(t.ok());
    const BlockFile expected = Expected(m);
    RC_ASSERT((t->lsn == kNoLsn) == expected.empty());
    RC_ASSERT(Images(*t) == expected);
    if (t->lsn != kNoLsn) s.lsns.push_back(t->lsn);
    CheckInvariant(nextState(m), s);
  }
  void show(std::ostream& os) const override {
    os << "Commit(given {";
    for (const auto& [b, image] : given) os << b << ":" << image.size() << "x" << image[0] << " ";
    os << "}, range [" << first << ", " << end << "))";
  }
};

// Applies the next `count` committed transactions to the file, in LSN order (as the runtime
// must), then marks some applied transactions, in random order (as the journal must bear).
struct ApplyCmd : rc::state::Command<Model, Sut> {
  size_t count = 0;
  std::vector<size_t> mark;  // indices into Model::txns

  explicit ApplyCmd(const Model& m) {
    count = *rc::gen::inRange<size_t>(0, m.txns.size() - m.applied + 1);
    std::vector<size_t> candidates;
    for (size_t i = 0; i < m.applied + count; ++i) {
      if (!m.txns[i].marked && *rc::gen::inRange(0, 3) != 0) candidates.push_back(i);
    }
    std::shuffle(candidates.begin(), candidates.end(),
                 std::mt19937(*rc::gen::arbitrary<uint32_t>()));
    mark = std::move(candidates);
  }
  void checkPreconditions(const Model& m) const override {
    RC_PRE(m.applied + count <= m.txns.size());
    // Two RC_PREs: rapidcheck decomposes `a && b` for printing and evaluates both sides.
    for (size_t i : mark) {
      RC_PRE(i < m.applied + count);
      RC_PRE(!m.txns[i].marked);
    }
  }
  void apply(Model& m) const override {
    m.applied += count;
    for (size_t i : mark) m.txns[i].marked = true;
  }
  void run(const Model& m, Sut& s) const override {
    for (size_t i = m.applied; i < m.applied + count; ++i) {
      absl::StatusOr<Transaction> t = s.journal_->ReadTransaction(s.lsns[i]);
      RC_ASSERT(t.ok());
      Apply(*t, &s.file);
    }
    for (size_t i : mark) RC_ASSERT(s.journal_->MarkApplied(s.lsns[i]).ok());
    CheckInvariant(nextState(m), s);
  }
  void show(std::ostream& os) const override {
    os << "Apply(" << count << "), mark {";
    for (size_t i : mark) os << i << " ";
    os << "}";
  }
};

// Closes and reopens the journal, then recovers as the runtime does at start: replays every
// pending transaction onto the file in LSN order and marks them applied (in random order).
// Reopen forgets marks of applied transactions that were kept, so recovery must run.
struct ReopenCmd : rc::state::Command<Model, Sut> {
  uint32_t seed = *rc::gen::arbitrary<uint32_t>();

  void apply(Model& m) const override {
    m.staged.clear();
    m.applied = m.txns.size();
    for (Model::Txn& t : m.txns) t.marked = true;
  }
  void run(const Model& m, Sut& s) const override {
    const std::vector<uint64_t> before = s.journal_->PendingLsns();
    s.journal_.reset();
    absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(s.Options());
    RC_ASSERT(j.ok());
    s.journal_ = *std::move(j);
    RC_ASSERT(s.journal_->PendingLsns() == before);
    Model reopened = m;
    reopened.staged.clear();
    CheckInvariant(reopened, s);

    absl::StatusOr<std::vector<Transaction>> pending = s.journal_->PendingTransactions();
    RC_ASSERT(pending.ok());
    std::vector<uint64_t> lsns;
    for (const Transaction& t : *pending) {
      Apply(t, &s.file);
      lsns.push_back(t.lsn);
    }
    std::shuffle(lsns.begin(), lsns.end(), std::mt19937(seed));
    for (uint64_t lsn : lsns) RC_ASSERT(s.journal_->MarkApplied(lsn).ok());
    CheckInvariant(nextState(m), s);
  }
  void show(std::ostream& os) const override { os << "Reopen and recover"; }
};

RC_GTEST_PROP(JournalModel, ReplayOfPendingTransactionsGivesTheCommittedState, ()) {
  Sut sut;
  sut.fs_->SkipSyncs(true);  // no power cuts here: clean closes only
  sut.OpenJournal();
  RC_ASSERT(sut.journal_ != nullptr);
  absl::StatusOr<uint64_t> id = sut.journal_->RegisterMapping(
      FileIdentity{"/model", 1, 2, 3}, kBlockSize, Policy::kAtomic, Contents::kData);
  RC_ASSERT(id.ok());
  sut.mapping = *id;
  Model model;
  rc::state::check(model, sut,
                   rc::state::gen::execOneOfWithArgs<StageCmd, StageCmd, CommitCmd, CommitCmd,
                                                     CommitCmd, ApplyCmd, ApplyCmd, ReopenCmd>());
}

}  // namespace
}  // namespace umap::journal
