// umap-sharedcache-probe, parts c and d (issue 39): two processes sharing one memfd, each
// with its own userfaultfd (a forked peer driven over a socket: faults across processes, hole
// punches seen by both, memory a punch returns, punch cost while both map the blocks), and
// memory cgroup (v1) charging of shared memfd pages across processes and cgroups.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "shared_cache_probe_common.h"

namespace sharedcache_probe {
namespace {

// ---------------------------------------------------------------------------------------
// Part c: two processes.

// The child's side: a command loop over a socket.
enum Op : uint32_t { kMap, kRead, kWrite, kTouchAll, kPfn, kExit };
struct Cmd {
  Op op;
  uint64_t arg, arg2;
};
struct Reply {
  uint64_t value, missing, minor, ns;
};

void SendAll(int fd, const void* p, size_t n) {
  if (::send(fd, p, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) Fatal("send");
}
void RecvAll(int fd, void* p, size_t n) {
  if (::recv(fd, p, n, MSG_WAITALL) != static_cast<ssize_t>(n)) Fatal("recv");
}

// A process's view of the memfd with its own userfaultfd and handler (MISSING faults filled
// with `fill`'s first bytes).
struct View {
  int uffd = -1;
  char* base = nullptr;
  size_t len = 0;
  Server* server = nullptr;
  std::vector<char> fill;
  void Open(int memfd, size_t l, size_t block, uint64_t mode, uint64_t fill_value) {
    len = l;
    fill.assign(std::max(block, kPage), 0);
    Store64(fill.data(), fill_value);
    uffd = OpenUffdAny(UFFD_FEATURE_MINOR_SHMEM, nullptr);
    base = MapOrDie(len, MAP_SHARED, memfd);
    RegisterOrDie(uffd, base, len, mode);
    server = new Server(uffd, base, len, block, fill.data());
    server->Start(false);
  }
  void Close() {
    if (server == nullptr) return;
    server->Stop();
    delete server;
    server = nullptr;
    ::munmap(base, len);
    ::close(uffd);
  }
  Reply Do(const Cmd& c) {
    Reply r = {};
    const uint64_t m0 = server->missing.load(), n0 = server->minor.load();
    const uint64_t t0 = NowNs();
    switch (c.op) {
      case kRead: r.value = Load64(base + c.arg); break;
      case kWrite: Store64(base + c.arg, c.arg2); break;
      case kTouchAll:
        for (size_t off = 0; off < len; off += kPage) r.value += Load(base + off);
        break;
      case kPfn: r.value = Pfn(base + c.arg); break;
      default: break;
    }
    r.ns = NowNs() - t0;
    r.missing = server->missing.load() - m0;
    r.minor = server->minor.load() - n0;
    return r;
  }
};

void ChildLoop(int sock, int memfd) {
  View v;
  for (;;) {
    Cmd c = {};
    RecvAll(sock, &c, sizeof c);
    Reply r = {};
    if (c.op == kExit) {
      v.Close();
      SendAll(sock, &r, sizeof r);
      std::_Exit(0);
    }
    if (c.op == kMap) {
      v.Close();
      v.Open(memfd, c.arg, c.arg2 >> 8, c.arg2 & 0xff, 0xB0B0B0B0ULL);
    } else {
      r = v.Do(c);
    }
    SendAll(sock, &r, sizeof r);
  }
}

struct Peer {
  int sock = -1;
  pid_t pid = -1;
  Reply Call(Op op, uint64_t a = 0, uint64_t b = 0) {
    Cmd c = {op, a, b};
    SendAll(sock, &c, sizeof c);
    Reply r = {};
    RecvAll(sock, &r, sizeof r);
    return r;
  }
  void Exit() {
    Call(kExit);
    ::close(sock);
    int st = 0;
    ::waitpid(pid, &st, 0);
  }
};

Peer ForkPeer(int memfd) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) Fatal("socketpair");
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) Fatal("fork");
  if (pid == 0) {
    ::close(sv[0]);
    ChildLoop(sv[1], memfd);
  }
  ::close(sv[1]);
  return Peer{sv[0], pid};
}

std::string MyMemcg() {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctl = line.substr(a + 1, b - a - 1);
    if (ctl == "memory") return "/sys/fs/cgroup/memory" + line.substr(b + 1);
  }
  return "";
}

int64_t CgUsageKiB(const std::string& cg) {
  const std::string s = ReadLine(cg + "/memory.usage_in_bytes");
  return s.empty() ? -1 : static_cast<int64_t>(std::strtoull(s.c_str(), nullptr, 10) / 1024);
}

