#include "base/mem_env.h"

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/synchronization/mutex.h"
#include "base/posix_error.h"
#include "base/status_macros.h"

namespace umap {
namespace {

struct MemFileState {
  absl::Mutex mu;
  std::string data ABSL_GUARDED_BY(mu);
  uint64_t inode = 0;
};

class MemFile final : public File {
 public:
  MemFile(std::shared_ptr<MemFileState> s, std::string name, bool writable)
      : s_(std::move(s)), name_(std::move(name)), writable_(writable) {}

  absl::StatusOr<size_t> ReadAt(uint64_t offset, absl::Span<char> dst) override {
    absl::MutexLock l(&s_->mu);
    if (offset >= s_->data.size()) return size_t{0};
    size_t n = std::min<size_t>(dst.size(), s_->data.size() - offset);
    std::memcpy(dst.data(), s_->data.data() + offset, n);
    return n;
  }
  absl::Status WriteAt(uint64_t offset, absl::Span<const char> src) override {
    if (!writable_) return PosixError(EBADF, "write to read-only memory file " + name_);
    absl::MutexLock l(&s_->mu);
    if (s_->data.size() < offset + src.size()) s_->data.resize(offset + src.size());
    std::memcpy(s_->data.data() + offset, src.data(), src.size());
    return absl::OkStatus();
  }
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::StatusOr<uint64_t> Size() override {
    absl::MutexLock l(&s_->mu);
    return s_->data.size();
  }
  absl::StatusOr<FileIdentity> Identify() override {
    absl::MutexLock l(&s_->mu);
    return FileIdentity{name_, 0, s_->inode, s_->data.size()};
  }
  const std::string& name() const override { return name_; }

 private:
  std::shared_ptr<MemFileState> s_;
  std::string name_;
  bool writable_;
};

class MemEnv final : public Env {
 public:
  absl::StatusOr<std::unique_ptr<File>> OpenFile(const std::string& path,
                                                 OpenMode mode) override {
    absl::MutexLock l(&mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return PosixError(ENOENT, "open " + path);
    return std::unique_ptr<File>(new MemFile(it->second, path, mode == OpenMode::kReadWrite));
  }
  absl::StatusOr<std::unique_ptr<File>> AdoptFd(int fd, OpenMode) override {
    return PosixError(EBADF, "memory env has no descriptors (fd " + std::to_string(fd) + ")");
  }
  absl::Status CreateDir(const std::string&, mode_t) override { return absl::OkStatus(); }
  absl::Status SyncDir(const std::string&) override { return absl::OkStatus(); }
  absl::Status RemoveTree(const std::string& path) override {
    absl::MutexLock l(&mu_);
    for (auto it = files_.begin(); it != files_.end();) {
      it = (it->first == path || it->first.rfind(path + "/", 0) == 0) ? files_.erase(it) : ++it;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<FileIdentity> IdentifyPath(const std::string& path) override {
    ASSIGN_OR_RETURN(auto f, OpenFile(path, OpenMode::kReadOnly));
    return f->Identify();
  }
  uint64_t NowMicros() override { return Env::Default()->NowMicros(); }

  absl::Status Write(const std::string& path, absl::string_view contents) {
    absl::MutexLock l(&mu_);
    auto& s = files_[path];
    if (!s) {
      s = std::make_shared<MemFileState>();
      s->inode = ++next_inode_;
    }
    absl::MutexLock fl(&s->mu);
    s->data.assign(contents.data(), contents.size());
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<MemFileState>> files_ ABSL_GUARDED_BY(mu_);
  uint64_t next_inode_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

std::unique_ptr<Env> NewMemEnv() { return std::make_unique<MemEnv>(); }

absl::Status MemEnvWriteFile(Env* env, const std::string& path, absl::string_view contents) {
  return static_cast<MemEnv*>(env)->Write(path, contents);
}

absl::StatusOr<std::string> MemEnvReadFile(Env* env, const std::string& path) {
  auto f = env->OpenFile(path, OpenMode::kReadOnly);
  if (!f.ok()) return f.status();
  auto size = (*f)->Size();
  if (!size.ok()) return size.status();
  std::string out(*size, '\0');
  auto n = (*f)->ReadAt(0, absl::MakeSpan(out));
  if (!n.ok()) return n.status();
  out.resize(*n);
  return out;
}

}  // namespace umap
