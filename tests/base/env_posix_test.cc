#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <gtest/gtest.h>

#include "base/posix_error.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "base/status_macros.h"
#include "umap/env.h"

namespace umap {
namespace {

using ::umap::testing::StatusIs;

class EnvPosixTest : public ::testing::Test {
 protected:
  Env* env_ = Env::Default();
  ::umap::testing::TempDir dir_;
};

TEST_F(EnvPosixTest, WriteThenReadBack) {
  std::string path = dir_.File("f");
  int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_OK_AND_ASSIGN(auto f, env_->AdoptFd(fd, OpenMode::kReadWrite));
  ::close(fd);
  ASSERT_OK(f->WriteAt(4096, std::string("hello")));
  ASSERT_OK(f->Sync());
  char buf[8] = {};
  ASSERT_OK_AND_ASSIGN(size_t n, f->ReadAt(4096, absl::MakeSpan(buf, 8)));
  EXPECT_EQ(n, 5u) << "short read only at end of file";
  EXPECT_EQ(std::string(buf, 5), "hello");
  ASSERT_OK_AND_ASSIGN(uint64_t size, f->Size());
  EXPECT_EQ(size, 4101u);
  ASSERT_OK_AND_ASSIGN(FileIdentity id, f->Identify());
  EXPECT_EQ(id.path, path);
}

TEST_F(EnvPosixTest, MissingFileIsNotFoundWithTheErrno) {
  auto f = env_->OpenFile(dir_.File("nope"), OpenMode::kReadOnly);
  EXPECT_THAT(f, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(ErrnoFromStatus(f.status()), ENOENT);
  EXPECT_NE(f.status().message().find("nope"), std::string::npos) << "names the path";
}

TEST_F(EnvPosixTest, AdoptingAReadOnlyFdForWritingIsEacces) {
  std::string path = dir_.File("ro");
  int fd = ::open(path.c_str(), O_CREAT | O_RDONLY, 0600);
  ASSERT_GE(fd, 0);
  auto f = env_->AdoptFd(fd, OpenMode::kReadWrite);
  ::close(fd);
  EXPECT_EQ(ErrnoFromStatus(f.status()), EACCES);
}

TEST_F(EnvPosixTest, WriteToReadOnlyFileReportsEbadf) {
  std::string path = dir_.File("ro2");
  int fd = ::open(path.c_str(), O_CREAT | O_RDONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_OK_AND_ASSIGN(auto f, env_->AdoptFd(fd, OpenMode::kReadOnly));
  ::close(fd);
  absl::Status s = f->WriteAt(0, std::string("x"));
  EXPECT_EQ(ErrnoFromStatus(s), EBADF);
}

TEST_F(EnvPosixTest, IdentifyPathMatchesTheOpenFile) {
  std::string path = dir_.File("id");
  int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  ASSERT_OK_AND_ASSIGN(auto f, env_->OpenFile(path, OpenMode::kReadWrite));
  ASSERT_OK_AND_ASSIGN(FileIdentity a, f->Identify());
  ASSERT_OK_AND_ASSIGN(FileIdentity b, env_->IdentifyPath(path));
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace umap
