// node_writer: the job of the node-loss tests (tests/cluster/cluster_test.sh). It writes rounds
// of the kill workload (tests/runtime/kill_workload.h) through Umap and umsyncs each, with its
// journal wherever it is told (on the shared volume, for a restart on another node), and
// records in an oracle file outside the volume "B r" before the umsync of round r and "A r"
// after it returned 0. A failed umsync is retried every 100 ms (the blocks stay dirty), each
// failure recorded as "E r errno"; ESTALE (the journal was taken over: this node is fenced)
// is recorded as "F r" and ends the run after two more refused attempts.
//
//   node_writer init FILE SEED BLOCKS            the initial file (round 0), fsync'ed
//   node_writer write FILE JOURNAL ORACLE SEED BLOCKS WRITES FIRST_ROUND [ROUNDS]
//   node_writer check FILE SEED BLOCKS WRITES LOW HIGH [FROM TO]
//       maps FILE through Umap (read-only) and exits 0 when it equals the state after rounds
//       1..j for some j in [LOW, HIGH], then rounds FROM..TO (a job that went on from state
//       j) — prints "state j" —, 1 otherwise (prints the first block that fits no such
//       state).
// Exit codes of write: 0 the rounds are done; 2 usage or set-up; 5 fenced (ESTALE).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/runtime/kill_workload.h"
#include "umap/umap.h"

namespace {

uint64_t Num(const char* s) { return std::strtoull(s, nullptr, 10); }

bool Record(int fd, const std::string& line) {
  const std::string l = line + "\n";
  return ::write(fd, l.data(), l.size()) == static_cast<ssize_t>(l.size());
}

int Init(const char* path, const killtest::Workload& w) {
  std::vector<char> buf(w.blocks * w.block_size);
  for (uint64_t b = 0; b < w.blocks; ++b) w.Fill(0, b, buf.data() + b * w.block_size);
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd < 0 || ::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size()) ||
      ::fsync(fd) != 0) {
    std::perror(path);
    return 2;
  }
  ::close(fd);
  return 0;
}

umap_runtime* Runtime(const killtest::Workload& w, const char* journal) {
  umap_config c;
  umap_config_init(&c);
  // Room for the whole file and the shadows: a writer cut off from the file system faults
  // nothing in once it has read every block (Write), so it runs on until its umsync is
  // refused, as the node-loss test expects; a miss there would be a SIGBUS (ENOTCONN).
  c.cache_bytes = 2 * w.blocks * w.block_size;
  c.block_size = w.block_size;
  c.journal_dir = journal;
  umap_runtime* rt = umap_runtime_create(&c);
  if (rt == nullptr) std::perror("umap_runtime_create");
  return rt;
}

