#include "bench/sigbus_report.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>

#include "umap/umap.h"

namespace umap_bench {
namespace {

// What the SIGBUS handler reports (set around each run; read only in the handler).
struct SigbusInfo {
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> len{0};
  char what[512] = {};
};
SigbusInfo g_sigbus;

void AppendStr(char*& p, char* end, const char* s) {
  while (*s && p < end) *p++ = *s++;
}
void AppendHex(char*& p, char* end, uint64_t v) {
  char tmp[17];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v && n < 16);
  AppendStr(p, end, "0x");
  while (n > 0 && p < end) *p++ = tmp[--n];
}
void AppendDec(char*& p, char* end, uint64_t v) {
  char tmp[21];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  while (n > 0 && p < end) *p++ = tmp[--n];
}

// Async-signal-safe: formats with the helpers above, writes, exits 3.
void OnSigbus(int sig, siginfo_t* si, void* ucontext) {
  // In signal fault mode an ordinary umap miss is a SIGBUS that umap resolves
  // (include/umap/umap.h): hand it over first, report only what is not umap's.
  if (umap_handle_signal(sig, si, ucontext)) return;
  char buf[1024];
  char* p = buf;
  char* end = buf + sizeof(buf) - 1;
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  const uintptr_t base = g_sigbus.base.load(std::memory_order_relaxed);
  const size_t len = g_sigbus.len.load(std::memory_order_relaxed);
  AppendStr(p, end, "\numap-bench: SIGBUS at address ");
  AppendHex(p, end, a);
  if (base != 0 && a >= base && a < base + len) {
    AppendStr(p, end, " = file offset ");
    AppendDec(p, end, a - base);
  }
  AppendStr(p, end, " during ");
  AppendStr(p, end, g_sigbus.what);
  AppendStr(p, end,
            " (the mapping raised SIGBUS: an I/O error, a page past end of file, or no cache "
            "block; any umap log lines above say which)\n");
  *p = 0;
  ssize_t ignored = ::write(2, buf, static_cast<size_t>(p - buf));
  (void)ignored;
  ::_exit(3);
}

void InstallSigbusHandler() {
  static bool done = [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
    return true;
  }();
  (void)done;
}

}  // namespace

void SigbusReport::Arm(const char* base, size_t len, const std::string& what) {
  InstallSigbusHandler();
  std::snprintf(g_sigbus.what, sizeof(g_sigbus.what), "%s", what.c_str());
  g_sigbus.base.store(reinterpret_cast<uintptr_t>(base));
  g_sigbus.len.store(len);
}

void SigbusReport::Disarm() { g_sigbus.base.store(0); }

}  // namespace umap_bench
