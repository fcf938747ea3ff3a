#include "bench/backend.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace umap_bench {
namespace {

struct Family {
  std::string help;
  BackendFactory factory;
};

// Filled during static initialisation (before main, single-threaded), read-only after.
// Never destroyed: a registrar in another translation unit may run before or after us.
std::map<std::string, Family>& Families() {
  static auto* families = new std::map<std::string, Family>();
  return *families;
}

}  // namespace

bool RegisterBackendFamily(const char* family, const char* help, BackendFactory factory) {
  return Families().emplace(family, Family{help, factory}).second;
}

std::string BackendFamily(const std::string& name) { return name.substr(0, name.find('+')); }

absl::StatusOr<std::unique_ptr<BenchBackend>> NewBackend(const std::string& name,
                                                         const BackendOptions& options) {
  const std::string family = BackendFamily(name);
  auto it = Families().find(family);
  if (it == Families().end()) {
    std::vector<std::string> known;
    for (const auto& [n, f] : Families()) known.push_back(n);
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend '", name, "' (", absl::StrJoin(known, ", "), ")"));
  }
  const std::string variant =
      family.size() < name.size() ? name.substr(family.size() + 1) : std::string();
  absl::StatusOr<std::unique_ptr<BenchBackend>> b = it->second.factory(variant, options);
  if (!b.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("backend '", name, "': ", b.status().message(),
                                                   " (", family, ": ", it->second.help, ")"));
  }
  return b;
}

std::vector<std::string> BackendHelp() {
  std::vector<std::string> out;
  for (const auto& [n, f] : Families()) out.push_back(absl::StrCat(n, ": ", f.help));
  return out;
}

const char* AdviceName(Advice a) {
  switch (a) {
    case Advice::kDefault:
      return "default";
    case Advice::kNormal:
      return "normal";
    case Advice::kRandom:
      return "random";
    case Advice::kSequential:
      return "sequential";
  }
  return "?";
}

absl::StatusOr<Advice> ParseAdvice(const std::string& s) {
  for (Advice a : {Advice::kDefault, Advice::kNormal, Advice::kRandom, Advice::kSequential}) {
    if (s == AdviceName(a)) return a;
  }
  if (s == "seq") return Advice::kSequential;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown madvise '", s, "' (default, normal, random, sequential or seq)"));
}

const char* PolicyName(umap_policy p) { return p == UMAP_POLICY_RELAXED ? "relaxed" : "atomic"; }

const char* JournalModeName(umap_journal_mode m) {
  switch (m) {
    case UMAP_JOURNAL_DATA:
      return "data";
    case UMAP_JOURNAL_INTENT:
      return "intent";
    case UMAP_JOURNAL_OFF:
      return "off";
  }
  return "?";
}

absl::StatusOr<umap_policy> ParsePolicy(const std::string& s) {
  if (s == "atomic") return UMAP_POLICY_ATOMIC;
  if (s == "relaxed") return UMAP_POLICY_RELAXED;
  return absl::InvalidArgumentError(absl::StrCat("unknown policy '", s, "' (atomic, relaxed)"));
}

absl::StatusOr<umap_journal_mode> ParseJournalMode(const std::string& s) {
  for (umap_journal_mode m : {UMAP_JOURNAL_DATA, UMAP_JOURNAL_INTENT, UMAP_JOURNAL_OFF}) {
    if (s == JournalModeName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown journal mode '", s, "' (data, intent, off)"));
}

}  // namespace umap_bench