int64_t CgStatKiB(const std::string& cg, const std::string& key) {
  std::ifstream f(cg + "/memory.stat");
  std::string k;
  uint64_t v;
  while (f >> k >> v) {
    if (k == key) return static_cast<int64_t>(v / 1024);
  }
  return -1;
}

constexpr size_t kCrossLen = 64 * kPage;
constexpr uint64_t kBoth = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_MINOR;

// Cross-process faults: A fills blocks 0 and 1 through the memfd; B reads block 0 first, then
// both read; whether they share the physical page; stores seen both ways.
void CrossFault(View& a, Peer& b, int memfd, Json& j) {
  std::vector<char> blk(kPage, 0);
  Store64(blk.data(), 0xA1);
  const int64_t kib0 = StBlocksKiB(memfd);
  PwriteAll(memfd, blk.data(), kPage, 0);
  PwriteAll(memfd, blk.data(), kPage, kPage);
  const int64_t kib1 = StBlocksKiB(memfd);
  Reply r = b.Call(kRead, 0);
  j.Int("b_first_read_value", static_cast<int64_t>(r.value));
  j.Int("b_first_read_minor", static_cast<int64_t>(r.minor));
  j.Int("b_first_read_missing", static_cast<int64_t>(r.missing));
  j.Int("memfd_kib_before_fill", kib0).Int("memfd_kib_after_fill", kib1);
  j.Int("memfd_kib_after_b_read", StBlocksKiB(memfd));
  Reply ra = a.Do({kRead, 0, 0});
  j.Int("a_first_read_minor", static_cast<int64_t>(ra.minor));
  (void)a.Do({kRead, kPage, 0});
  (void)b.Call(kRead, kPage);
  const uint64_t pfn_a = a.Do({kPfn, 0, 0}).value, pfn_b = b.Call(kPfn, 0).value;
  j.Str("same_physical_page",
        pfn_a == 0 || pfn_b == 0 ? "pfn hidden" : (pfn_a == pfn_b ? "yes" : "no"));
  // Stores both ways, no fault expected.
  a.Do({kWrite, 0, 0xA2});
  r = b.Call(kRead, 0);
  j.Bool("b_sees_a_store", r.value == 0xA2).Int("b_faults_for_it", static_cast<int64_t>(r.minor + r.missing));
  b.Call(kWrite, 8, 0xB1);
  ra = a.Do({kRead, 8, 0});
  j.Bool("a_sees_b_store", ra.value == 0xB1);
}

// Punch both blocks (mapped in A and B); B touches block 1 first, A block 0 first; who sees
// whose handler's copy afterwards.
void CrossPunch(View& a, Peer& b, int memfd, Json& j) {
  const int64_t kib2 = StBlocksKiB(memfd);
  Punch(memfd, 0, 2 * kPage);
  j.Int("memfd_kib_before_punch", kib2).Int("memfd_kib_after_punch", StBlocksKiB(memfd));
  Reply r = b.Call(kRead, kPage);
  j.Int("b_after_punch_missing", static_cast<int64_t>(r.missing));
  j.Int("b_after_punch_minor", static_cast<int64_t>(r.minor));
  j.Str("b_after_punch_value", r.value == 0xB0B0B0B0ULL ? "its handler's copy"
                               : r.value == 0          ? "zeros (no fault)"
                                                       : std::to_string(r.value));
  Reply ra = a.Do({kRead, 0, 0});
  j.Int("a_after_punch_missing", static_cast<int64_t>(ra.missing));
  j.Int("a_after_punch_minor", static_cast<int64_t>(ra.minor));
  ra = a.Do({kRead, kPage, 0});
  j.Int("a_block1_after_b_refault_minor", static_cast<int64_t>(ra.minor));
  j.Int("a_block1_after_b_refault_missing", static_cast<int64_t>(ra.missing));
  j.Str("a_block1_value", ra.value == 0xB0B0B0B0ULL ? "B's handler's copy"
                          : ra.value == 0          ? "zeros"
                                                   : std::to_string(ra.value));
  r = b.Call(kRead, 0);
  j.Str("b_block0_value_after_a_refault", r.value == 0xA0A0A0A0ULL ? "A's handler's copy"
                                          : r.value == 0           ? "zeros"
                                                                   : std::to_string(r.value));
  j.Int("b_block0_minor", static_cast<int64_t>(r.minor));
}

