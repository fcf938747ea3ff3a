// IoManager: the communication manager. Fills queued by the fault handlers are merged by
// the IoScheduler (PIAO + FIFO per file, least-served across files) and read by I/O channels:
//
//   io_uring channels (default where the kernel offers io_uring): one ring each, up to
//     `depth` merged reads in flight per channel, so a few threads keep many requests
//     outstanding. The channels are driven by the runtime's fault handler threads (one
//     channel each): a handler queues the misses of a batch of faults, then pumps its
//     channel (reap completions, check deadlines, issue merged reads) and polls the
//     userfaultfd and the channel's eventfd (signalled by each completion) together. No
//     thread hop between a fault and its read: measured here, a separate channel thread cost
//     a quarter of single-thread miss throughput. Until handlers attach (and after they
//     stop) the manager drives the channels with threads of its own.
//   synchronous channels ("posix"): threads calling File::ReadAt one run at a time. Chosen
//     when io_uring is unavailable or asked for, and always used for files without a
//     descriptor (memory env, fault-injecting wrappers), so tests exercise the same queues.
//
// Deadlines: every read attempt has `timeout_us`. On expiry the attempt is abandoned (an
// io_uring read is also cancelled), the watchdog logs the file, offset, length and age, and
// the run is retried after a backoff (10 ms doubling, at most 1 s) up to `retries` times;
// then the client gets ETIMEDOUT (a fault then raises SIGBUS with the reason logged). An
// abandoned attempt keeps its buffer until the kernel or the stalled call returns, so a late
// completion never lands in memory that was reused. Other read errors are not retried.
//
// Memory: each channel slot has one max_io_bytes buffer, page-aligned (O_DIRECT-safe), all
// allocated at Create; the fault path allocates nothing.
//
// Thread safety: Submit from any thread; AddQueue/RemoveQueue from map/unmap. The client's
// Complete runs on a channel (or watchdog) thread, never under a scheduler lock.
#ifndef UMAP_RUNTIME_IO_IO_MANAGER_H_
#define UMAP_RUNTIME_IO_IO_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "base/write_engine.h"
#include "runtime/io/scheduler.h"
#include "umap/env.h"

namespace umap::runtime::io {

enum class Engine { kAuto, kUring, kPosix };

struct IoOptions {
  Engine engine = Engine::kAuto;
  unsigned channels = 2;            // posix engine: groups of `depth` synchronous threads
  unsigned uring_channels = 2;      // io_uring engine: rings (one per fault handler thread)
  unsigned depth = 16;              // merged reads in flight per channel
  size_t max_io_bytes = 512 << 10;  // largest merged read or write
  size_t block_size = 4096;
  uint32_t cache_blocks = 0;  // pool size: bounds the fills that can be queued
  uint32_t max_queues = 4096;
  uint64_t timeout_us = 30'000'000;
  unsigned retries = 3;
};

// Bucket k counts reads of [4 KiB << k, 4 KiB << (k+1)); the last bucket is open-ended.
inline constexpr int kSizeBuckets = 12;

struct IoCounters {
  std::atomic<uint64_t> reads{0}, blocks{0}, bytes{0}, queue_wait_us{0}, timeouts{0}, retries{0},
      errors{0}, sync_reads{0};
  std::atomic<uint64_t> interrupted{0};   // reads that returned EINTR/EAGAIN and were requeued
  std::atomic<uint64_t> inline_reads{0};  // of `reads`: done by the faulting thread itself
  std::atomic<uint64_t> size_hist[kSizeBuckets] = {};
};

// The owner of a file queue (a Mapping). All methods are called without scheduler locks
// except QueuedCb (IoClient in scheduler.h).
class IoFileClient : public IoClient {
 public:
  // The file to read (an O_DIRECT handle where possible) and the byte offset of `block`.
  virtual File* read_file() = 0;
  virtual uint64_t ByteOffset(uint64_t block) const = 0;
  // Bytes of blocks [first, first+count) inside the file: count * block_size except at EOF.
  virtual size_t ValidBytes(uint64_t first, uint32_t count) const = 0;
  // The run was read into buf (ValidBytes of it are data), or failed for good with `st`
  // (buf is null then; kCancelled when the queue is being removed).
  virtual void Complete(const Run& run, char* buf, const absl::Status& st) = 0;
  // The direct handle refused a read with EINVAL: switch to buffered reads. Returns true if
  // it switched (the read is then retried at once, not counted as a retry).
  virtual bool FallBackToBuffered() = 0;
};

inline constexpr uint32_t kInlineAttempt = 0xffffffffu;

// One I/O request in flight, as IoManager::InFlightNow() reports it.
struct InFlightRequest {
  // Who it is for, to compare with, never to dereference (the owner may be gone by the
  // time the caller looks): reads name their IoQueue, writes the File written.
  const void* owner = nullptr;
  uint64_t offset = 0;      // byte offset in the file
  uint64_t length = 0;      // bytes
  uint64_t started_us = 0;  // Env::NowMicros() at issue; 0: none
  uint32_t attempt = 0;     // reads: 0 first try, n the n-th retry; kInlineAttempt: a
                            // read by the faulting thread (BeginInlineRead)
};

struct InFlight {
  uint32_t reads = 0;   // read attempts issued and not returned (abandoned ones included)
  uint32_t writes = 0;  // Write calls running
  uint64_t queued = 0;  // fills waiting in the queues
  InFlightRequest oldest_read, oldest_write;
};

using ::umap::WritePiece;

class IoManager {
 public:
  static absl::StatusOr<std::unique_ptr<IoManager>> Create(const IoOptions& options, Env* env);
  // REQUIRES: every queue was removed.
  ~IoManager();

