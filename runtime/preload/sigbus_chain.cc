#include "runtime/preload/sigbus_chain.h"

#include <errno.h>
#include <pthread.h>

#include "runtime/preload/real_calls.h"
#include "runtime/preload/umap_c_api.h"

namespace umap::preload {
namespace {

// The one chain of the process (the kernel's handler has no context argument).
std::atomic<SigbusChain*> g_chain{nullptr};

// Spin flag guard: sigaction must stay async-signal-safe, so no mutex.
class Spin {
 public:
  explicit Spin(std::atomic_flag& f) : f_(f) {
    while (f_.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~Spin() { f_.clear(std::memory_order_release); }

 private:
  std::atomic_flag& f_;
};

}  // namespace

void SigbusChain::SetView(const struct sigaction& a) {
  const int next = 1 - current_.load(std::memory_order_relaxed);
  views_[next] = a;
  current_.store(next, std::memory_order_release);
}

void SigbusChain::BeforeRuntime() {
  Spin s(busy_);
  if (active()) return;
  struct sigaction now = {};
  if (RealSigaction(SIGBUS, nullptr, &now) == 0) SetView(now);
}

void SigbusChain::Activate() {
  g_chain.store(this, std::memory_order_release);
  active_.store(true, std::memory_order_release);
}

int SigbusChain::Sigaction(const struct sigaction* act, struct sigaction* old) {
  Spin s(busy_);
  const struct sigaction previous = views_[current_.load(std::memory_order_acquire)];
  if (act != nullptr) {
    if (!installed_.load(std::memory_order_relaxed)) {
      struct sigaction mine = {};
      mine.sa_sigaction = &SigbusChain::Handler;
      // As Umap's own: SA_NODEFER so that a fault inside a program's handler still finds
      // SIGBUS deliverable (blocked, the kernel would kill the process).
      mine.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
      sigemptyset(&mine.sa_mask);
      if (RealSigaction(SIGBUS, &mine, nullptr) != 0) return -1;
      installed_.store(true, std::memory_order_relaxed);
    }
    SetView(*act);
  }
  if (old != nullptr) *old = previous;
  return 0;
}

void SigbusChain::RestoreProgramDisposition() {
  if (!active()) return;
  const struct sigaction view = views_[current_.load(std::memory_order_acquire)];
  RealSigaction(SIGBUS, &view, nullptr);
  // The chain starts over: a child that adopts its mappings (Shim::AdoptInChild) takes
  // this disposition as the program's again when its own runtime starts.
  installed_.store(false, std::memory_order_relaxed);
  active_.store(false, std::memory_order_release);
}

void SigbusChain::Handler(int sig, siginfo_t* info, void* ucontext) {
  const int saved_errno = errno;
  if (c_api::umap_handle_signal(sig, info, ucontext) == 0) {
    SigbusChain* c = g_chain.load(std::memory_order_acquire);
    if (c != nullptr) {
      const struct sigaction a = c->views_[c->current_.load(std::memory_order_acquire)];
      c->Deliver(a, sig, info, ucontext);
    }
  }
  errno = saved_errno;
}

void SigbusChain::Deliver(const struct sigaction& a, int sig, siginfo_t* info, void* ucontext) {
  const bool siginfo = (a.sa_flags & SA_SIGINFO) != 0;
  const bool has_handler =
      siginfo ? a.sa_sigaction != nullptr : a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN;
  if (has_handler) {
    if (a.sa_flags & SA_RESETHAND) {
      struct sigaction dfl = {};
      dfl.sa_handler = SIG_DFL;
      SetView(dfl);
    }
    // The program's mask (and SIGBUS itself unless it asked for SA_NODEFER) while its
    // handler runs, as the kernel would have set it.
    sigset_t mask = a.sa_mask, old;
    if ((a.sa_flags & SA_NODEFER) == 0) sigaddset(&mask, SIGBUS);
    pthread_sigmask(SIG_BLOCK, &mask, &old);
    if (siginfo) {
      a.sa_sigaction(sig, info, ucontext);
    } else {
      a.sa_handler(sig);
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return;
  }
  if (!siginfo && a.sa_handler == SIG_IGN && info != nullptr && info->si_code <= 0) return;
  // Default action (or SIG_IGN for a real fault, which the kernel does not let a process
  // ignore): the faulting access runs again on return and meets the default disposition; a
  // signal sent with kill(2) is raised again.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  RealSigaction(sig, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

}  // namespace umap::preload