// Setup and teardown of one "cross_process" line: A (this process, MISSING|MINOR) and B (a
// forked peer registered with `b_mode`) map one memfd.
void CrossProcess(uint64_t b_mode) {
  const int memfd = NewMemfd(kCrossLen);
  View a;
  a.Open(memfd, kCrossLen, kPage, kBoth, 0xA0A0A0A0ULL);
  Peer b = ForkPeer(memfd);
  b.Call(kMap, kCrossLen, (kPage << 8) | b_mode);
  Json j("cross_process");
  j.Str("b_registration", b_mode == kBoth ? "MISSING|MINOR" : "MINOR");
  j.Str("a_registration", "MISSING|MINOR").Str("fd_passing", "fork (inherited descriptor)");
  CrossFault(a, b, memfd, j);
  CrossPunch(a, b, memfd, j);
  j.Print();
  b.Exit();
  a.Close();
  ::close(memfd);
}

// Memory released by a punch: memfd blocks and this cgroup's usage, 64 MiB mapped in two
// processes.
void PunchReleases() {
  const std::string cg = MyMemcg();
  constexpr size_t kBig = 64 << 20;
  const int memfd = NewMemfd(kBig);
  std::vector<char> src(1 << 20, 'y');
  const int64_t u0 = CgUsageKiB(cg);
  for (size_t off = 0; off < kBig; off += src.size()) PwriteAll(memfd, src.data(), src.size(), off);
  View a;
  a.Open(memfd, kBig, 1 << 20, kBoth, 1);
  Peer b = ForkPeer(memfd);
  b.Call(kMap, kBig, (size_t{1 << 20} << 8) | kBoth);
  a.Do({kTouchAll, 0, 0});
  Reply r = b.Call(kTouchAll);
  const int64_t u1 = CgUsageKiB(cg), k1 = StBlocksKiB(memfd);
  Punch(memfd, 0, kBig);
  const int64_t u2 = CgUsageKiB(cg), k2 = StBlocksKiB(memfd);
  Json("punch_releases")
      .Str("memcg", cg)
      .Int("memfd_kib_filled", k1)
      .Int("memfd_kib_after_punch", k2)
      .Int("memcg_kib_before_fill", u0)
      .Int("memcg_kib_filled_and_mapped_twice", u1)
      .Int("memcg_kib_after_punch", u2)
      .Int("b_minor_faults_reading_64MiB_in_1MiB_blocks", static_cast<int64_t>(r.minor))
      .Str("note", "memcg usage includes every other task of that cgroup")
      .Print();
  b.Exit();
  a.Close();
  ::close(memfd);
}

// Punch cost per block while A and B both map every block.
void PunchCostMappedInTwo(size_t region, const std::vector<size_t>& blocks, int min_faults) {
  std::vector<char> src(1 << 20, 'z');
  for (size_t block : blocks) {
    const uint32_t n = static_cast<uint32_t>(region / block);
    const int rounds = std::max<int>(2, (min_faults + n - 1) / n);
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), std::mt19937(9));
    const int memfd = NewMemfd(region);
    View a;
    a.Open(memfd, region, block, kBoth, 1);
    Peer b = ForkPeer(memfd);
    b.Call(kMap, region, (block << 8) | kBoth);
    std::vector<uint64_t> ns;
    uint64_t b_missing = 0;
    for (int k = 0; k < rounds; ++k) {
      for (size_t off = 0; off < region; off += block) PwriteAll(memfd, src.data(), block, off);
      a.Do({kTouchAll, 0, 0});
      b.Call(kTouchAll);
      for (uint32_t i : order) {
        const uint64_t t0 = NowNs();
        Punch(memfd, size_t{i} * block, block);
        ns.push_back(NowNs() - t0);
      }
      if (k == 0) b_missing = b.Call(kRead, 0).missing;  // refills block 0 (B's copy)
      Punch(memfd, 0, block);
    }
    Json("punch_cost_mapped_in_two")
        .Int("block_bytes", static_cast<int64_t>(block))
        .Int("ops", static_cast<int64_t>(ns.size()))
        .Num("us_median", MedianUs(ns))
        .Num("us_p90", PercentileUs(ns, 0.9))
        .Int("b_next_access_missing_faults", static_cast<int64_t>(b_missing))
        .Print();
    b.Exit();
    a.Close();
    ::close(memfd);
  }
}

}  // namespace

