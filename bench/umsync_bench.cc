// umsync-bench: umsync throughput, latency and write amplification by journal mode, dirty
// set size, number of syncing threads and where the journal lives, all in one run (ratios
// against journal_mode=off, which is unsafe and only a reference). Each thread owns a
// mapping of its own file, so concurrent umsyncs can share journal fsyncs (group commit).
//
//   umsync-bench --dir /var/tmp/ub --sizes 4K,64K,1M --threads 1,4,8 --seconds 2
//   umsync-bench --dir /mnt/gv0/ub --journal-dirs local=/var/tmp/ubj,gluster=/mnt/gv0/ubj
//                --modes off,atomic      (data on GlusterFS; the journal local, then on it)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "umap/umap.h"

namespace {

struct Mode {
  const char* name;
  umap_policy policy;
  umap_journal_mode journal;
  bool defer_file_sync = false;
};
struct NamedMode {
  const char* key;  // --modes
  Mode mode;
};
constexpr NamedMode kModes[] = {
    {"off", {"off (unsafe)", UMAP_POLICY_RELAXED, UMAP_JOURNAL_OFF}},
    {"intent", {"intent", UMAP_POLICY_RELAXED, UMAP_JOURNAL_INTENT}},
    {"relaxed", {"data relaxed", UMAP_POLICY_RELAXED, UMAP_JOURNAL_DATA}},
    {"atomic", {"data atomic", UMAP_POLICY_ATOMIC, UMAP_JOURNAL_DATA}},
    {"relaxed+defer", {"relaxed+defer", UMAP_POLICY_RELAXED, UMAP_JOURNAL_DATA, true}},
    {"atomic+defer", {"atomic+defer", UMAP_POLICY_ATOMIC, UMAP_JOURNAL_DATA, true}},
};

// Bytes this process passed to write-type system calls (/proc/self/io wchar).
uint64_t WrittenBytes() {
  std::ifstream in("/proc/self/io");
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v) {
    if (k == "wchar:") return v;
  }
  return 0;
}

size_t ParseSize(std::string s) {
  size_t mult = 1;
  char c = s.empty() ? 0 : static_cast<char>(std::tolower(s.back()));
  if (c == 'k') mult = 1024;
  if (c == 'm') mult = 1024 * 1024;
  if (mult != 1) s.pop_back();
  return std::stoull(s) * mult;
}

struct Result {
  double syncs_per_s = 0, mb_per_s = 0, p50_us = 0, p99_us = 0, write_amp = 0;
};

