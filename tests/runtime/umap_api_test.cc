// The C API against mmap's contract: errors with their exact errno, SIGBUS past end of file,
// fork safety, several mappings, write-back on uunmap.
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/runtime/signal_probe.h"
#include "tests/runtime/test_file.h"
#include "umap/umap.h"

namespace umaptest {
namespace {

constexpr size_t kBlock = 4096;

class UmapApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    umap_config c;
    ASSERT_EQ(umap_config_init(&c), 0);
    c.cache_bytes = 64 * kBlock;  // far smaller than the files below
    c.block_size = kBlock;
    rt_ = umap_runtime_create(&c);
    ASSERT_NE(rt_, nullptr) << "umap_runtime_create: " << std::strerror(errno);
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    if (rt_) {
      EXPECT_EQ(umap_runtime_destroy(rt_), 0);
    }
  }
  int File(const std::string& name, size_t size, int flags = O_RDWR) {
    int fd = MakePatternFile(dir_.File(name), size, flags);
    EXPECT_GE(fd, 0) << name;
    fds_.push_back(fd);
    return fd;
  }
  char* Map(size_t len, int prot, int fd, off_t off = 0) {
    return static_cast<char*>(umap_ex(rt_, nullptr, len, prot, MAP_SHARED, fd, off));
  }
  umap_stats Stats() {
    umap_stats s;
    EXPECT_EQ(umap_get_stats(rt_, &s), 0);
    return s;
  }

  TempDir dir_;
  umap_runtime* rt_ = nullptr;
  std::vector<int> fds_;
};

TEST_F(UmapApiTest, ReadsEveryByteOfAFileLargerThanTheCache) {
  const size_t size = 1024 * kBlock;  // 16x the cache
  int fd = File("f", size);
  char* p = Map(size, PROT_READ, fd);
  ASSERT_NE(p, MAP_FAILED) << std::strerror(errno);
  std::vector<char> want = Pattern(size);
  EXPECT_EQ(std::memcmp(p, want.data(), size), 0);
  umap_stats s = Stats();
  EXPECT_LE(s.cache_bytes_peak, s.cache_bytes_limit) << "cache bound exceeded";
  EXPECT_GE(s.evictions, 1024u - 64u);
  EXPECT_EQ(uunmap(p, size), 0);
}

TEST_F(UmapApiTest, WritesReachTheFileAfterUmsync) {
  const size_t size = 256 * kBlock;
  int fd = File("f", size);
  char* p = Map(size, PROT_READ | PROT_WRITE, fd);
  ASSERT_NE(p, MAP_FAILED) << std::strerror(errno);
  std::vector<char> want = Pattern(size);
  for (size_t i = 0; i < size; i += 1000) {
    p[i] = static_cast<char>(i);
    want[i] = static_cast<char>(i);
  }
  ASSERT_EQ(umsync(p, size, MS_SYNC), 0) << std::strerror(errno);
  EXPECT_EQ(ReadAll(dir_.File("f")), want);
  EXPECT_GT(Stats().dirty_evictions, 0u) << "the test should exercise dirty eviction";
  EXPECT_EQ(uunmap(p, size), 0);
}

TEST_F(UmapApiTest, UunmapOfADirtyMappingWritesItBack) {
  const size_t size = 16 * kBlock;
  int fd = File("f", size);
  char* p = Map(size, PROT_READ | PROT_WRITE, fd);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p + kBlock, 'z', kBlock);
  ASSERT_EQ(uunmap(p, size), 0);
  std::vector<char> want = Pattern(size);
  std::memset(want.data() + kBlock, 'z', kBlock);
  EXPECT_EQ(ReadAll(dir_.File("f")), want);
}