void PartC(size_t region, const std::vector<size_t>& blocks, int min_faults) {
  for (uint64_t b_mode : {kBoth, static_cast<uint64_t>(UFFDIO_REGISTER_MODE_MINOR)}) {
    CrossProcess(b_mode);
  }
  PunchReleases();
  PunchCostMappedInTwo(region, blocks, min_faults);
}


// ---------------------------------------------------------------------------------------
// Part d: memory cgroup charging (v1).
namespace {

// Forks a process that joins `cg`, maps the memfd with its own userfaultfd (MINOR), fills
// it with pwrite when `fill`, reads it fully when `read` and then waits for a byte on the
// returned pipe before it exits. Returns {pid, write end}; the child writes one status byte
// (1: ready, 2: fill failed) to `ready`.
struct Member {
  pid_t pid;
  int go;
  bool reaped = false;
  int status = 0;
};
Member Spawn(const std::string& cg, int memfd, size_t len, bool fill, bool read, bool private_copy,
             int ready) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) Fatal("pipe");
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) Fatal("fork");
  if (pid == 0) {
    ::close(p[1]);
    if (!WriteFile(cg + "/cgroup.procs", std::to_string(::getpid()))) Fatal("join cgroup");
    uint8_t status = 1;
    std::vector<char> src(1 << 20, 'c');
    if (fill) {
      for (size_t off = 0; off < len; off += src.size()) {
        if (::pwrite(memfd, src.data(), src.size(), static_cast<off_t>(off)) !=
            static_cast<ssize_t>(src.size())) {
          status = 2;
          break;
        }
      }
    }
    View v;
    if (read && status == 1) {
      if (private_copy) {  // today's path: a private anonymous region filled by UFFDIO_COPY
        v.uffd = OpenUffdAny(0, nullptr);
        v.base = MapOrDie(len, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1);
        RegisterOrDie(v.uffd, v.base, len, UFFDIO_REGISTER_MODE_MISSING);
        v.len = len;
        v.fill.assign(1 << 20, 'c');
        v.server = new Server(v.uffd, v.base, len, 1 << 20, v.fill.data());
        v.server->Start(false);
      } else {
        v.Open(memfd, len, 1 << 20, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_MINOR, 0);
      }
      v.Do({kTouchAll, 0, 0});
    }
    if (::write(ready, &status, 1) != 1) std::_Exit(4);
    char c;
    (void)::read(p[0], &c, 1);
    std::_Exit(0);
  }
  ::close(p[0]);
  return Member{pid, p[1]};
}

// Waits for one status byte from member `m`; 0 when it died first (then reaped).
uint8_t AwaitReady(int ready_rd, Member* m) {
  for (;;) {
    struct pollfd pfd = {ready_rd, POLLIN, 0};
    if (::poll(&pfd, 1, 100) == 1) {
      uint8_t s = 0;
      if (::read(ready_rd, &s, 1) == 1) return s;
    }
    if (::waitpid(m->pid, &m->status, WNOHANG) == m->pid) {
      m->reaped = true;
      return 0;
    }
  }
}

void Release(Member* m) {
  // A byte, not EOF: the members forked later hold copies of this pipe's write end.
  const char c = 'x';
  (void)::write(m->go, &c, 1);
  ::close(m->go);
  if (!m->reaped) ::waitpid(m->pid, &m->status, 0);
  m->reaped = true;
}

std::string MakeCg(const std::string& parent, const std::string& name, size_t limit) {
  const std::string cg = parent + "/" + name;
  if (::mkdir(cg.c_str(), 0755) != 0 && errno != EEXIST) return "";
  if (!WriteFile(cg + "/memory.limit_in_bytes", std::to_string(limit))) return "";
  return cg;
}

void CgRow(Json& j, const std::string& prefix, const std::string& cg) {
  j.Int(prefix + "_usage_kib", CgUsageKiB(cg));
  j.Int(prefix + "_shmem_kib", CgStatKiB(cg, "shmem"));
  j.Int(prefix + "_rss_kib", CgStatKiB(cg, "rss"));
  j.Int(prefix + "_mapped_file_kib", CgStatKiB(cg, "mapped_file"));
}

}  // namespace