Result RunCell(const std::string& dir, const std::string& jdir, const Mode& mode, size_t dirty,
               int threads, double seconds) {
  const size_t kBlock = 4096;
  const size_t file_size = std::max<size_t>(dirty * 4, 4 << 20);
  umap_config c;
  umap_config_init(&c);
  c.cache_bytes = std::max<size_t>(64 << 20, file_size * threads * 2);  // no eviction
  c.policy = mode.policy;
  c.journal_mode = mode.journal;
  c.defer_file_sync = mode.defer_file_sync ? 1 : 0;
  c.journal_dir = jdir.c_str();
  umap_runtime* rt = umap_runtime_create(&c);
  if (rt == nullptr) {
    std::perror("umap_runtime_create");
    std::exit(1);
  }
  std::vector<int> fds(threads);
  std::vector<char*> maps(threads);
  std::vector<char> zero(file_size, 0);
  for (int t = 0; t < threads; ++t) {
    std::string f = dir + "/file" + std::to_string(t);
    fds[t] = ::open(f.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fds[t] < 0 ||
        ::write(fds[t], zero.data(), zero.size()) != static_cast<ssize_t>(zero.size())) {
      std::perror(f.c_str());
      std::exit(1);
    }
    ::fsync(fds[t]);
    maps[t] = static_cast<char*>(
        umap_ex(rt, nullptr, file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[t], 0));
    if (maps[t] == MAP_FAILED) {
      std::perror("umap");
      std::exit(1);
    }
    std::memset(maps[t], 1, file_size);  // fault everything in before timing
    umsync(maps[t], file_size, MS_SYNC);
  }
  std::vector<std::vector<double>> lat(threads);
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  const uint64_t w0 = WrittenBytes();
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> th;
  for (int t = 0; t < threads; ++t) {
    th.emplace_back([&, t] {
      char* p = maps[t];
      size_t off = 0;
      for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        for (size_t b = 0; b < dirty; b += kBlock) p[(off + b) % file_size] = static_cast<char>(i);
        auto a = std::chrono::steady_clock::now();
        if (umsync(p, file_size, MS_SYNC) != 0) ++errors;
        lat[t].push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a)
                .count());
        off = (off + dirty) % file_size;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& x : th) x.join();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t written = WrittenBytes() - w0;
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  Result r;
  r.syncs_per_s = all.size() / elapsed;
  r.mb_per_s = r.syncs_per_s * dirty / 1e6;
  r.p50_us = all.empty() ? 0 : all[all.size() / 2];
  r.p99_us = all.empty() ? 0 : all[std::min(all.size() - 1, all.size() * 99 / 100)];
  r.write_amp =
      all.empty() ? 0 : static_cast<double>(written) / (static_cast<double>(all.size()) * dirty);
  for (int t = 0; t < threads; ++t) {
    uunmap(maps[t], file_size);
    ::close(fds[t]);
    std::remove((dir + "/file" + std::to_string(t)).c_str());
  }
  umap_runtime_destroy(rt);
  std::string rm = "rm -rf '" + jdir + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", jdir.c_str());
  if (errors.load() != 0) {
    std::fprintf(stderr, "%d umsync calls failed in mode %s\n", errors.load(), mode.name);
    std::exit(1);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"umsync throughput/latency by journal mode, dirty-set size, threads and journal place"};
  std::string dir = "/var/tmp/umsync-bench";
  std::string sizes = "4K,64K,1M", threads_s = "1,4,8", modes_s = "off,intent,relaxed,atomic";
  std::string journals_s;
  double seconds = 2;
  app.add_option("--dir", dir, "directory for the data files (and, by default, the journal)");
  app.add_option("--journal-dirs", journals_s,
                 "NAME=DIR,...: journal directories to compare (default: local=DIR/journal)");
  app.add_option("--modes", modes_s,
                 "off,intent,relaxed,atomic,relaxed+defer,atomic+defer (comma separated; "
                 "+defer: defer_file_sync)");
  app.add_option("--sizes", sizes, "dirty bytes per umsync, comma separated");
  app.add_option("--threads", threads_s, "syncing threads, comma separated");
  app.add_option("--seconds", seconds, "duration of each cell");
  CLI11_PARSE(app, argc, argv);
  auto split = [](const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t a = 0;
    while (a <= s.size()) {
      size_t b = s.find(sep, a);
      if (b == std::string::npos) b = s.size();
      if (b > a) out.push_back(s.substr(a, b - a));
      a = b + 1;
    }
    return out;
  };
  std::vector<std::pair<std::string, std::string>> journals;
  for (const std::string& j : split(journals_s, ',')) {
    const size_t eq = j.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "--journal-dirs takes NAME=DIR, got '%s'\n", j.c_str());
      return 2;
    }
    journals.emplace_back(j.substr(0, eq), j.substr(eq + 1));
  }
  if (journals.empty()) journals.emplace_back("local", dir + "/journal");
  std::vector<const Mode*> modes;
  for (const std::string& m : split(modes_s, ',')) {
    const NamedMode* found = nullptr;
    for (const NamedMode& n : kModes) {
      if (m == n.key) found = &n;
    }
    if (found == nullptr) {
      std::fprintf(stderr, "--modes: unknown mode '%s'\n", m.c_str());
      return 2;
    }
    modes.push_back(&found->mode);
  }
  std::string mk = "mkdir -p '" + dir + "'";
  if (std::system(mk.c_str()) != 0) return 1;
  std::printf("%-13s %-8s %6s %7s %10s %9s %9s %9s %8s %9s\n", "mode", "journal", "dirty",
              "threads", "umsync/s", "MB/s", "p50 us", "p99 us", "w-amp", "vs off");
  for (const std::string& sz : split(sizes, ',')) {
    size_t dirty = ParseSize(sz);
    for (const std::string& ts : split(threads_s, ',')) {
      int threads = std::stoi(ts);
      double off_rate = 0;
      for (const Mode* m : modes) {
        for (const auto& [jname, jdir] : journals) {
          Result r = RunCell(dir, jdir, *m, dirty, threads, seconds);
          if (m->journal == UMAP_JOURNAL_OFF) off_rate = r.syncs_per_s;
          std::printf("%-13s %-8s %6s %7d %10.0f %9.1f %9.0f %9.0f %8.2f %8.2fx\n", m->name,
                      m->journal == UMAP_JOURNAL_OFF ? "-" : jname.c_str(), sz.c_str(), threads,
                      r.syncs_per_s, r.mb_per_s, r.p50_us, r.p99_us, r.write_amp,
                      off_rate > 0 ? r.syncs_per_s / off_rate : 0.0);
          std::fflush(stdout);
          if (m->journal == UMAP_JOURNAL_OFF) break;  // no journal: one place is enough
        }
      }
    }
  }
  return 0;
}
