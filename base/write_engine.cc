#include "base/write_engine.h"

#include <liburing.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "absl/strings/str_cat.h"
#include "base/crash_point.h"
#include "base/deadline.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/status_macros.h"

namespace umap {
namespace {

constexpr uint64_t kCancelTag = ~0ull - 1;

}  // namespace

// A ring for one Write call at a time, taken from a small pool and created on first need.
struct WriteEngine::Ring {
  io_uring ring{};
  bool ok = false;
  ~Ring() {
    if (ok) io_uring_queue_exit(&ring);
  }
};

// The state of one Write call: its merged runs and, on io_uring, their progress.
struct WriteEngine::Call {
  // A run of pieces adjacent in the file: iov[first, first + count), `bytes` long.
  struct Run {
    uint64_t offset;
    size_t first;
    unsigned count;
    size_t bytes;
  };
  File* file;
  std::vector<iovec> iov;
  std::vector<Run> runs;
  std::vector<uint64_t> started;  // per run: issue time, 0 once completed or not yet issued
  std::vector<bool> timed_out;
  size_t next = 0;       // the next run to issue
  unsigned prepared = 0; // runs prepared in the submission queue, not yet submitted
  unsigned inflight = 0; // runs submitted and not yet completed
  bool ring_broken = false;  // a submit failed: the ring must not be reused
  absl::Status first_error;

  Call(File* f, absl::Span<const WritePiece> pieces, size_t max_io_bytes) : file(f) {
    iov.reserve(pieces.size());
    for (const WritePiece& p : pieces) {
      if (!runs.empty()) {
        Run& r = runs.back();
        if (r.offset + r.bytes == p.offset && r.bytes + p.len <= max_io_bytes &&
            r.count < IOV_MAX) {
          iov.push_back({const_cast<char*>(p.data), p.len});
          r.count++;
          r.bytes += p.len;
          continue;
        }
      }
      runs.push_back({p.offset, iov.size(), 1, p.len});
      iov.push_back({const_cast<char*>(p.data), p.len});
    }
  }

  void NoteError(absl::Status s) {
    if (first_error.ok()) first_error = std::move(s);
  }

  // Writes run r from byte `skip` on with File::WriteAt, piece by piece (File::WriteAt loops
  // on short writes and EINTR).
  absl::Status WriteSync(const Run& r, size_t skip) {
    uint64_t off = r.offset;
    for (unsigned k = 0; k < r.count; ++k) {
      const iovec& v = iov[r.first + k];
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        off += v.iov_len;
        continue;
      }
      RETURN_IF_ERROR(file->WriteAt(
          off + skip,
          absl::MakeConstSpan(static_cast<const char*>(v.iov_base) + skip, v.iov_len - skip)));
      off += v.iov_len;
      skip = 0;
    }
    return absl::OkStatus();
  }
};

WriteEngine::WriteEngine(const WriteEngineOptions& options, Env* env)
    : options_(options), env_(env) {}

WriteEngine::~WriteEngine() = default;

std::unique_ptr<WriteEngine::Ring> WriteEngine::TakeRing() {
  {
    absl::MutexLock l(&rings_mu_);
    if (!rings_.empty()) {
      std::unique_ptr<Ring> r = std::move(rings_.back());
      rings_.pop_back();
      return r;
    }
  }
  auto r = std::make_unique<Ring>();
  const int rc = io_uring_queue_init(2 * options_.depth + 2, &r->ring, 0);
  r->ok = rc == 0;
  if (!r->ok) {
    UMAP_LOG(kWarn, "io_uring_queue_init for writes failed (errno ", -rc,
             "); writing one merged run at a time");
  }
  return r;
}

void WriteEngine::ReturnRing(std::unique_ptr<Ring> ring) {
  absl::MutexLock l(&rings_mu_);
  rings_.push_back(std::move(ring));
}

