#include "chaos/oracle.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace chaos {

const std::vector<uint64_t>& Model::Round(uint64_t r) const {
  auto it = rounds_.find(r);
  if (it == rounds_.end()) it = rounds_.emplace(r, RoundBlocks(seed_, r, blocks_)).first;
  return it->second;
}

std::vector<uint64_t> Model::StateAfter(uint64_t first, uint64_t k) const {
  std::vector<uint64_t> s = base_;
  for (uint64_t r = first; r <= k; ++r) {
    for (uint64_t b : Round(r)) s[b] = r;
  }
  return s;
}

bool Model::Written(uint64_t block, uint64_t version, uint64_t first, uint64_t hi) const {
  if (version == base_[block]) return true;
  if (version < first || version > hi) return false;
  const auto& r = Round(version);
  return std::binary_search(r.begin(), r.end(), block);
}

std::vector<uint64_t> Versions(const std::vector<Decoded>& file) {
  std::vector<uint64_t> v;
  v.reserve(file.size());
  for (const Decoded& d : file) v.push_back(d.version);
  return v;
}

namespace {

std::string Diff(const std::vector<uint64_t>& want, const std::vector<Decoded>& got) {
  std::string out;
  int shown = 0;
  for (size_t b = 0; b < want.size() && shown < 6; ++b) {
    if (got[b].version != want[b]) {
      absl::StrAppend(&out, shown ? ", " : "", "block ", b, ": file v", got[b].version,
                      " model v", want[b]);
      ++shown;
    }
  }
  return out;
}

}  // namespace

std::vector<Violation> Check(const Model& model, Policy policy, const EpochEvents& ev,
                             uint64_t writes_possible_upto, const std::vector<Decoded>& after,
                             const std::vector<Decoded>& before) {
  std::vector<Violation> out;
  const uint64_t first = ev.first_round;
  const uint64_t acked = std::max(ev.last_acked.value_or(first - 1), ev.committed.value_or(0));
  const uint64_t begun = std::max(acked, ev.last_begun.value_or(first - 1));
  bool torn = false;
  for (size_t b = 0; b < after.size(); ++b) {
    if (after[b].kind == Decoded::Kind::kZero) {
      // An initial hole that nobody wrote yet reads as zeros (version 0). Anywhere else zeros
      // are a lost block: the harness never wrote zeros, and no version is all zeros.
      if (!model.hole(b)) {
        torn = true;
        out.push_back({"atomicity", absl::StrCat("block ", b, " reads as all zeros, but the "
                                                 "harness never left it a hole")});
      }  // A hole that held a newer version before is caught as durability below.
    } else if (after[b].kind != Decoded::Kind::kVersion) {
      torn = true;
      out.push_back({"atomicity", absl::StrCat("block ", b, " matches no version written to it: ",
                                               after[b].why)});
    } else if (!model.Written(b, after[b].version, first, writes_possible_upto)) {
      out.push_back({"atomicity", absl::StrCat("block ", b, " holds version ", after[b].version,
                                               ", which was never written to it")});
    }
  }
  if (torn) return out;
  const std::vector<uint64_t> must = model.StateAfter(first, acked);
  for (size_t b = 0; b < after.size(); ++b) {
    if (after[b].version < must[b]) {
      out.push_back({"durability",
                     absl::StrCat("block ", b, " at version ", after[b].version,
                                  ", but umsync of round ", must[b],
                                  " that wrote it was acknowledged (last acknowledged round ",
                                  acked, ev.committed ? ", or committed before a data-disk "
                                                        "ENOSPC" : "", ")")});
    }
  }
  if (policy == Policy::kAtomic && out.empty()) {
    bool match = false;
    for (uint64_t j = acked; j <= begun && !match; ++j) {
      const std::vector<uint64_t> s = model.StateAfter(first, j);
      match = std::equal(s.begin(), s.end(), after.begin(),
                         [](uint64_t v, const Decoded& d) { return v == d.version; });
    }
    if (!match) {
      bool unsynced = false;
      for (size_t b = 0; b < after.size(); ++b) unsynced |= after[b].version > begun;
      out.push_back(
          {unsynced ? "atomicity" : "prefix",
           absl::StrCat(unsynced ? "writes of a round never umsync'ed reached the file; "
                                 : "the file is not the state after any one umsync (partial "
                                   "or out of order); ",
                        "acknowledged up to round ", acked, ", in flight/failed up to ", begun,
                        "; vs. after round ", acked, ": ", Diff(must, after), "; vs. after round ",
                        begun, ": ", Diff(model.StateAfter(first, begun), after))});
    }
  }
  for (size_t b = 0; b < before.size() && b < after.size(); ++b) {
    if ((before[b].kind == Decoded::Kind::kVersion || before[b].kind == Decoded::Kind::kZero) &&
        after[b].version < before[b].version) {
      out.push_back({"monotonicity", absl::StrCat("recovery moved block ", b, " back from version ",
                                                  before[b].version, " to ", after[b].version)});
    }
  }
  return out;
}

std::vector<Violation> CheckFileAlone(const Model& model, const EpochEvents& ev,
                                      uint64_t writes_possible_upto,
                                      const std::vector<Decoded>& after,
                                      const std::vector<Decoded>& before) {
  // Nothing acknowledged or known committed is owed: the relaxed policy then checks exactly
  // "a written version, no torn block, no step back".
  EpochEvents owed_nothing = ev;
  owed_nothing.last_acked.reset();
  owed_nothing.committed.reset();
  return Check(model, Policy::kRelaxed, owed_nothing, writes_possible_upto, after, before);
}

}  // namespace chaos
