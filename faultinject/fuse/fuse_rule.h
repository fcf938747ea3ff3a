// FuseRule: one armed fault of the fault-injecting FUSE file system (umap-faultfuse), and
// its text form, as the control socket receives it (docs/testing.md, "The FUSE fault file
// system", is the reference of the syntax):
//
//   OP [path=SUBSTR] [at=OFFSET] [direct=0|1] [skip=K] [count=N]
//      [error=ERRNO] [stall=MS|forever] [short=BYTES] [tear=BYTES] [ignore] [intr=0|1]
//
// OP is read, write, fsync, open or flush. The filters say which requests the rule takes:
// path (a substring of the file's path below the mount), at (the request's byte range
// contains OFFSET: read and write only), direct (the file handle was opened with O_DIRECT,
// or not). Of the requests it takes, the first `skip` pass untouched, the next `count`
// (default 1; 0 means every one from then on) get the rule's outcome:
//   error=E    the request fails with errno E (a name such as EIO or a number); nothing of
//              it reaches the backing file, except the prefix of a torn write;
//   stall=MS   the reply is held for MS milliseconds, or until released (`forever`); then
//              the request proceeds (or fails, with error=). A stalled write reaches the
//              backing file only when it proceeds;
//   short=B    read: the reply carries at most B bytes; write: only the first B bytes are
//              written and the reply says B;
//   tear=B     write: the first B bytes are written at once (before any stall), then the
//              request fails with error= (default EIO);
//   ignore     fsync: replies success without syncing the backing file;
//   intr=1     a stall ends early when the kernel interrupts the request (FUSE_INTERRUPT:
//              a signal in the waiting thread, an io_uring cancellation): the reply is then
//              EINTR and nothing is written. Default 0: interrupts are counted and ignored,
//              as a hung server does.
#ifndef UMAP_FAULTINJECT_FUSE_FUSE_RULE_H_
#define UMAP_FAULTINJECT_FUSE_FUSE_RULE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace umap::faultfuse {

enum class FuseOp { kRead, kWrite, kFsync, kOpen, kFlush };
inline constexpr int kNumFuseOps = 5;
absl::string_view FuseOpName(FuseOp op);
std::optional<FuseOp> ParseFuseOp(absl::string_view name);

// An errno from its name ("EIO") or its decimal value ("5"); nullopt for anything else.
std::optional<int> ParseErrno(absl::string_view text);
// "EIO" for 5; the decimal value for errnos without a name here.
std::string ErrnoName(int err);

// What happens to one request a rule fired on (also the outcome of a request no rule took:
// every field at its default).
struct Outcome {
  enum class Stall { kNone, kTimed, kUntilReleased };
  int error = 0;                        // errno of the reply; 0: success
  std::optional<uint64_t> short_bytes;  // read/write: at most this many bytes
  std::optional<uint64_t> tear_bytes;   // write: this prefix lands, then `error`
  bool ignore_sync = false;             // fsync: reply 0, do not sync
  Stall stall = Stall::kNone;
  uint64_t stall_ms = 0;       // kTimed
  bool interruptible = false;  // a FUSE_INTERRUPT ends the stall with EINTR
};

struct FuseRule {
  FuseOp op = FuseOp::kRead;
  std::string path;            // empty: every file
  std::optional<uint64_t> at;  // the request's range must contain this offset
  std::optional<bool> direct;  // the handle's O_DIRECT must be this
  uint64_t skip = 0;
  uint64_t count = 1;  // 0: unlimited
  Outcome outcome;

  // Progress, under the rule book's lock.
  uint64_t skipped = 0;
  uint64_t fired = 0;

  // Parses the text form (see the header comment). Errors: kInvalidArgument naming the
  // offending word, for an unknown op or key, a bad number or errno, or a combination that
  // does not apply to the op (tear on a read, short on an fsync, ignore on a write, a torn
  // write without bytes, an outcome that changes nothing).
  static absl::StatusOr<FuseRule> Parse(absl::string_view text);

  // Whether the filters take a request (skip and count aside).
  bool Takes(FuseOp request_op, absl::string_view request_path, uint64_t offset, uint64_t len,
             bool request_direct) const;
  bool exhausted() const { return count != 0 && fired >= count; }
};

}  // namespace umap::faultfuse

#endif  // UMAP_FAULTINJECT_FUSE_FUSE_RULE_H_
