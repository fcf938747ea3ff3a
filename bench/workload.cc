#include "bench/workload.h"

#include <malloc.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/process_memory.h"
#include "base/status_macros.h"
#include "bench/posix_io.h"
#include "bench/sigbus_report.h"
#include "bench/watchdog.h"
#include "bench/worker.h"

namespace umap_bench {
namespace {

using Clock = std::chrono::steady_clock;

// getrusage of the whole process: every thread, the runtime's included.
struct ProcessUsage {
  uint64_t minor_faults = 0, major_faults = 0;
  double cpu_s = 0;
  uint64_t voluntary_switches = 0, involuntary_switches = 0;
};
ProcessUsage Usage() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return {static_cast<uint64_t>(ru.ru_minflt), static_cast<uint64_t>(ru.ru_majflt),
          seconds(ru.ru_utime) + seconds(ru.ru_stime), static_cast<uint64_t>(ru.ru_nvcsw),
          static_cast<uint64_t>(ru.ru_nivcsw)};
}

// The worker threads of one run: started waiting, released together, joined by Wait or at
// the latest by the destructor (so an error between start and release cannot leave a
// joinable thread behind).
class WorkerThreads {
 public:
  WorkerThreads(BenchBackend& backend, const Workload& w, uint64_t items, int repeat, uint32_t tag,
                std::vector<std::unique_ptr<Worker>>& workers) {
    for (unsigned t = 0; t < w.threads; ++t) {
      threads_.emplace_back([&, t, items, repeat, tag] {
        WorkerLoop(backend, w, items, t, repeat, tag, flags_, *workers[t]);
        absl::MutexLock l(&mu_);
        ++finished_;
      });
    }
  }
  ~WorkerThreads() {
    flags_.stop.store(true);
    Release();
    for (auto& th : threads_) th.join();
  }
  void Release() {
    flags_.go.store(true, std::memory_order_release);
    flags_.go.notify_all();
  }
  // Waits until every worker is done; with max_seconds > 0 stops them at that deadline.
  // Returns true when they were stopped.
  bool Wait(double max_seconds) {
    bool capped = false;
    if (max_seconds > 0) {
      absl::MutexLock l(&mu_);
      auto all_done = [this] { return finished_ == threads_.size(); };
      capped = !mu_.AwaitWithTimeout(absl::Condition(&all_done), absl::Seconds(max_seconds));
    }
    if (capped) flags_.stop.store(true);
    for (auto& th : threads_) th.join();
    threads_.clear();
    return capped;
  }

 private:
  WorkerFlags flags_;
  absl::Mutex mu_;
  size_t finished_ = 0;  // guarded by mu_
  std::vector<std::thread> threads_;
};

absl::Status ValidateRun(const BenchFile& file, const Workload& w, uint32_t tag) {
  if (w.op_size == 0 || w.op_size % 8 != 0 || file.size() % w.op_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("op size ", w.op_size, " must be a multiple of 8 that divides the file size ",
                     file.size()));
  }
  if (w.threads == 0 || w.threads > 64) {
    return absl::InvalidArgumentError(absl::StrCat("threads ", w.threads, " not in 1..64"));
  }
  if (tag == 0 || tag > kMaxTag) {
    return absl::InvalidArgumentError(absl::StrCat("tag ", tag, " not in 1..", kMaxTag));
  }
  return absl::OkStatus();
}

// What the timed region measured.
struct Timed {
  double wall_s = 0;
  ProcessUsage before, after;
  absl::Status final_sync;
  uint64_t peak_rss = 0;
  bool capped = false;
};