  Engine engine() const { return engine_; }
  // io_uring channels (0 with the posix engine). A thread driving channel i calls
  // PumpChannel(i) after queueing work and whenever ChannelEventFd(i) is readable, and
  // polls at most the returned number of ms (-1: no deadline pending).
  unsigned channel_count() const { return static_cast<unsigned>(uring_.size()); }
  int ChannelEventFd(unsigned i) const;
  int PumpChannel(unsigned i);
  // Hands the channels to outside threads (the fault handlers) from now on, or takes them
  // back (own threads). REQUIRES: no outside thread is pumping when taking them back.
  void DriveChannelsExternally(bool external);
  const IoOptions& options() const { return options_; }
  IoCounters& counters() { return counters_; }
  // Counts a read of `blocks` blocks (`bytes` bytes) made by a faulting thread itself
  // (signal mode), so the read figures cover every read from the files.
  void NoteInlineRead(uint32_t blocks, size_t bytes);
  // Such a read while it runs, for InFlightNow: Begin returns a token for End (-1 when every
  // tracker is taken; that read is then not reported). Lock-free and async-signal-safe (the
  // signal mode reads inside its SIGBUS handler).
  int BeginInlineRead(const IoQueue* queue, uint64_t offset, uint64_t length);
  void EndInlineRead(int token);

  // What is in flight now, and the oldest read and write. Lock-free: reads only atomics
  // that the channels publish as they issue and reap, so an observer (the stats
  // publisher) never waits for a channel and never slows the fault path; the snapshot may
  // be a moment old. A read stuck in the kernel stays listed (with its age growing) after
  // its deadline abandoned it, until the call returns.
  InFlight InFlightNow() const;

  IoQueue* AddQueue(IoFileClient* client);
  // Drops the queue's queued fills (Complete with kCancelled) and waits for its reads in
  // flight. REQUIRES: nothing submits to it any more.
  void RemoveQueue(IoQueue* queue);

  // Queues a fill of `block` holding cache block `cache_block`; a channel will call Complete. With
  // `kick` false the channels are not told yet: queue a batch, then Kick() once, so that
  // the batch is merged before a channel takes any of it.
  void Submit(IoQueue* queue, uint64_t block, uint32_t cache_block, bool kick = true);
  // Tells channels driven by the manager's own threads that work is queued (channels driven
  // by fault handlers are pumped by them after each batch of faults).
  void Kick();

  // Write-backs go through the WriteEngine (base/write_engine.h), configured with this
  // manager's depth, largest I/O and deadline; see WriteEngine::Write for the contract.
  absl::Status Write(File* file, absl::Span<const WritePiece> pieces,
                     absl::FunctionRef<void()> before_each);
  WriteEngine& writer() { return writer_; }

  // Bytes of the channels' read buffers that are not resident yet (mincore): memory the
  // manager may still take as reads use more slots (the memory budget counts it).
  size_t UnrealizedBufferBytes() const;
  // And those that are resident.
  size_t ResidentBufferBytes() const { return buffers_len_ - UnrealizedBufferBytes(); }
  // Bounds the read buffers the io_uring channels touch to about `bytes` (0: no bound but
  // the slots, depth x max_io_bytes a channel). Each channel takes its lowest free slot
  // first; its first max(1, bytes / channels / max_io_bytes) slots take merged reads of up
  // to max_io_bytes, the others only short ones (kShortReadBytes), so the queue depth stays
  // (small reads still go in parallel) while the memory of large reads is capped. The
  // runtime sets it to half the cache's limit (Runtime::UpdateReadCap). Any thread; takes
  // effect at the channels' next pump.
  static constexpr size_t kShortReadBytes = 64 << 10;
  void SetReadCap(size_t bytes);
  // Slots per channel that take reads of up to max_io_bytes (depth: all).
  unsigned large_read_slots() const { return large_slots_.load(std::memory_order_relaxed); }

