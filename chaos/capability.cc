#include "chaos/capability.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "chaos/system.h"

namespace chaos {
namespace {

constexpr char kMissingUrl[] = "umap.dev/chaos/missing-capability";

}  // namespace

absl::Status MissingCapability(const std::string& line) {
  absl::Status s = absl::FailedPreconditionError(line);
  s.SetPayload(kMissingUrl, absl::Cord("1"));
  return s;
}

bool IsMissingCapability(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kMissingUrl).has_value();
}

absl::Status RequireCapabilities(const std::string& probe,
                                 const std::vector<std::string>& capabilities,
                                 const std::string& log) {
  std::vector<std::string> argv = {probe};
  argv.insert(argv.end(), capabilities.begin(), capabilities.end());
  Exit exit;
  absl::StatusOr<std::string> out = Capture(argv, log, &exit);
  const std::string what = absl::StrJoin(argv, " ");
  if (!out.ok()) return absl::InternalError(absl::StrCat(what, ": ", out.status().ToString()));
  const std::string line(absl::StripTrailingAsciiWhitespace(*out));
  if (exit.exited && exit.code == 0) return absl::OkStatus();
  if (exit.exited && exit.code == 1 && absl::StartsWith(line, "umap-skip: missing ")) {
    return MissingCapability(line);
  }
  return absl::InternalError(
      absl::StrCat(what, " failed (", exit.ToString(), "): '", line, "'; see ", log));
}

}  // namespace chaos
