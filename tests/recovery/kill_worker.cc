// recovery_kill_worker: a process that writes through Umap and gets killed, for the recovery
// kill tests. Modes:
//   umap FILE JOURNAL ROUNDS [atomic|relaxed|intent]  rounds of writes + umsync through the
//                                 C API (relaxed and intent: the relaxed policy);
//                                 the harness arms UMAP_CRASH_AT=<point>[:n] to SIGKILL it
//                                 at a protocol stage. Exits 0 after uunmap if never killed.
//   hold FILE JOURNAL ROUNDS [..] as umap, then prints "ready <pid>" and sleeps: the live owner
//   hold-sync FILE JOURNAL ROUNDS [..]  as hold, then on SIGUSR1 writes round ROUNDS+1,
//                                 umsyncs it, prints "umsync RC errno E" and exits (0, or
//                                 20 when the umsync failed)
//   backlog FILE JOURNAL ROUNDS [intent]  commits ROUNDS transactions with the Journal API,
//                                 applies none, and _exits without closing the journal (a
//                                 process killed right after its commits).
// This TU includes umap/umap.h, so it must not see namespace umap (see temp_dir.h).
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/recovery/kill_workload.h"
#include "umap/umap.h"

namespace {

enum class Hold { kNo, kForever, kThenSync };

// Waits for SIGUSR1 (blocked, so that it is never lost before the wait).
void AwaitSigusr1() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  int sig = 0;
  sigwait(&set, &sig);
}

int RunUmap(const char* file, const char* journal, uint64_t rounds, Hold hold, bool intent,
            bool relaxed) {
  using namespace recoverytest;
  int fd = ::open(file, O_RDWR);
  if (fd < 0) {
    std::perror("open");
    return 10;
  }
  umap_config c;
  umap_config_init(&c);
  c.cache_bytes = 64 << 20;  // never evicts: one transaction per umsync
  c.block_size = kKillBlockSize;
  c.journal_dir = journal;
  c.policy = intent || relaxed ? UMAP_POLICY_RELAXED : UMAP_POLICY_ATOMIC;
  c.journal_mode = intent ? UMAP_JOURNAL_INTENT : UMAP_JOURNAL_DATA;
  umap_runtime* rt = umap_runtime_create(&c);
  if (rt == nullptr) {
    std::perror("umap_runtime_create");
    return 11;
  }
  const size_t size = kKillBlocks * kKillBlockSize;
  char* p = static_cast<char*>(
      umap_ex(rt, nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (p == MAP_FAILED) {
    std::perror("umap");
    return 12;
  }
  for (uint64_t r = 1; r <= rounds; ++r) {
    for (uint64_t b : RoundBlocks(r)) {
      const std::string img = Image(r, b, kKillBlockSize);
      std::memcpy(p + b * kKillBlockSize, img.data(), img.size());
    }
    if (umsync(p, size, MS_SYNC) != 0) {
      std::fprintf(stderr, "umsync round %llu: %s\n", static_cast<unsigned long long>(r),
                   std::strerror(errno));
      return 13;
    }
  }
  if (hold == Hold::kForever) {
    std::printf("ready %d\n", static_cast<int>(::getpid()));
    std::fflush(stdout);
    for (;;) ::pause();
  }
  if (hold == Hold::kThenSync) {
    std::printf("ready %d\n", static_cast<int>(::getpid()));
    std::fflush(stdout);
    AwaitSigusr1();
    const uint64_t r = rounds + 1;
    for (uint64_t b : RoundBlocks(r)) {
      const std::string img = Image(r, b, kKillBlockSize);
      std::memcpy(p + b * kKillBlockSize, img.data(), img.size());
    }
    const int rc = umsync(p, size, MS_SYNC);
    std::printf("umsync %d errno %d\n", rc, rc == 0 ? 0 : errno);
    std::fflush(stdout);
    return rc == 0 ? 0 : 20;
  }
  if (uunmap(p, size) != 0) {
    std::perror("uunmap");
    return 14;
  }
  if (umap_runtime_destroy(rt) != 0) {
    std::perror("umap_runtime_destroy");
    return 15;
  }
  ::close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s umap|hold|backlog FILE JOURNAL ROUNDS [intent]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const uint64_t rounds = std::strtoull(argv[4], nullptr, 10);
  const bool intent = argc > 5 && std::strcmp(argv[5], "intent") == 0;
  const bool relaxed = argc > 5 && std::strcmp(argv[5], "relaxed") == 0;
  if (mode == "umap" || mode == "hold" || mode == "hold-sync") {
    // SIGUSR1 is blocked from the start (threads started later inherit the mask).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    const Hold hold = mode == "hold"        ? Hold::kForever
                      : mode == "hold-sync" ? Hold::kThenSync
                                            : Hold::kNo;
    return RunUmap(argv[2], argv[3], rounds, hold, intent, relaxed);
  }
  if (mode == "backlog") return recoverytest::RunBacklog(argv[2], argv[3], rounds, intent);
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
