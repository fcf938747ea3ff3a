#include "runtime/writeback/write_refusals.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/synchronization/mutex.h"
#include "base/posix_error.h"
#include "runtime/fault/fault_signal.h"

namespace umap::runtime {
namespace {

constexpr int kSlots = 1024;
constexpr size_t kNameBytes = 256;

struct Slot {
  std::atomic<bool> used{false};
  // Published last (release) by Register, cleared first by Unregister; 0: empty.
  std::atomic<uintptr_t> start{0};
  size_t length = 0;
  uint64_t file_offset = 0;
  pid_t pid = 0;  // the registering process: a fork child inherits the table, not the mapping
  WriteRefusals::Reason reason = WriteRefusals::Reason::kReadOnly;
  char file[kNameBytes] = {};
};

Slot g_slots[kSlots];
absl::Mutex g_mu;
bool g_installed ABSL_GUARDED_BY(g_mu) = false;
struct sigaction g_previous;  // written once under g_mu before the handler is installed

// An async-signal-safe line builder: no allocation, no locale, no stdio.
class Line {
 public:
  void Add(const char* s) {
    while (*s != '\0' && n_ < sizeof(buf_)) buf_[n_++] = *s++;
  }
  void Dec(uint64_t v) {
    char tmp[24];
    int k = 0;
    do {
      tmp[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (k > 0 && n_ < sizeof(buf_)) buf_[n_++] = tmp[--k];
  }
  void Hex(uint64_t v) {
    Add("0x");
    char tmp[16];
    int k = 0;
    do {
      tmp[k++] = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v != 0);
    while (k > 0 && n_ < sizeof(buf_)) buf_[n_++] = tmp[--k];
  }
  void Write() {
    if (n_ == sizeof(buf_)) buf_[n_ - 1] = '\n';
    ssize_t ignored = ::write(STDERR_FILENO, buf_, n_);
    (void)ignored;
  }

 private:
  char buf_[768];
  size_t n_ = 0;
};

void Explain(const Slot& s, uintptr_t addr) {
  Line line;
  line.Add("umap[");
  line.Dec(static_cast<uint64_t>(::getpid()));
  line.Add("] ERROR write_refusals.cc: SIGSEGV: a write at ");
  line.Hex(addr);
  line.Add(" (file offset ");
  line.Dec(s.file_offset + (addr - s.start.load(std::memory_order_relaxed)));
  line.Add(" of ");
  line.Add(s.file);
  line.Add(") was refused: ");
  if (s.reason == WriteRefusals::Reason::kReadOnly) {
    line.Add("the mapping is read-only (coherence read-only: it never writes back); map the "
             "file partitioned-write to write it\n");
  } else {
    line.Add("this partitioned-write mapping did not declare (and lock) that range; add it to "
             "its write ranges (docs/consistency.md)\n");
  }
  line.Write();
}

void OnSigsegv(int sig, siginfo_t* info, void* ucontext) {
  const int saved_errno = errno;
  if (info != nullptr && info->si_code == SEGV_ACCERR) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
    const pid_t self = ::getpid();
    for (const Slot& s : g_slots) {
      const uintptr_t start = s.start.load(std::memory_order_acquire);
      if (start != 0 && addr - start < s.length && s.pid == self) {
        Explain(s, addr);
        break;
      }
    }
  }
  ChainToPrevious(g_previous, sig, info, ucontext);
  errno = saved_errno;
}

absl::Status InstallOnce() {
  absl::MutexLock l(&g_mu);
  if (g_installed) return absl::OkStatus();
  struct sigaction sa = {};
  sa.sa_sigaction = OnSigsegv;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGSEGV, &sa, &g_previous) != 0) {
    return PosixError(errno, "sigaction(SIGSEGV) to explain refused writes");
  }
  g_installed = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> WriteRefusals::Register(const char* start, size_t length,
                                            uint64_t file_offset, const std::string& file,
                                            Reason reason) {
  if (absl::Status s = InstallOnce(); !s.ok()) return s;
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    bool expected = false;
    if (!s.used.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
    s.length = length;
    s.file_offset = file_offset;
    s.pid = ::getpid();
    s.reason = reason;
    const size_t n = std::min(file.size(), kNameBytes - 1);
    std::memcpy(s.file, file.data(), n);
    s.file[n] = '\0';
    s.start.store(reinterpret_cast<uintptr_t>(start), std::memory_order_release);
    return i;
  }
  return PosixError(ENOMEM, "more than 1024 read-only Umap ranges to explain");
}

void WriteRefusals::Unregister(int handle) {
  if (handle < 0 || handle >= kSlots) return;
  g_slots[handle].start.store(0, std::memory_order_release);
  g_slots[handle].used.store(false, std::memory_order_release);
}

}  // namespace umap::runtime