// Starts the workers, passes the start gate, releases them together and times until they
// are done (or stopped at max_seconds) and, for writes, the final sync has returned.
absl::StatusOr<Timed> RunTimed(BenchBackend& backend, const Workload& w, const RunConfig& rc,
                               uint64_t items, int repeat, uint32_t tag,
                               std::vector<std::unique_ptr<Worker>>& workers, Watchdog& watchdog) {
  WorkerThreads threads(backend, w, items, repeat, tag, workers);
  if (rc.start_gate) RETURN_IF_ERROR(rc.start_gate());
  // Reset the per-run peak just before the start.
  if (!WriteSmallFile("/proc/self/clear_refs", "5").ok()) {
    // Old kernel or no procfs: peak_rss is then the process's peak so far.
  }
  Timed m;
  m.before = Usage();
  const auto t0 = Clock::now();
  threads.Release();
  m.capped = threads.Wait(rc.max_seconds);
  if (w.writes()) {
    watchdog.SetPhase("final sync");
    m.final_sync = backend.Sync(0);
  }
  const auto t1 = Clock::now();
  m.after = Usage();
  if (rc.timed_end) rc.timed_end();
  watchdog.SetPhase("after the run");
  m.wall_s = std::chrono::duration<double>(t1 - t0).count();
  m.peak_rss = umap::PeakRssBytes();
  return m;
}

// Throughput, faults and the workers' checks into r; failures into errors.
void AddMeasurements(const Timed& m, const Workload& w,
                     const std::vector<std::unique_ptr<Worker>>& workers, RunResult& r,
                     std::vector<std::string>& errors) {
  r.wall_s = m.wall_s;
  r.peak_rss = m.peak_rss;
  r.capped = m.capped;
  for (auto& wk : workers) r.ops += wk->done.load();
  r.ops_per_s = r.wall_s > 0 ? static_cast<double>(r.ops) / r.wall_s : 0;
  r.mb_per_s = r.ops_per_s * static_cast<double>(w.op_size) / 1e6;
  r.major_faults = m.after.major_faults - m.before.major_faults;
  r.process_faults = (m.after.minor_faults - m.before.minor_faults) + r.major_faults;
  r.faults = r.process_faults;
  r.cpu_s = m.after.cpu_s - m.before.cpu_s;
  r.voluntary_switches = m.after.voluntary_switches - m.before.voluntary_switches;
  r.involuntary_switches = m.after.involuntary_switches - m.before.involuntary_switches;
  for (auto& wk : workers) {
    r.read_checks += wk->read_checks;
    if (!wk->error.ok()) errors.push_back(wk->error.ToString());
    if (wk->bad_reads > 0) {
      errors.push_back(
          absl::StrCat("WRONG DATA READ: ", wk->bad_reads, " reads; first: ", wk->first_bad));
    }
  }
  if (!m.final_sync.ok()) {
    errors.push_back(absl::StrCat("final sync: ", m.final_sync.ToString()));
  }
}

// After a write run: the whole file against the items the workers wrote (then restored).
absl::Status VerifyWrites(const BenchFile& file, const Workload& w, uint32_t tag,
                          const std::vector<std::unique_ptr<Worker>>& workers) {
  const uint64_t items = file.size() / w.op_size;
  std::vector<uint64_t> written((items + 63) / 64, 0);
  for (auto& wk : workers) {
    for (size_t i = 0; i < wk->written.size(); ++i) written[i] |= wk->written[i];
  }
  return file.VerifyAndRestore(written, w.op_size, tag);
}

}  // namespace

const char* PatternName(Pattern p) {
  switch (p) {
    case Pattern::kRandom:
      return "random";
    case Pattern::kSequential:
      return "sequential";
    case Pattern::kStrided:
      return "strided";
    case Pattern::kReuse:
      return "reuse";
    case Pattern::kPhase:
      return "phase";
  }
  return "?";
}

const char* AccessName(Access a) {
  switch (a) {
    case Access::kRead:
      return "read";
    case Access::kWrite:
      return "write";
    case Access::kMixed:
      return "mixed";
  }
  return "?";
}

