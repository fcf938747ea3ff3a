#include "base/direct_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/fs_kind.h"
#include "base/mem_env.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "umap/env.h"

namespace umap {
namespace {

constexpr size_t kPage = DirectWriter::kAlign;
// These tests write through O_DIRECT, which the local disk file systems a build runs on
// take (ext4, XFS, btrfs). Not a skip: a TMPDIR elsewhere is a setup error.
constexpr const char* kNeedsLocal =
    "TMPDIR must be on a local file system that takes O_DIRECT (ext4, XFS, btrfs)";

// Records every call of the WriteFn: which description it was given, and the pieces, then
// writes them with File::WriteAt.
struct Recorder {
  struct Call {
    File* file;
    std::vector<WritePiece> pieces;
  };
  std::vector<Call> calls;
  int refuse_direct_with = 0;  // errno returned for writes to any file but `buffered`
  File* buffered = nullptr;

  absl::Status operator()(File* f, absl::Span<const WritePiece> pieces) {
    calls.push_back({f, std::vector<WritePiece>(pieces.begin(), pieces.end())});
    if (f != buffered && refuse_direct_with != 0) {
      return PosixError(refuse_direct_with, "direct write refused (test)");
    }
    for (const WritePiece& p : pieces) {
      absl::Status s = f->WriteAt(p.offset, absl::MakeConstSpan(p.data, p.len));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  size_t PiecesTo(File* f) const {
    size_t n = 0;
    for (const Call& c : calls) n += c.file == f ? c.pieces.size() : 0;
    return n;
  }
};

class DirectWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("data");
    const int fd = ::open(path_.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 64 * kPage), 0);
    ASSERT_OK_AND_ASSIGN(file_, Env::Default()->AdoptFd(fd, OpenMode::kReadWrite));
    ::close(fd);
    rec_.buffered = file_.get();
  }

  // A page-aligned buffer of n pages, page i filled with byte 'a' + i.
  std::vector<char, PageAlignedAllocator<char>> Pages(size_t n) {
    std::vector<char, PageAlignedAllocator<char>> buf(n * kPage);
    for (size_t i = 0; i < n; ++i) std::memset(buf.data() + i * kPage, 'a' + int(i % 26), kPage);
    return buf;
  }

  std::string ReadFile(uint64_t offset, size_t len) {
    std::string out(len, '\0');
    auto n = file_->ReadAt(offset, absl::MakeSpan(out));
    EXPECT_TRUE(n.ok()) << n.status();
    return out;
  }

  // Pages of [offset, offset + len) of the file that the page cache holds.
  size_t CachedPages(uint64_t offset, size_t len) {
    const int fd = ::open(path_.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset));
    ::close(fd);
    EXPECT_NE(m, MAP_FAILED);
    std::vector<unsigned char> vec(len / kPage);
    EXPECT_EQ(::mincore(m, len, vec.data()), 0);
    ::munmap(m, len);
    size_t n = 0;
    for (unsigned char v : vec) n += v & 1;
    return n;
  }

  bool LocalFileSystem() const { return FsKindOfPath(path_) == FsKind::kLocal; }

  ::umap::testing::TempDir dir_;
  std::string path_;
  std::unique_ptr<File> file_;
  Recorder rec_;
};

TEST_F(DirectWriterTest, WholePagesBypassThePageCacheAndThePartialTailDoesNot) {
  ASSERT_TRUE(LocalFileSystem()) << kNeedsLocal;
  DirectWriter w(file_.get());
  ASSERT_TRUE(w.direct()) << kNeedsLocal;
  auto buf = Pages(4);
  // Two aligned pages, then a 100-byte piece (the end of a file).
  std::vector<WritePiece> pieces = {{0, buf.data(), 2 * kPage},
                                    {8 * kPage, buf.data() + 2 * kPage, kPage},
                                    {20 * kPage, buf.data() + 3 * kPage, 100}};
  ASSERT_OK(w.Write(pieces, std::ref(rec_)));
  EXPECT_EQ(rec_.PiecesTo(file_.get()), 1u) << "only the partial piece is buffered";
  EXPECT_EQ(rec_.calls.size(), 2u);
  ASSERT_OK(file_->Sync());
  // (Before any read back: buffered reads fill the page cache.)
  EXPECT_EQ(CachedPages(0, 16 * kPage), 0u)
      << "the direct pages were not copied into the page cache";
  EXPECT_EQ(CachedPages(20 * kPage, kPage), 1u) << "the partial one was";
  EXPECT_EQ(ReadFile(0, 2 * kPage), std::string(buf.data(), 2 * kPage));
  EXPECT_EQ(ReadFile(8 * kPage, kPage), std::string(buf.data() + 2 * kPage, kPage));
  EXPECT_EQ(ReadFile(20 * kPage, 100), std::string(buf.data() + 3 * kPage, 100));
}

