#include "faultinject/fuse/fuse_rule.h"

#include <cerrno>
#include <iterator>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace umap::faultfuse {
namespace {

struct NamedErrno {
  const char* name;
  int value;
};

// The errnos tests inject: those a DFS client returns, and those the runtime treats apart.
constexpr NamedErrno kErrnos[] = {
    {"EPERM", EPERM},           {"ENOENT", ENOENT},
    {"EINTR", EINTR},           {"EIO", EIO},
    {"ENXIO", ENXIO},           {"EBADF", EBADF},
    {"EAGAIN", EAGAIN},         {"ENOMEM", ENOMEM},
    {"EACCES", EACCES},         {"EBUSY", EBUSY},
    {"ENODEV", ENODEV},         {"EINVAL", EINVAL},
    {"EFBIG", EFBIG},           {"ENOSPC", ENOSPC},
    {"EROFS", EROFS},           {"EOVERFLOW", EOVERFLOW},
    {"ECONNRESET", ECONNRESET}, {"ENOTCONN", ENOTCONN},
    {"ETIMEDOUT", ETIMEDOUT},   {"EHOSTDOWN", EHOSTDOWN},
    {"ESTALE", ESTALE},         {"EDQUOT", EDQUOT},
    {"ECANCELED", ECANCELED},
};

constexpr const char* kOpNames[kNumFuseOps] = {"read", "write", "fsync", "open", "flush"};

absl::Status Bad(absl::string_view word, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("rule word '", word, "': ", why));
}

absl::StatusOr<uint64_t> Number(absl::string_view word, absl::string_view value) {
  uint64_t n;
  if (!absl::SimpleAtoi(value, &n)) return Bad(word, "not a non-negative number");
  return n;
}

// Applies one key=value (or bare key) word to `rule`.
absl::Status ApplyWord(absl::string_view word, FuseRule& rule) {
  const size_t eq = word.find('=');
  const absl::string_view key = word.substr(0, eq);
  const absl::string_view value = eq == absl::string_view::npos ? "" : word.substr(eq + 1);
  Outcome& o = rule.outcome;
  if (key == "ignore" && eq == absl::string_view::npos) {
    o.ignore_sync = true;
    return absl::OkStatus();
  }
  if (eq == absl::string_view::npos) return Bad(word, "expected key=value");
  if (key == "path") {
    if (value.empty()) return Bad(word, "empty path");
    rule.path = std::string(value);
  } else if (key == "at") {
    auto n = Number(word, value);
    if (!n.ok()) return n.status();
    rule.at = *n;
  } else if (key == "direct") {
    if (value != "0" && value != "1") return Bad(word, "direct is 0 or 1");
    rule.direct = value == "1";
  } else if (key == "skip" || key == "count") {
    auto n = Number(word, value);
    if (!n.ok()) return n.status();
    (key == "skip" ? rule.skip : rule.count) = *n;
  } else if (key == "error") {
    std::optional<int> e = ParseErrno(value);
    if (!e || *e <= 0 || *e >= 512) return Bad(word, "not an errno name or value in 1..511");
    o.error = *e;
  } else if (key == "stall") {
    if (value == "forever") {
      o.stall = Outcome::Stall::kUntilReleased;
    } else {
      auto n = Number(word, value);
      if (!n.ok()) return n.status();
      o.stall = Outcome::Stall::kTimed;
      o.stall_ms = *n;
    }
  } else if (key == "short" || key == "tear") {
    auto n = Number(word, value);
    if (!n.ok()) return n.status();
    (key == "short" ? o.short_bytes : o.tear_bytes) = *n;
  } else if (key == "intr") {
    if (value != "0" && value != "1") return Bad(word, "intr is 0 or 1");
    o.interruptible = value == "1";
  } else {
    return Bad(word, "unknown key");
  }
  return absl::OkStatus();
}

absl::Status Validate(const FuseRule& rule) {
  const Outcome& o = rule.outcome;
  const bool data_op = rule.op == FuseOp::kRead || rule.op == FuseOp::kWrite;
  if (o.tear_bytes && rule.op != FuseOp::kWrite) return Bad("tear", "only writes tear");
  if (o.short_bytes && !data_op) return Bad("short", "only reads and writes are short");
  if (o.short_bytes && o.tear_bytes) return Bad("short", "a write is short or torn, not both");
  if (o.short_bytes && o.error != 0) return Bad("short", "a short reply is a success");
  if (o.ignore_sync && rule.op != FuseOp::kFsync) return Bad("ignore", "only fsyncs are ignored");
  if (o.ignore_sync && o.error != 0) return Bad("ignore", "an ignored fsync succeeds");
  if (rule.at && !data_op) return Bad("at", "only reads and writes have offsets");
  if (o.interruptible && o.stall == Outcome::Stall::kNone) return Bad("intr", "needs a stall");
  if (o.error == 0 && !o.short_bytes && !o.tear_bytes && !o.ignore_sync &&
      o.stall == Outcome::Stall::kNone) {
    return Bad(FuseOpName(rule.op),
               "the rule changes nothing (no error, stall, short, "
               "tear or ignore)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view FuseOpName(FuseOp op) { return kOpNames[static_cast<int>(op)]; }

std::optional<FuseOp> ParseFuseOp(absl::string_view name) {
  for (int i = 0; i < kNumFuseOps; ++i) {
    if (name == kOpNames[i]) return static_cast<FuseOp>(i);
  }
  return std::nullopt;
}

std::optional<int> ParseErrno(absl::string_view text) {
  for (const NamedErrno& e : kErrnos) {
    if (text == e.name) return e.value;
  }
  int n;
  if (absl::SimpleAtoi(text, &n)) return n;
  return std::nullopt;
}

std::string ErrnoName(int err) {
  for (const NamedErrno& e : kErrnos) {
    if (err == e.value) return e.name;
  }
  return absl::StrCat(err);
}

absl::StatusOr<FuseRule> FuseRule::Parse(absl::string_view text) {
  std::vector<absl::string_view> words = absl::StrSplit(text, ' ', absl::SkipEmpty());
  if (words.empty()) return absl::InvalidArgumentError("empty rule");
  FuseRule rule;
  std::optional<FuseOp> op = ParseFuseOp(words[0]);
  if (!op) return Bad(words[0], "unknown op (read, write, fsync, open, flush)");
  rule.op = *op;
  for (auto it = std::next(words.begin()); it != words.end(); ++it) {
    if (absl::Status s = ApplyWord(*it, rule); !s.ok()) return s;
  }
  if (rule.outcome.tear_bytes && rule.outcome.error == 0) rule.outcome.error = EIO;
  if (absl::Status s = Validate(rule); !s.ok()) return s;
  return rule;
}

bool FuseRule::Takes(FuseOp request_op, absl::string_view request_path, uint64_t offset,
                     uint64_t len, bool request_direct) const {
  if (request_op != op) return false;
  if (!path.empty() && !absl::StrContains(request_path, path)) return false;
  if (direct && *direct != request_direct) return false;
  if (at && !(offset <= *at && *at < offset + len)) return false;
  return true;
}

}  // namespace umap::faultfuse
