// FaultFuseTest: a fixture that mounts a fresh umap-faultfuse (faultinject/fuse/) for each
// test, or skips the test when faultinject/probe-capability says the machine lacks "root"
// or "fuse" (mounting needs both here; the skip line names which).
// Files are made in the backing directory with known bytes (tests/runtime/test_file.h's
// pattern) and used through the mount, where the test's rules break them.
#ifndef UMAP_TESTS_FAULTINJECT_FAULT_FUSE_FIXTURE_H_
#define UMAP_TESTS_FAULTINJECT_FAULT_FUSE_FIXTURE_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "faultinject/fuse/fault_fuse.h"
#include "tests/runtime/test_file.h"
#include "tests/testing/capability.h"

namespace umaptest {

// A page-aligned buffer for O_DIRECT I/O.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t size) : size_(size) {
    if (::posix_memalign(&p_, 4096, size == 0 ? 4096 : size) != 0) p_ = nullptr;
    if (p_ != nullptr) std::memset(p_, 0, size);
  }
  ~AlignedBuffer() { ::free(p_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* data() const { return static_cast<char*>(p_); }
  size_t size() const { return size_; }
  std::string str(size_t n) const { return std::string(data(), n); }

 private:
  void* p_ = nullptr;
  size_t size_;
};

// The pattern bytes [offset, offset + len) as a string.
inline std::string PatternAt(uint64_t offset, size_t len) {
  std::string s(len, '\0');
  for (size_t i = 0; i < len; ++i) s[i] = PatternByte(offset + i);
  return s;
}

class FaultFuseTest : public ::testing::Test {
 protected:
  // The mount's options; `dir` is filled in by SetUp.
  virtual ::umap::faultinject::FaultFuse::Options FuseOptions() {
    return ::umap::faultinject::FaultFuse::Options();
  }

  void SetUp() override {
    UMAP_SKIP_WITHOUT("root", "fuse");
    ::umap::faultinject::FaultFuse::Options o = FuseOptions();
    o.dir = dir_.path();
    auto fs = ::umap::faultinject::FaultFuse::Start(o);
    ASSERT_TRUE(fs.ok()) << fs.status();
    fs_ = *std::move(fs);
  }
  void TearDown() override { fs_.reset(); }

  // Makes `name` in the backing directory holding Pattern(size); returns its mount path.
  std::string MakeFile(const std::string& name, size_t size) {
    const int fd = MakePatternFile(fs_->BackingPath(name), size, O_RDONLY);
    EXPECT_GE(fd, 0) << "cannot create " << fs_->BackingPath(name);
    if (fd >= 0) ::close(fd);
    return fs_->Path(name);
  }
  // Opens `name` on the mount (-1 with a failure recorded).
  int Open(const std::string& name, int flags) {
    const int fd = ::open(fs_->Path(name).c_str(), flags | O_CLOEXEC);
    EXPECT_GE(fd, 0) << "open " << fs_->Path(name) << ": " << std::strerror(errno);
    return fd;
  }
  std::string Backing(const std::string& name) { return ReadString(fs_->BackingPath(name)); }

  TempDir dir_;  // outlives fs_: the mount lives inside it
  std::unique_ptr<::umap::faultinject::FaultFuse> fs_;
};

}  // namespace umaptest

#endif  // UMAP_TESTS_FAULTINJECT_FAULT_FUSE_FIXTURE_H_
