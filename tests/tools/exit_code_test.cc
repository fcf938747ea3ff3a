// umap-recover's exit code for an error is decided by the errno it carries, one class per
// row of docs/recovery.md §6, not by the absl code absl::ErrnoToStatus happens to give the
// errno; statuses of our own (no errno) by their code. End to end: a journal on a mount
// whose FUSE connection was dropped (ENOTCONN, kFailedPrecondition in absl's mapping) is
// exit 3, "safe to rerun".
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/posix_error.h"
#include "faultinject/fuse/fault_fuse.h"
#include "recovery/recovery.h"
#include "tests/recovery/kill_workload.h"
#include "tests/recovery/subprocess.h"
#include "tests/testing/capability.h"
#include "tests/testing/temp_dir.h"

namespace umap::recovery {
namespace {

using ::testing::HasSubstr;

struct Row {
  ErrnoClass cls;
  std::vector<int> errnos;
  ExitCode exit;
};

// docs/recovery.md §6, row by row.
const std::vector<Row>& Rows() {
  static const auto* rows = new std::vector<Row>{
      {ErrnoClass::kTransient,
       {EIO, ENOTCONN, ESTALE, ETIMEDOUT, ECONNRESET, ECONNREFUSED, EHOSTDOWN, EHOSTUNREACH,
        ENETDOWN, ENETUNREACH, EAGAIN, EINTR, ENOMEM, EREMOTEIO, ENOLINK, ECANCELED},
       ExitCode::kIoError},
      {ErrnoClass::kNoSpace, {ENOSPC, EDQUOT}, ExitCode::kIoError},
      {ErrnoClass::kDenied, {EACCES, EPERM, EROFS, ETXTBSY}, ExitCode::kRefused},
      {ErrnoClass::kMissing, {ENOENT, ENOTDIR}, ExitCode::kRefused},
      {ErrnoClass::kBusy, {EBUSY}, ExitCode::kRefused},
      {ErrnoClass::kInvalid,
       {EINVAL, EISDIR, ELOOP, ENAMETOOLONG, EBADF, EFBIG, EXDEV, ENOSYS, EOPNOTSUPP, EOVERFLOW},
       ExitCode::kRefused},
  };
  return *rows;
}

TEST(ExitCodeTest, EveryErrnoOfARowHasItsClassAndExitCode) {
  for (const Row& row : Rows()) {
    for (int err : row.errnos) {
      const absl::Status s = PosixError(err, "stat /mnt/gv0/data");
      EXPECT_EQ(ClassifyErrno(err), row.cls) << "errno " << err;
      EXPECT_EQ(ExitCodeOf(s), row.exit) << "errno " << err << " (" << s << ")";
      // Reworded (what recovery adds to a message), it keeps its errno and its class.
      EXPECT_EQ(ExitCodeOf(Reword(s, "mapping 1: stat failed; safe to rerun")), row.exit);
    }
  }
}

TEST(ExitCodeTest, TheErrnoDecidesNotTheCodeErrnoToStatusPicked) {
  // absl maps ENOTCONN to kFailedPrecondition and EROFS to kFailedPrecondition too: one is
  // a dropped mount (rerun), the other a read-only file system (refused).
  EXPECT_EQ(absl::ErrnoToStatus(ENOTCONN, "").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ExitCodeOf(PosixError(ENOTCONN, "read")), ExitCode::kIoError);
  EXPECT_EQ(ExitCodeOf(PosixError(EROFS, "open")), ExitCode::kRefused);
  // A journal held by a live process: kUnavailable with EBUSY is refused.
  EXPECT_EQ(ExitCodeOf(WithErrno(absl::UnavailableError("journal in use"), EBUSY)),
            ExitCode::kRefused);
  // Corruption is refused whatever errno it carries (RocksDB's carry EIO).
  EXPECT_EQ(ExitCodeOf(WithErrno(absl::DataLossError("checksum mismatch"), EIO)),
            ExitCode::kRefused);
}

TEST(ExitCodeTest, StatusesWithoutAnErrnoGoByTheirCode) {
  EXPECT_EQ(ExitCodeOf(absl::OkStatus()), ExitCode::kOk);
  for (absl::Status s : {absl::NotFoundError("no journal"),
                         absl::FailedPreconditionError("newer format"),
                         absl::DataLossError("corrupt record"),
                         absl::InvalidArgumentError("bad option"),
                         absl::PermissionDeniedError("not yours")}) {
    EXPECT_EQ(ExitCodeOf(s), ExitCode::kRefused) << s;
  }
  for (absl::Status s : {absl::UnavailableError("journal I/O"),
                         absl::ResourceExhaustedError("full"), absl::UnknownError("?"),
                         absl::DeadlineExceededError("slow")}) {
    EXPECT_EQ(ExitCodeOf(s), ExitCode::kIoError) << s;
  }
}

// A journal on a DFS mount whose client died: every access is ENOTCONN. umap-recover says
// "I/O error ... safe to rerun" (exit 3) and writes nothing; the journal is intact below the
// mount, and a rerun that reaches it replays.
TEST(ExitCodeCliTest, AJournalOnADroppedMountIsSafeToRerun) {
  UMAP_SKIP_WITHOUT("root", "fuse");
  umap::testing::TempDir dir;
  absl::StatusOr<std::unique_ptr<faultinject::FaultFuse>> fuse =
      faultinject::FaultFuse::Start({.dir = dir.path()});
  ASSERT_TRUE(fuse.ok()) << fuse.status();
  const std::string file = dir.File("data"), journal = (*fuse)->Path("journal");
  ASSERT_TRUE(recoverytest::WriteFile(file, recoverytest::Contents({}, recoverytest::kKillBlocks)));
  recoverytest::ProcResult w = recoverytest::Run(
      {UMAP_KILL_WORKER_BIN, "backlog", file, journal, "3"}, dir.path());
  ASSERT_EQ(w.exit_code, 0) << w.err;
  ASSERT_TRUE((*fuse)->Abort().ok());
  recoverytest::ProcResult r = recoverytest::Run({UMAP_RECOVER_BIN, "--journal", journal},
                                                 dir.path());
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("not connected"));
  EXPECT_THAT(r.out, HasSubstr("safe to rerun"));
  EXPECT_EQ(recoverytest::ReadFile(file),
            recoverytest::Contents({}, recoverytest::kKillBlocks)) << "nothing written";
  recoverytest::ProcResult rerun = recoverytest::Run(
      {UMAP_RECOVER_BIN, "--journal", (*fuse)->BackingPath("journal")}, dir.path());
  EXPECT_EQ(rerun.exit_code, 0) << rerun.out << rerun.err;
  EXPECT_EQ(recoverytest::ReadFile(file),
            recoverytest::Contents(recoverytest::StateAfter(3), recoverytest::kKillBlocks));
}

}  // namespace
}  // namespace umap::recovery
