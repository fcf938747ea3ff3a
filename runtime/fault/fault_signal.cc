#include "runtime/fault/fault_signal.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/synchronization/mutex.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "runtime/fault/srcu.h"

namespace umap::runtime {
namespace {

constexpr int kMaxRuntimes = 256;

std::atomic<FaultSignalTarget*> g_runtimes[kMaxRuntimes];
Srcu g_srcu;
absl::Mutex g_mu;
bool g_installed ABSL_GUARDED_BY(g_mu) = false;
bool g_segv_installed ABSL_GUARDED_BY(g_mu) = false;
// The dispositions Umap's handlers replaced: each written once under g_mu before its
// handler is installed, read by the handler.
struct sigaction g_previous;
struct sigaction g_previous_segv;
// Threads touching quiesced ranges sleep on this word (a futex) until it changes.
std::atomic<uint32_t> g_park{0};
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

// Whether the faulting access was a write. x86-64 reports the page-fault error code in the
// signal frame (bit 1: write). Elsewhere the answer is "unknown": the block is installed
// write-protected and a write takes one more (write-protect) fault.
bool FaultWasWrite(void* ucontext) {
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(ucontext);
  return (uc->uc_mcontext.gregs[REG_ERR] & 0x2) != 0;
#else
  (void)ucontext;
  return false;
#endif
}

}  // namespace

void ChainToPrevious(const struct sigaction& prev, int sig, siginfo_t* info, void* ucontext) {
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, ucontext);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  if (prev.sa_handler == SIG_IGN && info->si_code <= 0) return;  // a kill(2) the app ignores
  // Default action. A fault re-executes the access when the handler returns and meets the
  // default disposition; a signal sent by kill(2) is raised again (delivered on return).
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  if (info->si_code <= 0) ::raise(sig);
}

namespace {

void OnSigbus(int sig, siginfo_t* info, void* ucontext) {
  const int saved_errno = errno;
  const bool handled = DispatchFaultSignal(sig, info, ucontext);
  if (!handled) ChainToPrevious(g_previous, sig, info, ucontext);
  errno = saved_errno;
}

void OnSigsegv(int sig, siginfo_t* info, void* ucontext) {
  const int saved_errno = errno;
  const bool handled = DispatchFaultSignal(sig, info, ucontext);
  if (!handled) ChainToPrevious(g_previous_segv, sig, info, ucontext);
  errno = saved_errno;
}

// An access to a PROT_NONE page: a quiesced range of some runtime?
bool DispatchQuiesced(siginfo_t* info, void* ucontext) {
  if (info == nullptr || info->si_code != SEGV_ACCERR) return false;
  const uint64_t addr = reinterpret_cast<uint64_t>(info->si_addr);
  // The generation is read before the state: a resume in between changes it, so the
  // futex wait below returns at once.
  const uint32_t generation = ParkGeneration();
  FaultSignalTarget::QuiescedAccess what = FaultSignalTarget::QuiescedAccess::kNotOurs;
  {
    SrcuReadLock section(g_srcu);
    for (int i = 0; i < kMaxRuntimes && what == FaultSignalTarget::QuiescedAccess::kNotOurs;
         ++i) {
      FaultSignalTarget* rt = g_runtimes[i].load(std::memory_order_acquire);
      if (rt != nullptr) what = rt->ClassifyQuiescedAccess(addr, FaultWasWrite(ucontext));
    }
  }
  switch (what) {
    case FaultSignalTarget::QuiescedAccess::kNotOurs:
      return false;
    case FaultSignalTarget::QuiescedAccess::kRetry:
      return true;
    case FaultSignalTarget::QuiescedAccess::kPark:
      ParkFaultingThread(generation);
      return true;
    case FaultSignalTarget::QuiescedAccess::kFenced: {
      static const char kMsg[] =
          "umap: access to a mapping of a fenced runtime (its resume after a checkpoint was "
          "refused: see the log); SIGSEGV\n";
      ssize_t ignored = ::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
      (void)ignored;
      return false;
    }
  }
  return false;
}

}  // namespace

uint32_t ParkGeneration() { return g_park.load(std::memory_order_acquire); }

