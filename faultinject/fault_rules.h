// FaultRules: the rule engine of the fault-injecting wrappers (FaultEnv for the file
// backend, FaultFs for the journal's RocksDB FileSystem). Per operation at most one rule;
// a rule fires on the next N matching calls (FailNext) or on each matching call with
// probability 1/n drawn from its own seed (FailOneIn: the same seed and the same sequence
// of calls give the same failures). A fault whose `sticky` is set keeps firing on every
// later matching call once it fired (a disk that stays full), until cleared; otherwise a
// FailNext rule ends after N. A call matches when the fault's path filter accepts the
// file's path; calls that do not match are not counted and draw nothing.
//
// What a fault does when it fires (an error, a torn write, a sync that loses its data, ...)
// is the wrapper's business: the engine only decides, and hands back the fault with a
// random draw for the wrapper's choices (the prefix of a torn write).
//
// Fault must be copyable and have
//   bool sticky;                                    // see above
//   bool Matches(absl::string_view path) const;     // the path filter
//
// Thread safety: every method may be called concurrently.
#ifndef UMAP_FAULTINJECT_FAULT_RULES_H_
#define UMAP_FAULTINJECT_FAULT_RULES_H_

#include <array>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace umap::faultinject {

// splitmix64: tiny, seedable, and the same on every platform (std distributions are not).
inline uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <typename Op, int kNumOps, typename Fault>
class FaultRules {
 public:
  // A rule that fired for this call.
  struct Fired {
    Fault fault;
    uint64_t draw;  // 0 unless Decide was asked for one
  };

  // `seed` drives the draws of FailNext rules (FailOneIn rules draw from their own seed).
  explicit FaultRules(uint64_t seed) : rng_(seed) {}

  // Errors: kInvalidArgument when count < 1. Replaces the op's rule.
  absl::Status FailNext(Op op, int count, Fault fault) {
    if (count < 1) return absl::InvalidArgumentError(absl::StrCat("FailNext count ", count));
    Rule r;
    r.fault = std::move(fault);
    r.remaining = count;
    Set(op, std::move(r));
    return absl::OkStatus();
  }
  // Errors: kInvalidArgument when n < 1. n == 1 fires on every matching call.
  absl::Status FailOneIn(Op op, uint32_t n, uint64_t seed, Fault fault) {
    if (n < 1) return absl::InvalidArgumentError("FailOneIn needs n >= 1");
    Rule r;
    r.fault = std::move(fault);
    r.one_in = n;
    r.rng = seed;
    Set(op, std::move(r));
    return absl::OkStatus();
  }
  void Clear(Op op) {
    absl::MutexLock l(&mu_);
    rules_[static_cast<int>(op)].reset();
  }
  void ClearAll() {
    absl::MutexLock l(&mu_);
    for (auto& r : rules_) r.reset();
  }

  // Whether this call of `op` on `path` fails, and how. with_draw: also draw a random
  // number for the wrapper (from the rule's seed for FailOneIn, else from the engine's).
  std::optional<Fired> Decide(Op op, absl::string_view path, bool with_draw) {
    absl::MutexLock l(&mu_);
    std::optional<Rule>& rule = rules_[static_cast<int>(op)];
    if (!rule || !rule->fault.Matches(path)) return std::nullopt;
    if (!rule->stuck) {
      if (rule->one_in > 0) {
        if (NextRandom(&rule->rng) % rule->one_in != 0) return std::nullopt;
      } else if (rule->remaining-- <= 0) {
        return std::nullopt;  // not reached: a spent rule is removed below
      }
    }
    Fired fired{rule->fault, 0};
    if (with_draw) fired.draw = NextRandom(rule->one_in > 0 ? &rule->rng : &rng_);
    if (rule->fault.sticky) {
      rule->stuck = true;
    } else if (rule->one_in == 0 && rule->remaining <= 0) {
      rule.reset();
    }
    return fired;
  }

 private:
  struct Rule {
    Fault fault;
    int remaining = 0;    // FailNext: matching calls left to fail
    uint32_t one_in = 0;  // FailOneIn: n
    uint64_t rng = 0;     // FailOneIn: the rule's generator
    bool stuck = false;   // a sticky fault that fired: every later call fails
  };

  void Set(Op op, Rule rule) {
    absl::MutexLock l(&mu_);
    rules_[static_cast<int>(op)] = std::move(rule);
  }

  absl::Mutex mu_;
  std::array<std::optional<Rule>, kNumOps> rules_ ABSL_GUARDED_BY(mu_);
  uint64_t rng_ ABSL_GUARDED_BY(mu_);
};

}  // namespace umap::faultinject

#endif  // UMAP_FAULTINJECT_FAULT_RULES_H_