TEST_F(UmapApiTest, OffsetMustBeBlockAligned) {
  int fd = File("f", 8 * kBlock);
  errno = 0;
  EXPECT_EQ(Map(kBlock, PROT_READ, fd, 512), MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(UmapApiTest, NonzeroOffsetMapsTheRightBytes) {
  const size_t size = 32 * kBlock;
  int fd = File("f", size);
  char* p = Map(8 * kBlock, PROT_READ | PROT_WRITE, fd, 4 * kBlock);
  ASSERT_NE(p, MAP_FAILED);
  std::vector<char> want = Pattern(size);
  EXPECT_EQ(std::memcmp(p, want.data() + 4 * kBlock, 8 * kBlock), 0);
  p[0] = '!';
  ASSERT_EQ(uunmap(p, 8 * kBlock), 0);
  want[4 * kBlock] = '!';
  EXPECT_EQ(ReadAll(dir_.File("f")), want);
}

TEST_F(UmapApiTest, ProtWriteOnAReadOnlyDescriptorIsEacces) {
  int fd = File("f", 8 * kBlock, O_RDONLY);
  errno = 0;
  EXPECT_EQ(Map(kBlock, PROT_READ | PROT_WRITE, fd), MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
}

TEST_F(UmapApiTest, MapPrivateIsEinval) {
  int fd = File("f", 8 * kBlock);
  errno = 0;
  EXPECT_EQ(umap_ex(rt_, nullptr, kBlock, PROT_READ, MAP_PRIVATE, fd, 0), MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(UmapApiTest, BadDescriptorIsEbadf) {
  errno = 0;
  EXPECT_EQ(Map(kBlock, PROT_READ, 987654), MAP_FAILED);
  EXPECT_EQ(errno, EBADF);
}

TEST_F(UmapApiTest, ZeroLengthIsEinval) {
  int fd = File("f", kBlock);
  errno = 0;
  EXPECT_EQ(Map(0, PROT_READ, fd), MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(UmapApiTest, UunmapOfAPartialRangeIsEinvalAndKeepsTheMapping) {
  int fd = File("f", 8 * kBlock);
  char* p = Map(8 * kBlock, PROT_READ, fd);
  ASSERT_NE(p, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(uunmap(p, kBlock), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(p[kBlock], PatternByte(kBlock)) << "mapping still usable";
  EXPECT_EQ(uunmap(p, 8 * kBlock), 0);
}

TEST_F(UmapApiTest, UmsyncErrorsMatchMsync) {
  int fd = File("f", 8 * kBlock);
  char* p = Map(8 * kBlock, PROT_READ | PROT_WRITE, fd);
  ASSERT_NE(p, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(umsync(p, kBlock, MS_INVALIDATE), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(umsync(p + 1, kBlock, MS_SYNC), -1);
  EXPECT_EQ(errno, EINVAL) << "unaligned address";
  static char not_mapped[2 * kBlock] __attribute__((aligned(4096)));
  errno = 0;
  EXPECT_EQ(umsync(not_mapped, kBlock, MS_SYNC), -1);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(umsync(p, 8 * kBlock, MS_ASYNC), 0);
  EXPECT_EQ(uunmap(p, 8 * kBlock), 0);
}

TEST_F(UmapApiTest, FileSizeNotAMultipleOfTheBlockSize) {
  const size_t size = 2 * kBlock + 1000;  // the last block is partial
  int fd = File("f", size);
  char* p = Map(4 * kBlock, PROT_READ | PROT_WRITE, fd);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(ProbeRead(p + size - 1), 0);
  EXPECT_EQ(p[size - 1], PatternByte(size - 1));
  EXPECT_EQ(ProbeRead(p + size), 0) << "rest of the last page reads as zeros, as with mmap";
  EXPECT_EQ(p[size], 0);
  EXPECT_EQ(ProbeRead(p + 3 * kBlock), SIGBUS) << "page wholly past end of file";
  EXPECT_EQ(ProbeRead(p + 3 * kBlock + 10), SIGBUS) << "and again";
  p[size - 1] = 'E';
  p[size] = 'X';  // past EOF inside the last page: like mmap, never reaches the file
  ASSERT_EQ(umsync(p, 3 * kBlock, MS_SYNC), 0);
  std::vector<char> want = Pattern(size);
  want[size - 1] = 'E';
  EXPECT_EQ(ReadAll(dir_.File("f")), want) << "file size unchanged";
  EXPECT_GE(Stats().sigbus_raised, 1u);
  EXPECT_EQ(uunmap(p, 4 * kBlock), 0);
}

TEST_F(UmapApiTest, ForkChildNeverReadsSilentZeros) {
  int fd = File("f", 8 * kBlock);
  char* p = Map(8 * kBlock, PROT_READ, fd);
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(p[0], PatternByte(0));
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Both a resident and a missing block: neither may read as zeros.
    volatile char a = p[0];
    volatile char b = p[5 * kBlock];
    ::_exit(a == 0 && b == 0 ? 3 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  EXPECT_EQ(p[5 * kBlock], PatternByte(5 * kBlock)) << "parent unaffected";
  EXPECT_EQ(uunmap(p, 8 * kBlock), 0);
}

TEST_F(UmapApiTest, SeveralMappingsOfOneFileAndOfDifferentFiles) {
  const size_t size = 128 * kBlock;
  int fa = File("a", size);
  int fb = File("b", size);
  char* a1 = Map(size, PROT_READ, fa);
  char* a2 = Map(64 * kBlock, PROT_READ, fa, 64 * kBlock);
  char* b = Map(size, PROT_READ | PROT_WRITE, fb);
  ASSERT_NE(a1, MAP_FAILED);
  ASSERT_NE(a2, MAP_FAILED);
  ASSERT_NE(b, MAP_FAILED);
  std::vector<char> want = Pattern(size);
  for (size_t i = 0; i < size; i += 97) {
    ASSERT_EQ(a1[i], want[i]) << i;
    ASSERT_EQ(b[i], want[i]) << i;
    if (i >= 64 * kBlock) {
      ASSERT_EQ(a2[i - 64 * kBlock], want[i]) << i;
    }
    b[i] = static_cast<char>(~want[i]);
  }
  EXPECT_EQ(uunmap(a2, 64 * kBlock), 0);
  EXPECT_EQ(uunmap(b, size), 0);
  EXPECT_EQ(uunmap(a1, size), 0);
  std::vector<char> wb = Pattern(size);
  for (size_t i = 0; i < size; i += 97) wb[i] = static_cast<char>(~wb[i]);
  EXPECT_EQ(ReadAll(dir_.File("b")), wb);
  EXPECT_EQ(ReadAll(dir_.File("a")), want);
}

TEST_F(UmapApiTest, MappingsOfTwoRuntimesAreIndependent) {
  umap_config c;
  ASSERT_EQ(umap_config_init(&c), 0);
  c.cache_bytes = 32 * kBlock;
  umap_runtime* rt2 = umap_runtime_create(&c);
  ASSERT_NE(rt2, nullptr);
  int fd = File("f", 64 * kBlock);
  char* p1 = Map(64 * kBlock, PROT_READ, fd);
  char* p2 = static_cast<char*>(umap_ex(rt2, nullptr, 64 * kBlock, PROT_READ, MAP_SHARED, fd, 0));
  ASSERT_NE(p1, MAP_FAILED);
  ASSERT_NE(p2, MAP_FAILED);
  for (size_t i = 0; i < 64 * kBlock; i += 4096) ASSERT_EQ(p1[i], p2[i]);
  umap_stats s;
  ASSERT_EQ(umap_get_stats(rt2, &s), 0);
  EXPECT_LE(s.cache_bytes_peak, 32 * kBlock);
  EXPECT_EQ(uunmap(p2, 64 * kBlock), 0);
  EXPECT_EQ(uunmap(p1, 64 * kBlock), 0);
  EXPECT_EQ(umap_runtime_destroy(rt2), 0);
}

// A relaxed umsync of a range larger than its 16 MiB capture chunk syncs every chunk,
// including after chunks with nothing dirty.
TEST(UmapRelaxedSync, RangesLargerThanOneChunkAreSyncedWhole) {
  TempDir dir;
  const size_t size = 40u << 20;  // 2.5 chunks of 4 KiB blocks
  int fd = MakePatternFile(dir.File("f"), size);
  ASSERT_GE(fd, 0);
  umap_config c;
  ASSERT_EQ(umap_config_init(&c), 0);
  c.cache_bytes = 64u << 20;
  c.policy = UMAP_POLICY_RELAXED;
  umap_runtime* rt = umap_runtime_create(&c);
  ASSERT_NE(rt, nullptr);
  char* p = static_cast<char*>(umap_ex(rt, nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(p, MAP_FAILED);
  std::vector<char> want = Pattern(size);
  for (size_t off : {size_t{5}, size - 1}) {  // chunks 0 and 2: chunk 1 has nothing dirty
    p[off] = '#';
    want[off] = '#';
  }
  ASSERT_EQ(umsync(p, size, MS_SYNC), 0) << std::strerror(errno);
  EXPECT_EQ(ReadAll(dir.File("f")), want);
  EXPECT_EQ(uunmap(p, size), 0);
  ::close(fd);
  EXPECT_EQ(umap_runtime_destroy(rt), 0);
}

TEST(UmapConfig, EnvironmentDefaultsAreReadAndValidated) {
  ::setenv("UMAP_CACHE_BYTES", "64M", 1);
  ::setenv("UMAP_BLOCK_SIZE", "16k", 1);
  ::setenv("UMAP_JOURNAL_STAGED_QUOTA", "256M", 1);
  ::setenv("UMAP_UMSYNC_CHUNK_BYTES", "1M", 1);
  umap_config c;
  ASSERT_EQ(umap_config_init(&c), 0);
  EXPECT_EQ(c.cache_bytes, 64u << 20);
  EXPECT_EQ(c.block_size, 16u << 10);
  EXPECT_EQ(c.journal_staged_quota, 256u << 20);
  EXPECT_EQ(c.umsync_chunk_bytes, 1u << 20);
  ::unsetenv("UMAP_JOURNAL_STAGED_QUOTA");
  ::unsetenv("UMAP_UMSYNC_CHUNK_BYTES");
  ::setenv("UMAP_CACHE_BYTES", "lots", 1);
  errno = 0;
  EXPECT_EQ(umap_config_init(&c), -1);
  EXPECT_EQ(errno, EINVAL);
  ::unsetenv("UMAP_CACHE_BYTES");
  ::unsetenv("UMAP_BLOCK_SIZE");
}

TEST(UmapConfig, BadGeometryIsEinval) {
  umap_config c;
  ASSERT_EQ(umap_config_init(&c), 0);
  c.block_size = 5000;
  errno = 0;
  EXPECT_EQ(umap_runtime_create(&c), nullptr);
  EXPECT_EQ(errno, EINVAL);
  c.block_size = 4096;
  c.cache_bytes = 4096;
  errno = 0;
  EXPECT_EQ(umap_runtime_create(&c), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace umaptest

// The C++ RAII layer.
#include "umap/umap.hpp"

namespace umaptest {
namespace {

TEST(UmapCpp, MappingUnmapsAndWritesBackOnDestruction) {
  TempDir dir;
  int fd = MakePatternFile(dir.File("f"), 64 * 4096);
  ASSERT_GE(fd, 0);
  auto config = Umap::Runtime::DefaultConfig();
  ASSERT_TRUE(config.ok());
  config->cache_bytes = 16 * 4096;
  auto rt = Umap::Runtime::Create(*config);
  ASSERT_TRUE(rt.ok()) << rt.status();
  {
    auto m = Umap::Mapping::Open(rt->get(), fd, 64 * 4096, PROT_READ | PROT_WRITE);
    ASSERT_TRUE(m.ok()) << m.status();
    uint64_t* words = m->as<uint64_t>();
    for (size_t i = 0; i < 64 * 4096 / 8; i += 512) words[i] = i;
    EXPECT_TRUE(m->Sync(0, 4096).ok());
  }
  std::vector<char> want = Pattern(64 * 4096);
  for (size_t i = 0; i < 64 * 4096 / 8; i += 512) std::memcpy(&want[i * 8], &i, 8);
  EXPECT_EQ(ReadAll(dir.File("f")), want);
  EXPECT_EQ(rt->Stats().cache_bytes_used, 0u) << "all cache blocks returned";
  ::close(fd);
}

TEST(UmapCpp, OpenReportsTheErrno) {
  auto m = Umap::Mapping::Open(nullptr, -1, 4096, PROT_READ);
  EXPECT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition) << m.status();  // EBADF
}

}  // namespace
}  // namespace umaptest