void ParkFaultingThread(uint32_t generation) {
  while (g_park.load(std::memory_order_acquire) == generation) {
    // EINTR (another signal) and EAGAIN (the word changed) both end in the re-check.
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g_park), FUTEX_WAIT_PRIVATE, generation,
              nullptr, nullptr, 0);
  }
}

void WakeParkedThreads() {
  g_park.fetch_add(1, std::memory_order_acq_rel);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g_park), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
            nullptr, 0);
}

void LockFaultSignalForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { g_mu.Lock(); }

void UnlockFaultSignalAfterFork(bool child) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (child) {
    for (std::atomic<FaultSignalTarget*>& r : g_runtimes) r.store(nullptr, std::memory_order_relaxed);
  }
  g_mu.Unlock();
}

void FaultSignalDispositionRestored() {
  absl::MutexLock l(&g_mu);
  g_installed = false;
}

bool DispatchFaultSignal(int sig, siginfo_t* info, void* ucontext) {
  if (sig == SIGSEGV) return DispatchQuiesced(info, ucontext);
  // A userfaultfd SIGBUS is a bus error at a user address (BUS_ADRERR); poison (UFFDIO_POISON,
  // end of file or a failed read) is BUS_MCEERR_AR and must reach the application.
  if (sig != SIGBUS || info == nullptr || info->si_code != BUS_ADRERR) return false;
  const uint64_t addr = reinterpret_cast<uint64_t>(info->si_addr);
  const bool write = FaultWasWrite(ucontext);
  SrcuReadLock section(g_srcu);
  for (int i = 0; i < kMaxRuntimes; ++i) {
    FaultSignalTarget* rt = g_runtimes[i].load(std::memory_order_acquire);
    if (rt != nullptr && rt->HandleFaultSignal(addr, write)) return true;
  }
  return false;
}

namespace {

// Installs `handler` for `sig`, keeping the disposition it replaces in *previous.
absl::Status Install(int sig, void (*handler)(int, siginfo_t*, void*), struct sigaction* previous,
                     const char* what) {
  struct sigaction sa = {};
  sa.sa_sigaction = handler;
  // SA_NODEFER: a fault inside the handler's own work (it touches no Umap page, but a nested
  // handler of the application's might; a thread parked in it for a quiesce may take
  // another signal) must not find the signal blocked, which would make the kernel kill the
  // process.
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(sig, &sa, previous) != 0) return PosixError(errno, what);
  return absl::OkStatus();
}

}  // namespace

absl::Status AttachFaultSignal(FaultSignalTarget* rt) {
  absl::MutexLock l(&g_mu);
  if (!g_installed && rt->signal_mode()) {
    RETURN_IF_ERROR(
        Install(SIGBUS, OnSigbus, &g_previous, "sigaction(SIGBUS) for signal fault mode"));
    g_installed = true;
  }
  for (int i = 0; i < kMaxRuntimes; ++i) {
    FaultSignalTarget* expected = nullptr;
    if (g_runtimes[i].compare_exchange_strong(expected, rt, std::memory_order_acq_rel)) {
      return absl::OkStatus();
    }
  }
  return PosixError(ENOMEM, "more than 256 runtimes in signal fault mode");
}

absl::Status InstallQuiesceSignal() {
  absl::MutexLock l(&g_mu);
  if (g_segv_installed) return absl::OkStatus();
  RETURN_IF_ERROR(Install(SIGSEGV, OnSigsegv, &g_previous_segv,
                          "sigaction(SIGSEGV) for threads touching quiesced mappings"));
  g_segv_installed = true;
  return absl::OkStatus();
}

void DetachFaultSignal(FaultSignalTarget* rt) {
  absl::MutexLock l(&g_mu);
  for (int i = 0; i < kMaxRuntimes; ++i) {
    FaultSignalTarget* expected = rt;
    g_runtimes[i].compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);
  }
  // The handler stays installed: a fault racing with the last runtime's removal still finds
  // a handler, which chains to the previous one.
  g_srcu.Synchronize();
}

}  // namespace umap::runtime
