#include "faultinject/fuse/rule_book.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace umap::faultfuse {

int RuleBook::Arm(FuseRule rule) {
  absl::MutexLock l(&mu_);
  rules_.push_back(std::move(rule));
  return static_cast<int>(rules_.size()) - 1;
}

void RuleBook::Clear() {
  absl::MutexLock l(&mu_);
  rules_.clear();
}

void RuleBook::Reset() {
  absl::MutexLock l(&mu_);
  rules_.clear();
  requests_ = {};
  max_inflight_ = inflight_;
  fired_ = 0;
  max_stalled_ = stalled_;
  interrupts_ = 0;
  ignored_syncs_ = 0;
  first_request_ = next_request_;
  history_.clear();
}

RuleBook::Decision RuleBook::Arrive(FuseOp op, absl::string_view path, uint64_t offset,
                                    uint64_t len, bool direct) {
  absl::MutexLock l(&mu_);
  const int i = static_cast<int>(op);
  ++requests_[i];
  max_inflight_[i] = std::max(max_inflight_[i], ++inflight_[i]);
  Decision d;
  d.request = next_request_++;
  if (history_.size() == kMaxHistory) {
    history_.pop_front();
    ++first_request_;
  }
  history_.push_back(Entry{op, std::string(path), offset, len, direct});
  for (size_t r = 0; r < rules_.size(); ++r) {
    FuseRule& rule = rules_[r];
    if (rule.exhausted() || !rule.Takes(op, path, offset, len, direct)) continue;
    if (rule.skipped < rule.skip) {
      ++rule.skipped;
      continue;
    }
    ++rule.fired;
    ++fired_;
    d.outcome = rule.outcome;
    d.rule = static_cast<int>(r);
    break;
  }
  return d;
}

void RuleBook::Replied(FuseOp op, uint64_t request, int64_t result) {
  absl::MutexLock l(&mu_);
  --inflight_[static_cast<int>(op)];
  if (request < first_request_) return;
  Entry& e = history_[request - first_request_];
  e.done = true;
  e.result = result;
}

void RuleBook::NoteStalled(int delta) {
  absl::MutexLock l(&mu_);
  stalled_ += delta;
  max_stalled_ = std::max(max_stalled_, stalled_);
}

void RuleBook::NoteInterrupt(uint64_t request) {
  absl::MutexLock l(&mu_);
  ++interrupts_;
  if (request >= first_request_) history_[request - first_request_].interrupted = true;
}

void RuleBook::NoteIgnoredSync() {
  absl::MutexLock l(&mu_);
  ++ignored_syncs_;
}

std::string RuleBook::StatsLine() const {
  absl::MutexLock l(&mu_);
  std::string out;
  for (int i = 0; i < kNumFuseOps; ++i) {
    const absl::string_view name = FuseOpName(static_cast<FuseOp>(i));
    absl::StrAppend(&out, name, "=", requests_[i], " inflight_", name, "=", inflight_[i],
                    " max_inflight_", name, "=", max_inflight_[i], " ");
  }
  absl::StrAppend(&out, "stalled=", stalled_, " max_stalled=", max_stalled_,
                  " interrupts=", interrupts_, " ignored_fsyncs=", ignored_syncs_,
                  " fired=", fired_);
  return out;
}

std::string RuleBook::HistoryLine(absl::string_view path) const {
  absl::MutexLock l(&mu_);
  std::string out;
  for (const Entry& e : history_) {
    if (!path.empty() && !absl::StrContains(e.path, path)) continue;
    if (!out.empty()) out += ' ';
    std::string flags = absl::StrCat(e.direct ? "d" : "", e.interrupted ? "i" : "");
    absl::StrAppend(&out, FuseOpName(e.op), ",", e.path, ",", e.offset, ",", e.len, ",",
                    e.done ? absl::StrCat(e.result) : std::string("pending"), ",",
                    flags.empty() ? "-" : flags);
  }
  return out;
}

void RuleBook::ClearHistory() {
  absl::MutexLock l(&mu_);
  first_request_ = next_request_;
  history_.clear();
}

int RuleBook::WaitStalled(int n, absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stalled_ >= n; };
  mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  return stalled_;
}

int RuleBook::stalled() const {
  absl::MutexLock l(&mu_);
  return stalled_;
}

}  // namespace umap::faultfuse