absl::Status WriteEngine::Write(File* file, absl::Span<const WritePiece> pieces,
                                absl::FunctionRef<void()> before_each) {
  Call call(file, pieces, options_.max_io_bytes);
  // An armed crash point does not make the writes sequential: a kill must be able to land
  // while writes are in flight, as a real crash does (see WriteConcurrently). A single run
  // goes through the ring too: it is one vectored write there, where WriteOneByOne would
  // issue one File::WriteAt (one DFS request) per piece.
  const bool concurrent = options_.use_uring && file->SupportsRing() && !call.runs.empty();
  std::unique_ptr<Ring> ring;
  if (concurrent) ring = TakeRing();
  if (ring == nullptr || !ring->ok) return WriteOneByOne(call, before_each);
  absl::Status st = WriteConcurrently(call, *ring, before_each);
  // A ring with requests we could not reap, or a broken submission queue, is leaked on
  // purpose: it is never reused.
  if (call.inflight == 0 && !call.ring_broken) {
    ReturnRing(std::move(ring));
  } else {
    ring.release();
  }
  return st;
}

absl::Status WriteEngine::WriteOneByOne(Call& call, absl::FunctionRef<void()> before_each) {
  for (const Call::Run& r : call.runs) {
    before_each();
    RETURN_IF_ERROR(call.WriteSync(r, 0));
    counters_.writes.fetch_add(1, std::memory_order_relaxed);
    counters_.write_bytes.fetch_add(r.bytes, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::Status WriteEngine::WriteConcurrently(Call& call, Ring& ring_holder,
                                            absl::FunctionRef<void()> before_each) {
  io_uring* ring = &ring_holder.ring;
  const size_t n = call.runs.size();
  call.started.assign(n, 0);
  call.timed_out.assign(n, false);
  const uint64_t timeout = options_.timeout_us;
  // Issues runs up to the depth, submits, waits for completions (at most until the oldest
  // write's deadline), and reaps or cancels; after an error nothing more is issued and the
  // writes in flight are waited for.
  while (call.next < n || call.inflight > 0 || call.prepared > 0) {
    while (call.first_error.ok() && call.next < n &&
           call.inflight + call.prepared < options_.depth) {
      // While crash points are armed (or counted), every write is handed to the kernel
      // before the next one's `before_each`: a kill at the n-th hit then finds exactly the
      // n-1 earlier writes issued (up to depth-1 of them still in flight), none merely
      // prepared in the submission queue, where a kill would silently drop them. Disarmed,
      // a batch of writes is submitted with one system call.
      if (call.prepared > 0 && UMAP_CRASH_POINTS_ACTIVE()) {
        SubmitPrepared(call, ring);
        if (!call.first_error.ok()) break;
      }
      const Call::Run& r = call.runs[call.next];
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      if (sqe == nullptr) break;
      before_each();
      call.file->PrepareWritev(sqe, &call.iov[r.first], r.count, r.offset);
      io_uring_sqe_set_data64(sqe, call.next);
      call.started[call.next] = env_->NowMicros();
      ++call.next;
      ++call.prepared;
    }
    if (call.prepared > 0) SubmitPrepared(call, ring);
    if (call.inflight == 0) {
      if (!call.first_error.ok() || call.next >= n) break;
      continue;
    }
    uint64_t deadline = kNoDeadline;
    for (size_t i = 0; i < call.next; ++i) {
      if (call.started[i] != 0 && !call.timed_out[i]) {
        deadline = std::min(deadline, DeadlineOf(call.started[i], timeout));
      }
    }
    io_uring_cqe* cqe = nullptr;
    int rc;
    if (deadline == kNoDeadline) {
      rc = io_uring_wait_cqe(ring, &cqe);
    } else {
      __kernel_timespec ts = TimeLeft(deadline, env_->NowMicros());
      rc = io_uring_wait_cqe_timeout(ring, &cqe, &ts);
    }
    if (rc == -ETIME || rc == -EINTR) {
      CancelExpired(call, ring);
      continue;
    }
    if (rc < 0) {
      // Waiting itself failed: nothing in flight can be trusted to be reaped from this ring.
      call.NoteError(PosixError(-rc, "waiting for write completions"));
      call.ring_broken = true;
      break;
    }
    Reap(call, ring);
  }
  if (call.first_error.ok()) {
    for (size_t i = 0; i < n; ++i) {
      if (call.timed_out[i]) {
        return PosixError(ETIMEDOUT, absl::StrCat("write of ", call.file->name(), " at offset ",
                                                  call.runs[i].offset, " passed its deadline"));
      }
    }
  }
  return call.first_error;
}

void WriteEngine::SubmitPrepared(Call& call, io_uring* ring) {
  const int rc = io_uring_submit(ring);
  if (rc >= 0) {
    const unsigned done = std::min<unsigned>(static_cast<unsigned>(rc), call.prepared);
    call.prepared -= done;
    call.inflight += done;
  } else if (rc != -EAGAIN && rc != -EBUSY && rc != -EINTR) {
    // The prepared writes never reach the kernel; the ones already submitted are waited
    // for by the caller. The caller sees the pieces as not written.
    call.NoteError(
        PosixError(-rc, absl::StrCat("io_uring_submit of writes to ", call.file->name())));
    call.ring_broken = true;
    call.prepared = 0;
  }
  // EAGAIN/EBUSY: the kernel is short of resources until completions are reaped.
}

void WriteEngine::CancelExpired(Call& call, io_uring* ring) {
  // The watchdog's report, then cancellation. A write that cannot be cancelled is still
  // waited for: its buffer is the caller's.
  const uint64_t now = env_->NowMicros();
  for (size_t i = 0; i < call.next; ++i) {
    if (call.started[i] == 0 || call.timed_out[i] ||
        !DeadlinePassed(call.started[i], options_.timeout_us, now)) {
      continue;
    }
    call.timed_out[i] = true;
    counters_.write_timeouts.fetch_add(1, std::memory_order_relaxed);
    UMAP_LOG(kWarn, "write of ", call.file->name(), " offset ", call.runs[i].offset,
             " length ", call.runs[i].bytes, " stalled for ", (now - call.started[i]) / 1000,
             " ms; cancelling it (the write-back fails with ETIMEDOUT; the journal keeps the "
             "data)");
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    if (sqe == nullptr) continue;
    io_uring_prep_cancel64(sqe, i, 0);
    io_uring_sqe_set_data64(sqe, kCancelTag);
    const int s = io_uring_submit(ring);
    if (s < 0) {
      UMAP_LOG(kError, "io_uring_submit of a write cancellation failed: errno ", -s,
               "; waiting for the write to return");
    }
  }
}

void WriteEngine::Reap(Call& call, io_uring* ring) {
  io_uring_cqe* cqe;
  unsigned head, seen = 0;
  io_uring_for_each_cqe(ring, head, cqe) {
    ++seen;
    const uint64_t tag = io_uring_cqe_get_data64(cqe);
    if (tag == kCancelTag) continue;
    --call.inflight;
    const Call::Run& r = call.runs[tag];
    call.started[tag] = 0;
    // The file sees its write's result (a fault-injecting wrapper may change it).
    const int res = call.file->FinishWritev(r.offset, &call.iov[r.first], r.count, cqe->res);
    if (res < 0) {
      // An expired write fails the call with ETIMEDOUT however it ends: cancelled
      // (ECANCELED), interrupted because the cancellation reached a FUSE server as
      // FUSE_INTERRUPT (EINTR, which would otherwise read as "retry at once"), or failed
      // late by the server.
      call.NoteError(
          call.timed_out[tag]
              ? PosixError(ETIMEDOUT, absl::StrCat("write of ", call.file->name(), " at offset ",
                                                   r.offset, " timed out (io_timeout_ms=",
                                                   options_.timeout_us / 1000,
                                                   "; it then ended with errno ", -res, ")"))
              : PosixError(-res, absl::StrCat("write of ", r.bytes, " bytes to ",
                                              call.file->name(), " at offset ", r.offset)));
      continue;
    }
    if (static_cast<size_t>(res) < r.bytes) {
      // Short write: the rest goes through WriteAt.
      absl::Status s = call.WriteSync(r, static_cast<size_t>(res));
      if (!s.ok()) {
        call.NoteError(std::move(s));
        continue;
      }
    }
    counters_.writes.fetch_add(1, std::memory_order_relaxed);
    counters_.write_bytes.fetch_add(r.bytes, std::memory_order_relaxed);
  }
  io_uring_cq_advance(ring, seen);
}

}  // namespace umap
