#include "journal/rocksdb_status.h"

#include <cerrno>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/posix_error.h"
#include "tests/testing/status_matchers.h"

namespace umap::journal {
namespace {

using ::testing::HasSubstr;
using ::umap::testing::StatusIs;

TEST(JournalRocksDbStatus, OkIsOk) { EXPECT_OK(FromRocksDb(rocksdb::Status::OK(), "x")); }

TEST(JournalRocksDbStatus, NoSpaceIsResourceExhaustedWithEnospc) {
  absl::Status s = FromRocksDb(rocksdb::Status::NoSpace("wal"), "commit");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ErrnoFromStatus(s), ENOSPC);
}

TEST(JournalRocksDbStatus, IoErrorIsUnavailableWithEioAndKeepsContext) {
  absl::Status s = FromRocksDb(rocksdb::Status::IOError("fsync failed"), "commit in /j");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(ErrnoFromStatus(s), EIO);
  EXPECT_THAT(s.message(), HasSubstr("commit in /j"));
  EXPECT_THAT(s.message(), HasSubstr("fsync failed"));
}

TEST(JournalRocksDbStatus, CorruptionIsDataLossWithEio) {
  absl::Status s = FromRocksDb(rocksdb::Status::Corruption("bad block"), "read");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(ErrnoFromStatus(s), EIO);
}

TEST(JournalRocksDbStatus, CallerErrorsKeepTheirCodes) {
  EXPECT_THAT(FromRocksDb(rocksdb::Status::NotFound(), "x"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(FromRocksDb(rocksdb::Status::InvalidArgument(), "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(FromRocksDb(rocksdb::Status::NotSupported(), "x"),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(FromRocksDb(rocksdb::Status::Busy(), "x"),
              StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace umap::journal
