// KernelAccess against the kernel behaviour it exists for: with a user-mode-only
// userfaultfd, a read(2) into a missing registered page fails with EFAULT (the kernel does
// not hand its own faults to user space); after KernelAccess touched the buffer from user
// space, where the fault is served, the same call succeeds with the right bytes.
#include "runtime/preload/kernel_access.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/preload/mapping_registry.h"
#include "tests/testing/temp_dir.h"

namespace umap::preload {
namespace {

constexpr size_t kPage = 4096;
constexpr int kPages = 8;

// A region registered with a user-mode-only userfaultfd; a thread fills each faulting page
// with the byte 0xA0 + page index.
class UserModeOnlyRegion {
 public:
  UserModeOnlyRegion() {
    fd_ =
        static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    if (fd_ < 0) {
      error_ = std::string("userfaultfd(UFFD_USER_MODE_ONLY): ") + std::strerror(errno);
      return;
    }
    uffdio_api api = {};
    api.api = UFFD_API;
    if (::ioctl(fd_, UFFDIO_API, &api) != 0) {
      error_ = std::string("UFFDIO_API: ") + std::strerror(errno);
      return;
    }
    void* p =
        ::mmap(nullptr, kPage * kPages, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = static_cast<char*>(p);
    uffdio_register reg = {};
    reg.range.start = reinterpret_cast<uint64_t>(base_);
    reg.range.len = kPage * kPages;
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (::ioctl(fd_, UFFDIO_REGISTER, &reg) != 0) {
      error_ = std::string("UFFDIO_REGISTER: ") + std::strerror(errno);
      return;
    }
    handler_ = std::thread([this] { Serve(); });
  }
  ~UserModeOnlyRegion() {
    stop_ = true;
    if (handler_.joinable()) handler_.join();
    if (base_ != nullptr) ::munmap(base_, kPage * kPages);
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& error() const { return error_; }
  char* page(int i) const { return base_ + i * kPage; }
  int faults() const { return faults_.load(); }

 private:
  void Serve() {
    std::vector<char> fill(kPage);
    while (!stop_) {
      pollfd pfd = {fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 20) <= 0) continue;
      uffd_msg msg;
      if (::read(fd_, &msg, sizeof(msg)) != sizeof(msg)) continue;
      if (msg.event != UFFD_EVENT_PAGEFAULT) continue;
      const uint64_t at = msg.arg.pagefault.address & ~(kPage - 1);
      std::memset(fill.data(),
                  0xA0 + static_cast<int>((at - reinterpret_cast<uint64_t>(base_)) / kPage), kPage);
      uffdio_copy copy = {};
      copy.dst = at;
      copy.src = reinterpret_cast<uint64_t>(fill.data());
      copy.len = kPage;
      faults_.fetch_add(1);  // before the copy wakes the faulting thread, which may look
      ::ioctl(fd_, UFFDIO_COPY, &copy);
    }
  }

  int fd_ = -1;
  char* base_ = nullptr;
  std::string error_;
  std::thread handler_;
  std::atomic<bool> stop_{false};
  std::atomic<int> faults_{0};
};

class KernelAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!region_.error().empty())
      GTEST_SKIP() << "no user-mode-only userfaultfd: " << region_.error();
    ShimMapping m;
    m.base = m.user = reinterpret_cast<uintptr_t>(region_.page(0));
    m.user_len = m.map_len = m.region_len = kPage * kPages;
    m.file_size = kPage * kPages;
    m.prot = PROT_READ | PROT_WRITE;
    ASSERT_GE(registry_.Add(m), 0);
    in_ = dir_.File("in");
    const int fd = ::open(in_.c_str(), O_RDWR | O_CREAT, 0600);
    std::vector<char> bytes(2 * kPage, 'x');
    ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  }

  UserModeOnlyRegion region_;
  MappingRegistry registry_;
  umaptest::TempDir dir_;
  std::string in_;
};

TEST_F(KernelAccessTest, PlainReadIntoAMissingPageFailsWithEfault) {
  const int fd = ::open(in_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  errno = 0;
  EXPECT_EQ(::pread(fd, region_.page(0), kPage, 0), -1);
  EXPECT_EQ(errno, EFAULT);
  ::close(fd);
}

TEST_F(KernelAccessTest, ReadIntoMissingPagesSucceedsAfterTouching) {
  KernelAccess ka(&registry_, 1 << 20);
  const int fd = ::open(in_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ka.Pread(fd, region_.page(1), 2 * kPage, 0), static_cast<ssize_t>(2 * kPage));
  for (size_t i = 0; i < 2 * kPage; ++i) ASSERT_EQ(region_.page(1)[i], 'x') << i;
  ::close(fd);
  EXPECT_EQ(region_.faults(), 2);  // one user-space fault per page, none from the kernel
}

TEST_F(KernelAccessTest, WriteFromMissingPagesSendsTheirBytes) {
  KernelAccess ka(&registry_, 1 << 20);
  const std::string out = dir_.File("out");
  const int fd = ::open(out.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  struct iovec iov[2] = {{region_.page(3), kPage}, {region_.page(5), kPage}};
  ASSERT_EQ(ka.Writev(fd, iov, 2), static_cast<ssize_t>(2 * kPage));
  char back[2 * kPage];
  ASSERT_EQ(::pread(fd, back, sizeof(back), 0), static_cast<ssize_t>(sizeof(back)));
  EXPECT_EQ(back[0], static_cast<char>(0xA3));
  EXPECT_EQ(back[kPage], static_cast<char>(0xA5));
  ::close(fd);
}

TEST_F(KernelAccessTest, SmallChunksStillTransferEverything) {
  KernelAccess ka(&registry_, kPage);  // one page per chunk
  const int fd = ::open(in_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ka.Read(fd, region_.page(4), 2 * kPage), static_cast<ssize_t>(2 * kPage));
  EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), static_cast<off_t>(2 * kPage));
  EXPECT_EQ(region_.page(5)[kPage - 1], 'x');
  // At end of file the next chunked read is short, then 0.
  EXPECT_EQ(ka.Read(fd, region_.page(6), 2 * kPage), 0);
  ::close(fd);
}

TEST_F(KernelAccessTest, BuffersOutsideEveryMappingAreNotTouched) {
  KernelAccess ka(&registry_, 1 << 20);
  char local[64];
  EXPECT_FALSE(ka.Touch(local, sizeof(local), KernelAccess::Dir::kKernelWrites));
  EXPECT_TRUE(ka.Touch(region_.page(7), 1, KernelAccess::Dir::kKernelReads));
  EXPECT_EQ(region_.faults(), 1);
}

}  // namespace
}  // namespace umap::preload
