// FakeMapping: an IoFileClient for tests of the I/O manager without a runtime: it records
// what each completion delivered, per block, and lets a test queue fills as a fault handler
// does (Fill) and wait for them (WaitDone). Files of tests/runtime/test_file.h's pattern
// can be checked block by block (BlockHasItsBytes).
#ifndef UMAP_TESTS_RUNTIME_FAKE_IO_CLIENT_H_
#define UMAP_TESTS_RUNTIME_FAKE_IO_CLIENT_H_

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "runtime/io/io_manager.h"
#include "tests/runtime/test_file.h"
#include "umap/env.h"

namespace umap::runtime::io {

// A mapping stand-in: per block a queued/done state and the bytes a completion delivered.
// `file` is what the channels read; with `buffered` set, `file` is a direct handle and a
// read it refuses with EINVAL switches reads to `buffered` (FallBackToBuffered), as a
// Mapping does.
class FakeMapping : public IoFileClient {
 public:
  static constexpr size_t kBlock = 4096;

  FakeMapping(std::unique_ptr<File> file, uint64_t blocks, uint64_t file_size,
              std::unique_ptr<File> buffered = nullptr)
      : file_(std::move(file)),
        buffered_(std::move(buffered)),
        blocks_(blocks),
        file_size_(file_size),
        cb_(blocks),
        data_(blocks * kBlock),
        done_(blocks) {
    for (auto& c : cb_) c.store(kNoCb);
  }
  void Attach(IoManager* m) { queue_ = m->AddQueue(this); }
  IoQueue* queue() { return queue_; }

  uint32_t QueuedCb(uint64_t block) const override {
    return block < blocks_ ? cb_[block].load() : kNoCb;
  }
  File* read_file() override { return use_buffered_.load() ? buffered_.get() : file_.get(); }
  uint64_t ByteOffset(uint64_t block) const override { return block * kBlock; }
  size_t ValidBytes(uint64_t first, uint32_t count) const override {
    const uint64_t start = first * kBlock;
    if (start >= file_size_) return 0;
    return static_cast<size_t>(std::min<uint64_t>(uint64_t{count} * kBlock, file_size_ - start));
  }
  void Complete(const io::Run& run, char* buf, const absl::Status& st) override {
    absl::MutexLock l(&mu_);
    runs_.push_back(run);
    statuses_.push_back(st);
    for (uint64_t b = run.first; b < run.first + run.count; ++b) {
      if (buf != nullptr) {
        std::memcpy(&data_[b * kBlock], buf + (b - run.first) * kBlock, kBlock);
      }
      cb_[b].store(kNoCb);
      done_[b].fetch_add(1);
      done_count_.fetch_add(1);
      done_count_.notify_all();
    }
  }
  bool FallBackToBuffered() override {
    if (buffered_ == nullptr || use_buffered_.exchange(true)) return false;
    fallbacks_.fetch_add(1);
    return true;
  }
  int fallbacks() const { return fallbacks_.load(); }

  // Claims `block` on `cache_block` and submits it, as a fault handler does (`kick` false:
  // queued only, until IoManager::Kick).
  void Fill(IoManager* m, uint64_t block, uint32_t cache_block, bool kick = true) {
    cb_[block].store(cache_block);
    m->Submit(queue_, block, cache_block, kick);
  }
  void WaitDone(uint64_t n) {
    for (uint64_t d = done_count_.load(); d < n; d = done_count_.load()) done_count_.wait(d);
  }
  bool BlockHasItsBytes(uint64_t b) const {
    for (size_t i = 0; i < kBlock; ++i) {
      if (data_[b * kBlock + i] != ::umaptest::PatternByte(b * kBlock + i)) return false;
    }
    return true;
  }
  int done(uint64_t b) const { return done_[b].load(); }
  std::vector<absl::Status> statuses() {
    absl::MutexLock l(&mu_);
    return statuses_;
  }
  std::vector<io::Run> runs() {
    absl::MutexLock l(&mu_);
    return runs_;
  }

 private:
  std::unique_ptr<File> file_;
  std::unique_ptr<File> buffered_;
  std::atomic<bool> use_buffered_{false};
  std::atomic<int> fallbacks_{0};
  const uint64_t blocks_;
  const uint64_t file_size_;
  IoQueue* queue_ = nullptr;
  std::vector<std::atomic<uint32_t>> cb_;
  std::vector<char> data_;
  std::vector<std::atomic<int>> done_;
  std::atomic<uint64_t> done_count_{0};
  absl::Mutex mu_;
  std::vector<io::Run> runs_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> statuses_ ABSL_GUARDED_BY(mu_);
};

}  // namespace umap::runtime::io

#endif  // UMAP_TESTS_RUNTIME_FAKE_IO_CLIENT_H_