absl::StatusOr<Pattern> ParsePattern(const std::string& s) {
  for (Pattern p : {Pattern::kRandom, Pattern::kSequential, Pattern::kStrided, Pattern::kReuse,
                    Pattern::kPhase}) {
    if (s == PatternName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown pattern '", s, "' (random, sequential, strided, reuse, phase)"));
}

absl::StatusOr<Access> ParseAccess(const std::string& s) {
  for (Access a : {Access::kRead, Access::kWrite, Access::kMixed}) {
    if (s == AccessName(a)) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown access '", s, "' (read, write, mixed)"));
}

std::string Workload::Name() const {
  std::string n = absl::StrCat(PatternName(pattern), "-", AccessName(access));
  if (access == Access::kMixed) {
    absl::StrAppend(&n, std::lround(write_fraction * 100), "w");
  }
  if (op_size % 1024 == 0) {
    absl::StrAppend(&n, "-", op_size / 1024, "k");
  } else {
    absl::StrAppend(&n, "-", op_size, "B");
  }
  if (pattern == Pattern::kRandom && locality > 0) absl::StrAppend(&n, "-L", locality);
  if (pattern == Pattern::kStrided) absl::StrAppend(&n, "-s", stride_items);
  if (pattern == Pattern::kReuse || pattern == Pattern::kPhase) {
    absl::StrAppend(&n, "-W", working_set);
  }
  if (writes() && sync_every > 0) absl::StrAppend(&n, "-sync", sync_every);
  if (processes > 1) absl::StrAppend(&n, "-x", processes);
  if (procs > 1) absl::StrAppend(&n, "-p", procs);
  return n;
}

absl::StatusOr<RunResult> RunOnce(const BenchFile& file, const Workload& w, const RunConfig& rc,
                                  int repeat, uint32_t tag) {
  RETURN_IF_ERROR(ValidateRun(file, w, tag));
  const bool writes = w.writes();
  const std::string what = absl::StrFormat("%s %s, %u threads, repeat %d on %s", rc.backend,
                                           w.Name(), w.threads, repeat, file.path());
  const bool test_corrupt = rc.TEST_corrupt_word * 8 < file.size();
  const uint64_t good_word = OriginalWord(rc.TEST_corrupt_word);
  if (test_corrupt && !writes) {
    RETURN_IF_ERROR(file.TEST_WriteWord(rc.TEST_corrupt_word, good_word ^ 1));
  }
  RETURN_IF_ERROR(file.DropCache(rc.drop_caches));

  // Set-up (untimed).
  ASSIGN_OR_RETURN(std::unique_ptr<BenchBackend> backend, NewBackend(rc.backend, rc.options));
  OpenParams params;
  params.writable = writes;
  params.threads = w.threads;
  params.op_size = w.op_size;
  RETURN_IF_ERROR(backend->Open(file, params));
  SigbusReport::Arm(backend->mapped_base(), file.size(), what);
  RunResult r;
  r.backend = rc.backend;
  r.workload = w.Name();
  r.threads = w.threads;
  r.repeat = repeat;
  std::vector<std::string> errors;
  std::vector<std::unique_ptr<Worker>> workers;
  for (unsigned t = 0; t < w.threads; ++t) workers.push_back(std::make_unique<Worker>());
  {
    Watchdog watchdog(workers, rc.stall_seconds, what,
                      [&backend] { return backend->StallReport(); });
    ASSIGN_OR_RETURN(Timed m, RunTimed(*backend, w, rc, file.size() / w.op_size, repeat, tag,
                                       workers, watchdog));
    AddMeasurements(m, w, workers, r, errors);
    backend->Collect(r);
    auto cached = file.CachedBytes();
    if (cached.ok()) r.file_cached_bytes = *cached;

    // Tear down (untimed); an unmap error is a write-back error and fails the run.
    watchdog.SetPhase("unmap");
    absl::Status closed = backend->Close();
    if (!closed.ok()) errors.push_back(closed.ToString());
    backend.reset();
    SigbusReport::Disarm();
  }
  // Give freed heap (the runtime's, the journal's) back, so the next run's peak RSS starts
  // from what is really in use.
  ::malloc_trim(0);

  if (test_corrupt) {
    // Read run: put the word back. Write run: break it just before the verification.
    RETURN_IF_ERROR(file.TEST_WriteWord(rc.TEST_corrupt_word, writes ? good_word ^ 1 : good_word));
  }
  if (writes) {
    absl::Status v = VerifyWrites(file, w, tag, workers);
    if (!v.ok()) errors.push_back(v.ToString());
  }
  r.verified = errors.empty();
  for (size_t i = 0; i < errors.size(); ++i) {
    absl::StrAppend(&r.error, i ? "; " : "", errors[i]);
  }
  return r;
}

}  // namespace umap_bench