void PartD(int procs) {
  const std::string parent = MyMemcg();
  const std::string base_name = "umap-probe-" + std::to_string(::getpid());
  const std::string g1 = MakeCg(parent, base_name + "-g1", size_t{1} << 30);
  if (g1.empty()) {
    Json("memcg").Str("skipped", "cannot create a memory cgroup under " + parent + ": " +
                                 ErrName(errno)).Print();
    return;
  }
  const std::string g2 = MakeCg(parent, base_name + "-g2", size_t{1} << 30);
  const std::string g3 = MakeCg(parent, base_name + "-g3", size_t{32} << 20);
  constexpr size_t kCache = 64 << 20;
  int rp[2];
  if (::pipe2(rp, O_CLOEXEC) != 0) Fatal("pipe");

  // d1: `procs` processes in one cgroup, one memfd cache (the first fills it), all read it.
  for (bool private_copy : {false, true}) {
    const int memfd = NewMemfd(kCache);
    Json j("memcg_same_cgroup");
    j.Str("cache", private_copy ? "private anonymous copy each (UFFDIO_COPY)"
                                : "one memfd, MINOR + UFFDIO_CONTINUE")
        .Int("processes", procs)
        .Int("cache_kib", kCache / 1024);
    const int64_t u0 = CgUsageKiB(g1);
    std::vector<Member> ms;
    for (int i = 0; i < procs; ++i) {
      ms.push_back(Spawn(g1, memfd, kCache, !private_copy && i == 0, true, private_copy, rp[1]));
      if (AwaitReady(rp[0], &ms.back()) != 1) j.Str("member_failed", std::to_string(i));
    }
    j.Int("g1_usage_kib_before", u0);
    CgRow(j, "g1", g1);
    for (auto& m : ms) Release(&m);
    j.Int("g1_usage_kib_after_exit_memfd_open", CgUsageKiB(g1));
    ::close(memfd);
    j.Int("g1_usage_kib_after_memfd_closed", CgUsageKiB(g1));
    j.Print();
  }

  // d2: a filler in g1, a reader in g2; then the filler exits; then a punch and a refill
  // from g2.
  {
    const int memfd = NewMemfd(kCache);
    Json j("memcg_two_cgroups");
    Member f = Spawn(g1, memfd, kCache, true, true, false, rp[1]);
    AwaitReady(rp[0], &f);
    Member r = Spawn(g2, memfd, kCache, false, true, false, rp[1]);
    AwaitReady(rp[0], &r);
    CgRow(j, "g1_filler", g1);
    CgRow(j, "g2_reader", g2);
    Release(&f);
    j.Int("g1_usage_kib_after_filler_exit", CgUsageKiB(g1));
    j.Int("g2_usage_kib_after_filler_exit", CgUsageKiB(g2));
    Punch(memfd, 0, kCache / 2);
    j.Int("g1_usage_kib_after_punching_half", CgUsageKiB(g1));
    Release(&r);
    Member r2 = Spawn(g2, memfd, kCache / 2, true, false, false, rp[1]);
    AwaitReady(rp[0], &r2);
    j.Int("g1_usage_kib_after_g2_refills_half", CgUsageKiB(g1));
    j.Int("g2_usage_kib_after_g2_refills_half", CgUsageKiB(g2));
    Release(&r2);
    ::close(memfd);
    j.Print();
  }

  // d3: a filler whose cgroup limit (32 MiB) is below the cache (64 MiB), no swap.
  if (!g3.empty()) {
    const int memfd = NewMemfd(kCache);
    Json j("memcg_fill_over_limit");
    j.Int("limit_kib", (32 << 20) / 1024).Int("cache_kib", kCache / 1024);
    j.Str("swap_total", ReadLine("/proc/swaps").empty() ? "?" : "see /proc/swaps");
    Member f = Spawn(g3, memfd, kCache, true, false, false, rp[1]);
    const uint8_t s = AwaitReady(rp[0], &f);
    j.Str("filler", s == 1 ? "filled all" : s == 2 ? "pwrite failed" : "died");
    j.Int("memfd_kib", StBlocksKiB(memfd));
    j.Int("g3_usage_kib", CgUsageKiB(g3));
    j.Str("g3_oom_control", ReadLine(g3 + "/memory.oom_control"));
    Release(&f);
    const int st = f.status;
    j.Str("filler_exit", WIFSIGNALED(st) ? "signal " + std::to_string(WTERMSIG(st))
                                         : "status " + std::to_string(WEXITSTATUS(st)));
    j.Int("g3_failcnt", static_cast<int64_t>(
                            std::strtoull(ReadLine(g3 + "/memory.failcnt").c_str(), nullptr, 10)));
    ::close(memfd);
    j.Print();
  }
  ::close(rp[0]);
  ::close(rp[1]);
  for (const std::string& cg : {g1, g2, g3}) {
    if (!cg.empty()) ::rmdir(cg.c_str());
  }
}

}  // namespace sharedcache_probe
