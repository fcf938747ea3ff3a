#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "base/posix_error.h"
#include "base/status_macros.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
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

// The birth that tells a file from one created later at its inode number: the birth time
// where the file system keeps one (ext4, tmpfs), the same through the descriptor and the
// path; a file deleted and created again has another.
TEST_F(EnvPosixTest, IdentityCarriesTheBirthTimeAndARecreatedFileHasAnother) {
  std::string path = dir_.File("born");
  ::close(::open(path.c_str(), O_CREAT | O_RDWR, 0600));
  ASSERT_OK_AND_ASSIGN(auto f, env_->OpenFile(path, OpenMode::kReadWrite));
  ASSERT_OK_AND_ASSIGN(FileIdentity a, f->Identify());
  ASSERT_EQ(a.birth, FileBirth::kBirthTime) << "this test needs a file system with birth times";
  EXPECT_GT(a.birth_a, 0u);
  ASSERT_OK_AND_ASSIGN(FileIdentity by_path, env_->IdentifyPath(path));
  EXPECT_EQ(a, by_path);
  f.reset();
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ::usleep(1000);
  ::close(::open(path.c_str(), O_CREAT | O_RDWR, 0600));
  ASSERT_OK_AND_ASSIGN(auto g, env_->OpenFile(path, OpenMode::kReadWrite));
  ASSERT_OK_AND_ASSIGN(FileIdentity b, g->Identify());
  EXPECT_NE(std::make_pair(a.birth_a, a.birth_b), std::make_pair(b.birth_a, b.birth_b));
}

// StampIdentity gives the file an id of its own in user.umap.id, once: a second stamp keeps
// it, and the id is 16 random bytes.
TEST_F(EnvPosixTest, StampIdentityWritesAnIdOnceAndKeepsIt) {
  std::string path = dir_.File("stamped");
  ::close(::open(path.c_str(), O_CREAT | O_RDWR, 0600));
  ASSERT_OK_AND_ASSIGN(auto f, env_->OpenFile(path, OpenMode::kReadWrite));
  ASSERT_OK(f->StampIdentity());
  char first[32] = {}, second[32] = {};
  ASSERT_EQ(::getxattr(path.c_str(), "user.umap.id", first, sizeof(first)), 16);
  ASSERT_OK(f->StampIdentity());
  ASSERT_EQ(::getxattr(path.c_str(), "user.umap.id", second, sizeof(second)), 16);
  EXPECT_EQ(std::string(first, 16), std::string(second, 16));
  EXPECT_NE(std::string(first, 16), std::string(16, '\0'));
}

}  // namespace
}  // namespace umap
