#include "bench/posix_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace umap_bench {

absl::Status Errno(int err, const std::string& what) { return absl::ErrnoToStatus(err, what); }

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Fd::~Fd() {
  // A read-only or already-synced descriptor: close errors carry no data to lose.
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<Fd> OpenFile(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(errno, absl::StrCat("open ", path));
  return Fd(fd);
}

absl::Status PreadFull(int fd, char* buf, size_t len, uint64_t off, const std::string& path) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, buf + done, len - done, static_cast<off_t>(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, absl::StrCat("pread ", path, " offset ", off + done));
    }
    if (n == 0) {
      return absl::OutOfRangeError(
          absl::StrCat("pread ", path, ": end of file at offset ", off + done));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status PwriteFull(int fd, const char* buf, size_t len, uint64_t off,
                        const std::string& path) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pwrite(fd, buf + done, len - done, static_cast<off_t>(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, absl::StrCat("pwrite ", path, " offset ", off + done));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteSmallFile(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, absl::StrCat("open ", path));
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return Errno(n < 0 ? err : EIO, absl::StrCat("write '", text, "' to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, absl::StrCat("open ", path));
  Fd closer(fd);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, absl::StrCat("read ", path));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

absl::StatusOr<uint64_t> ReadNumberFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path);
  if (!text.ok()) return text.status();
  char* end = nullptr;
  const uint64_t v = std::strtoull(text->c_str(), &end, 10);
  if (end == text->c_str()) {
    return absl::InternalError(absl::StrCat("cannot read a number from ", path));
  }
  return v;
}

}  // namespace umap_bench