 private:
  struct QueueState;
  class UringChannel;
  // One request published for InFlightNow: `started_us` != 0 while it is in flight; the
  // reader takes the fields only if started_us is the same before and after (seqlock).
  struct PublishedIo {
    std::atomic<uint64_t> started_us{0};
    std::atomic<const void*> owner{nullptr};
    std::atomic<uint64_t> offset{0}, length{0};
    std::atomic<uint32_t> attempt{0};
    void Publish(const void* who, uint64_t off, uint64_t len, uint32_t att, uint64_t now);
    void Clear() { started_us.store(0, std::memory_order_release); }
    // Copies a consistent view into *out; false when idle or changing.
    bool Read(InFlightRequest* out) const;
  };
  static constexpr int kWriteTrackers = 32;   // concurrent Write calls reported
  static constexpr int kInlineTrackers = 64;  // concurrent inline reads reported
  // Claims a free tracker of `used` and publishes the request in it; -1 when all are taken.
  template <int N>
  int Track(PublishedIo (&pub)[N], std::atomic<bool> (&used)[N], const void* owner, uint64_t offset,
            uint64_t length, uint32_t attempt = 0);
  IoManager(const IoOptions& options, Env* env, Engine engine);
  absl::Status Start();
  // Synchronous channel `index`: takes runs and reads them with File::ReadAt.
  void SyncLoop(unsigned index);
  void WatchdogLoop();
  // Completes, retries or fails a finished attempt: `res` bytes read or -errno.
  void Finish(const Run& run, char* buf, int64_t res);
  void Fail(const Run& run, const absl::Status& st);
  // EINTR/EAGAIN: requeues the run after 1 ms (not counted against the retry budget) and
  // returns true; any other errno: false.
  bool RequeueIfInterrupted(const Run& run, int err);
  void RetryOrFail(const Run& run, const char* what, uint64_t age_us);
  QueueState* StateOf(IoQueue* q) const;
  void WakeChannels(const UringChannel* except = nullptr);
  void StopOwnChannelThreads();
  uint64_t Now() const { return env_->NowMicros(); }

  const IoOptions options_;
  Env* const env_;
  const Engine engine_;
  const uint32_t max_blocks_;
  const uint32_t short_blocks_;              // kShortReadBytes in blocks (at least 1)
  std::atomic<unsigned> large_slots_;        // SetReadCap: per channel; depth by default
  // Puts the io_uring channels' first `large` slots in huge pages where they fill whole
  // ones, and the rest not (see the .cc for why and what was measured).
  void AdviseHugePages(unsigned large);
  absl::Mutex advice_mu_;
  unsigned advised_large_ ABSL_GUARDED_BY(advice_mu_) = 0;
  IoScheduler sched_;
  IoCounters counters_;
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<UringChannel>> uring_;
  std::vector<std::thread> threads_;
  std::vector<std::thread> channel_threads_;  // own drivers of the uring channels
  std::atomic<bool> stop_channel_threads_{false};
  std::atomic<bool> own_drivers_{false};

  // Synchronous channel slots, watched for deadlines by the watchdog thread.
  struct SyncSlot {
    std::atomic<int> state{0};  // kIdle, kBusy, kAbandoned
    Run run;
    std::atomic<uint64_t> started_us{0};
    char* buf = nullptr;
    PublishedIo pub;  // until ReadAt returns, abandoned or not
  };
  std::unique_ptr<SyncSlot[]> sync_slots_;
  unsigned sync_count_ = 0;
  char* buffers_ = nullptr;
  size_t buffers_len_ = 0;

  absl::Mutex watchdog_mu_;  // only to wake the watchdog at destruction
  PublishedIo write_pub_[kWriteTrackers];
  std::atomic<bool> write_pub_used_[kWriteTrackers] = {};
  PublishedIo inline_pub_[kInlineTrackers];
  std::atomic<bool> inline_pub_used_[kInlineTrackers] = {};
  WriteEngine writer_;
};

}  // namespace umap::runtime::io

#endif  // UMAP_RUNTIME_IO_IO_MANAGER_H_