TEST_F(DirectWriterTest, UnalignedMemoryIsBouncedIntoAlignedBuffersInOrder) {
  ASSERT_TRUE(LocalFileSystem()) << kNeedsLocal;
  DirectWriter w(file_.get());
  ASSERT_TRUE(w.direct()) << kNeedsLocal;
  // Whole-page images at an odd address: the way a journal's copies of images lie.
  const size_t n = DirectWriter::kBounceBytes / kPage + 3;  // more than one bounce round
  std::string src(n * kPage + 1, '\0');
  for (size_t i = 0; i < n; ++i) std::memset(src.data() + 1 + i * kPage, 'A' + int(i % 26), kPage);
  const int fd = ::open(path_.c_str(), O_RDWR);
  ASSERT_EQ(::ftruncate(fd, (2 * n + 2) * kPage), 0);
  ::close(fd);
  std::vector<WritePiece> pieces;
  for (size_t i = 0; i < n; ++i) pieces.push_back({2 * i * kPage, src.data() + 1 + i * kPage, kPage});
  ASSERT_OK(w.Write(pieces, std::ref(rec_)));
  EXPECT_EQ(rec_.PiecesTo(file_.get()), 0u);
  ASSERT_GE(rec_.calls.size(), 2u) << "more than kBounceBytes of copies take rounds";
  uint64_t last = 0;
  size_t written = 0;
  for (const Recorder::Call& c : rec_.calls) {
    for (const WritePiece& p : c.pieces) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p.data) % kPage, 0u) << "bounced to an aligned buffer";
      EXPECT_TRUE(written == 0 || p.offset > last) << "file order kept across rounds";
      last = p.offset;
      ++written;
    }
  }
  EXPECT_EQ(written, n) << "each piece written once";
  for (size_t i = 0; i < n; i += n / 7) {
    EXPECT_EQ(ReadFile(2 * i * kPage, kPage), std::string(kPage, char('A' + int(i % 26))));
  }
}

TEST_F(DirectWriterTest, ASecondCallReusesTheBounceBufferAndWritesItsOwnBytes) {
  ASSERT_TRUE(LocalFileSystem()) << kNeedsLocal;
  DirectWriter w(file_.get());
  ASSERT_TRUE(w.direct()) << kNeedsLocal;
  // Two calls of 8 unaligned pages each, different bytes: the second is bounced through the
  // buffer the first one used (kept between calls), and its own bytes reach the file.
  std::string src(16 * kPage + 1, '\0');
  for (size_t i = 0; i < 16; ++i) std::memset(src.data() + 1 + i * kPage, 'a' + int(i), kPage);
  std::vector<WritePiece> first, second;
  for (size_t i = 0; i < 8; ++i) {
    first.push_back({i * kPage, src.data() + 1 + i * kPage, kPage});
    second.push_back({(32 + i) * kPage, src.data() + 1 + (8 + i) * kPage, kPage});
  }
  ASSERT_OK(w.Write(first, std::ref(rec_)));
  ASSERT_EQ(rec_.calls.size(), 1u);
  const char* bounce = rec_.calls[0].pieces[0].data;
  // Had the buffer been unmapped, this would most likely take its address, and a new
  // buffer for the second call would lie elsewhere.
  void* squat = ::mmap(nullptr, 8 * kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(squat, MAP_FAILED);
  ASSERT_OK(w.Write(second, std::ref(rec_)));
  ::munmap(squat, 8 * kPage);
  ASSERT_EQ(rec_.calls.size(), 2u);
  EXPECT_EQ(rec_.calls[1].pieces[0].data, bounce) << "the kept buffer, not a new mapping";
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(ReadFile(i * kPage, kPage), std::string(kPage, char('a' + int(i))));
    EXPECT_EQ(ReadFile((32 + i) * kPage, kPage), std::string(kPage, char('a' + int(8 + i))));
  }
}

TEST_F(DirectWriterTest, ARefusedDirectWriteGoesThroughThePageCacheFromThenOn) {
  ASSERT_TRUE(LocalFileSystem()) << kNeedsLocal;
  DirectWriter w(file_.get());
  ASSERT_TRUE(w.direct()) << kNeedsLocal;
  auto buf = Pages(2);
  std::vector<WritePiece> pieces = {{0, buf.data(), kPage}, {4 * kPage, buf.data() + kPage, kPage}};
  rec_.refuse_direct_with = EINVAL;
  ASSERT_OK(w.Write(pieces, std::ref(rec_)));
  EXPECT_FALSE(w.direct());
  EXPECT_EQ(rec_.PiecesTo(file_.get()), 2u) << "every piece again, buffered";
  EXPECT_EQ(ReadFile(4 * kPage, kPage), std::string(buf.data() + kPage, kPage));
  rec_.calls.clear();
  ASSERT_OK(w.Write(pieces, std::ref(rec_)));
  ASSERT_EQ(rec_.calls.size(), 1u);
  EXPECT_EQ(rec_.calls[0].file, file_.get()) << "no further direct attempt";
}

TEST_F(DirectWriterTest, AnotherDirectWriteErrorIsReturnedNotRetriedBuffered) {
  ASSERT_TRUE(LocalFileSystem()) << kNeedsLocal;
  DirectWriter w(file_.get());
  auto buf = Pages(1);
  std::vector<WritePiece> pieces = {{0, buf.data(), kPage}};
  rec_.refuse_direct_with = EIO;
  absl::Status s = w.Write(pieces, std::ref(rec_));
  EXPECT_EQ(ErrnoFromStatus(s), EIO) << s;
  EXPECT_TRUE(w.direct());
  EXPECT_EQ(rec_.PiecesTo(file_.get()), 0u) << "an I/O error is the caller's to handle";
}

TEST(DirectWriterMemEnvTest, AFileWithoutDirectIoWritesEverythingBuffered) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK(MemEnvWriteFile(env.get(), "/f", std::string(2 * kPage, '\0')));
  ASSERT_OK_AND_ASSIGN(auto file, env->OpenFile("/f", OpenMode::kReadWrite));
  DirectWriter w(file.get());
  EXPECT_FALSE(w.direct());
  Recorder rec;
  rec.buffered = file.get();
  std::vector<char, PageAlignedAllocator<char>> buf(kPage, 'x');
  std::vector<WritePiece> pieces = {{0, buf.data(), kPage}};
  ASSERT_OK(w.Write(pieces, std::ref(rec)));
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0].file, file.get());
}

}  // namespace
}  // namespace umap
