#include "chaos/tally.h"

#include <string.h>

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace chaos {

std::string ClassStats::CrashText() const {
  std::string out = absl::StrCat(crashes);
  if (crash_signals.empty()) return out;
  std::vector<std::string> parts;
  for (const auto& [sig, n] : crash_signals) {
    const char* abbrev = sigabbrev_np(sig);
    parts.push_back(abbrev != nullptr ? absl::StrCat("SIG", abbrev, " ", n)
                                      : absl::StrCat("signal ", sig, " ", n));
  }
  return absl::StrCat(out, " (", absl::StrJoin(parts, ", "), ")");
}

void Tally::Merge(const Tally& other) {
  for (const auto& [name, o] : other.classes_) {
    ClassStats& s = classes_[name];
    s.iterations += o.iterations;
    s.fired += o.fired;
    s.recoveries += o.recoveries;
    s.violations += o.violations;
    s.crashes += o.crashes;
    s.skipped += o.skipped;
    if (s.skip_reason.empty()) s.skip_reason = o.skip_reason;
    s.max_rss_growth_kib = std::max(s.max_rss_growth_kib, o.max_rss_growth_kib);
    s.max_rss_kib = std::max(s.max_rss_kib, o.max_rss_kib);
    for (const auto& [sig, n] : o.crash_signals) s.crash_signals[sig] += n;
  }
  for (const auto& [name, c] : other.points_) {
    points_[name].armed += c.armed;
    points_[name].fired += c.fired;
  }
  for (const auto& [name, c] : other.draws_) {
    draws_[name].armed += c.armed;
    draws_[name].fired += c.fired;
  }
}

// Lines "<kind> <numbers...> <name>": the name last, because names hold spaces.
std::string Tally::Serialize() const {
  std::string out;
  for (const auto& [name, s] : classes_) {
    absl::StrAppend(&out, "class ", s.iterations, " ", s.fired, " ", s.recoveries, " ",
                    s.violations, " ", s.crashes, " ", s.skipped, " ", s.max_rss_growth_kib, " ",
                    s.max_rss_kib, " ", name, "\n");
    for (const auto& [sig, n] : s.crash_signals) {
      absl::StrAppend(&out, "signal ", sig, " ", n, " ", name, "\n");
    }
    if (!s.skip_reason.empty()) absl::StrAppend(&out, "skip ", name, " ", s.skip_reason, "\n");
  }
  for (const auto& [name, c] : points_) {
    absl::StrAppend(&out, "point ", c.armed, " ", c.fired, " ", name, "\n");
  }
  for (const auto& [name, c] : draws_) {
    absl::StrAppend(&out, "draw ", c.armed, " ", c.fired, " ", name, "\n");
  }
  return out;
}

absl::StatusOr<Tally> Tally::Parse(const std::string& text) {
  Tally t;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    auto numbers = [&](size_t count, std::vector<uint64_t>* out) {
      if (f.size() < count + 2) return false;
      for (size_t i = 1; i <= count; ++i) {
        uint64_t v = 0;
        if (!absl::SimpleAtoi(f[i], &v)) return false;
        out->push_back(v);
      }
      return true;
    };
    auto rest = [&](size_t from) {
      return absl::StrJoin(f.begin() + static_cast<ptrdiff_t>(from), f.end(), " ");
    };
    std::vector<uint64_t> n;
    if (f[0] == "class" && numbers(8, &n)) {
      ClassStats& s = t.classes_[rest(9)];
      s.iterations = n[0], s.fired = n[1], s.recoveries = n[2], s.violations = n[3];
      s.crashes = n[4], s.skipped = n[5], s.max_rss_growth_kib = n[6], s.max_rss_kib = n[7];
    } else if (f[0] == "signal" && numbers(2, &n)) {
      t.classes_[rest(3)].crash_signals[static_cast<int>(n[0])] = n[1];
    } else if (f[0] == "skip" && f.size() >= 3) {
      t.classes_[std::string(f[1])].skip_reason = rest(2);
    } else if ((f[0] == "point" || f[0] == "draw") && numbers(2, &n)) {
      ArmedFired& c = (f[0] == "point" ? t.points_ : t.draws_)[rest(3)];
      c.armed = n[0], c.fired = n[1];
    } else {
      return absl::DataLossError(absl::StrCat("chaos tally: unreadable line '", line, "'"));
    }
  }
  return t;
}

}  // namespace chaos