int Write(char** argv, int argc, const killtest::Workload& w) {
  const uint64_t first = Num(argv[8]);
  const uint64_t last = argc > 9 ? first + Num(argv[9]) - 1 : ~0ull;  // default: for ever
  int fd = ::open(argv[2], O_RDWR);
  int oracle = ::open(argv[4], O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (fd < 0 || oracle < 0) {
    std::perror("open");
    return 2;
  }
  umap_runtime* rt = Runtime(w, argv[3]);
  if (rt == nullptr) return 2;
  const size_t size = w.blocks * w.block_size;
  char* p = static_cast<char*>(
      umap_ex(rt, nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (p == MAP_FAILED) {
    std::perror("umap");
    return 2;
  }
  // Every block read once while the file system is there (see Runtime).
  for (uint64_t b = 0; b < w.blocks; ++b) {
    volatile char c = p[b * w.block_size];
    (void)c;
  }
  // Mapped (any replay of an earlier run's journal is done), and who we are.
  Record(oracle, "M " + std::to_string(::getpid()));
  for (uint64_t r = first; r <= last; ++r) {
    for (uint64_t b : w.RoundBlocks(r)) w.Fill(r, b, p + b * w.block_size);
    if (!Record(oracle, "B " + std::to_string(r))) return 2;
    int refused = 0;
    while (umsync(p, size, MS_SYNC) != 0) {
      const int err = errno;
      std::fprintf(stderr, "node_writer: umsync of round %llu: %s\n",
                   static_cast<unsigned long long>(r), std::strerror(err));
      if (err == ESTALE) {
        Record(oracle, "F " + std::to_string(r));
        if (++refused == 3) return 5;
      } else {
        Record(oracle, "E " + std::to_string(r) + " " + std::to_string(err));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!Record(oracle, "A " + std::to_string(r))) return 2;
  }
  if (uunmap(p, size) != 0) {
    std::perror("uunmap");
    return 2;
  }
  umap_runtime_destroy(rt);
  return 0;
}

int Check(char** argv, int argc, const killtest::Workload& w) {
  const uint64_t low = Num(argv[6]), high = Num(argv[7]);
  const uint64_t then_first = argc == 10 ? Num(argv[8]) : 1, then_last = argc == 10 ? Num(argv[9]) : 0;
  int fd = ::open(argv[2], O_RDONLY);
  if (fd < 0) {
    std::perror(argv[2]);
    return 2;
  }
  umap_runtime* rt = Runtime(w, nullptr);
  if (rt == nullptr) return 2;
  const size_t size = w.blocks * w.block_size;
  char* p = static_cast<char*>(umap_ex(rt, nullptr, size, PROT_READ, MAP_SHARED, fd, 0));
  if (p == MAP_FAILED) {
    std::perror("umap");
    return 2;
  }
  // The state after rounds 1..j: each block at the last round <= j that wrote it.
  std::vector<uint64_t> version(w.blocks, 0);
  std::vector<char> want(w.block_size);
  std::string mismatch = "no round in range";
  for (uint64_t j = 0; j <= high; ++j) {
    if (j > 0) {
      for (uint64_t b : w.RoundBlocks(j)) version[b] = j;
    }
    if (j < low) continue;
    std::vector<uint64_t> then = version;
    for (uint64_t r = then_first; r <= then_last; ++r) {
      for (uint64_t b : w.RoundBlocks(r)) then[b] = r;
    }
    mismatch.clear();
    for (uint64_t b = 0; b < w.blocks && mismatch.empty(); ++b) {
      w.Fill(then[b], b, want.data());
      if (std::memcmp(want.data(), p + b * w.block_size, w.block_size) != 0) {
        mismatch = "block " + std::to_string(b) + " holds version " +
                   std::to_string(w.VersionOf(b, p + b * w.block_size)) + ", state " +
                   std::to_string(j) + " has " + std::to_string(then[b]);
      }
    }
    if (mismatch.empty()) {
      std::printf("state %llu\n", static_cast<unsigned long long>(j));
      uunmap(p, size);
      umap_runtime_destroy(rt);
      return 0;
    }
  }
  std::printf("no state in [%llu, %llu]: %s\n", static_cast<unsigned long long>(low),
              static_cast<unsigned long long>(high), mismatch.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "init" && argc == 5) {
    return Init(argv[2], killtest::Workload{Num(argv[3]), Num(argv[4]), 4096, 1});
  }
  if (cmd == "write" && (argc == 9 || argc == 10)) {
    return Write(argv, argc, killtest::Workload{Num(argv[5]), Num(argv[6]), 4096, Num(argv[7])});
  }
  if (cmd == "check" && (argc == 8 || argc == 10)) {
    return Check(argv, argc, killtest::Workload{Num(argv[3]), Num(argv[4]), 4096, Num(argv[5])});
  }
  std::fprintf(stderr,
               "usage: node_writer init FILE SEED BLOCKS | write FILE JOURNAL ORACLE SEED BLOCKS "
               "WRITES FIRST_ROUND [ROUNDS] | check FILE SEED BLOCKS WRITES LOW HIGH [FROM TO]\n");
  return 2;
}
