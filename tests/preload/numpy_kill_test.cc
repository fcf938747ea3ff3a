// NumPy unchanged, killed mid-flush: numpy_worker.py (np.memmap / np.load(mmap_mode="r+"))
// rewrites a matrix generation after generation and flushes each one (msync, which the
// shim turns into umsync). The test SIGKILLs it at a random moment, most often while a
// flush is running, runs umap-recover on its journal, and checks that the file holds one
// whole generation: the last one whose flush completed, or the one being flushed (an
// interrupted umsync is present or absent, never partial). The next round continues on the
// recovered file. The cache is smaller than the matrix, so dirty blocks are evicted and
// spilled to the journal between flushes (the atomic policy discards them at recovery).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/child_process.h"
#include "tests/testing/temp_dir.h"

namespace {

using preloadtest::ChildProcess;
using preloadtest::Exit;

constexpr int kRows = 256, kCols = 2048;  // 4 MiB of float64
constexpr size_t kMatrixBytes = size_t{kRows} * kCols * sizeof(double);

// The generation every element of the matrix at `offset` holds; -1 (and *why) when they
// disagree or an element is not of the form g * 1e6 + index.
int64_t UniformGeneration(const std::string& file, size_t offset, std::string* why) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0) {
    *why = "cannot open " + file;
    return -1;
  }
  std::vector<double> row(kCols);
  int64_t gen = -1;
  for (int r = 0; r < kRows; ++r) {
    const size_t bytes = kCols * sizeof(double);
    if (::pread(fd, row.data(), bytes, static_cast<off_t>(offset + r * bytes)) !=
        static_cast<ssize_t>(bytes)) {
      *why = "short read of row " + std::to_string(r);
      ::close(fd);
      return -1;
    }
    for (int c = 0; c < kCols; ++c) {
      const double g = (row[c] - (static_cast<double>(r) * kCols + c)) / 1e6;
      if (g != std::floor(g) || (gen >= 0 && static_cast<int64_t>(g) != gen)) {
        *why = "element (" + std::to_string(r) + "," + std::to_string(c) + ") holds " +
               std::to_string(row[c]) + ", generation " + std::to_string(g) + " where " +
               (gen >= 0 ? "earlier ones hold " + std::to_string(gen) : "none was expected");
        ::close(fd);
        return -1;
      }
      gen = static_cast<int64_t>(g);
    }
  }
  ::close(fd);
  return gen;
}

class NumpyKillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = dir_.File("data");
    journal_ = dir_.File("journal");
    std::filesystem::create_directories(data_);
    ChildProcess probe({PYTHON3, "-c", "import numpy"}, {}, dir_.File("probe.err"));
    probe.CloseStdin();
    Exit x = probe.Wait();
    if (x.code != 0) {
      GTEST_SKIP() << PYTHON3 << " cannot import numpy (Debian package python3-numpy, "
                   << "installed by scripts/install-deps.sh): " << x.err;
    }
  }

  struct Round {
    int64_t flushed = -1;   // last "flushed g" seen
    int64_t flushing = -1;  // last "flushing g" seen
  };

  // Runs the worker until it is killed; kills it `delay` after the first "flushing" line
  // that follows a completed flush (mid_flush) or after a "flushed" line (between flushes).
  Round RunAndKill(const std::vector<std::string>& args, const std::vector<std::string>& env,
                   bool mid_flush, std::mt19937* rng) {
    std::vector<std::string> argv = {PYTHON3, NUMPY_WORKER};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess w(argv, env, dir_.File("worker.err"));
    Round r;
    int64_t flush_ms = -1;
    for (;;) {
      const std::string line = w.ReadLine();
      if (line.empty()) break;  // died on its own (the checks below fail) or timed out
      int64_t g = 0, ms = 0;
      if (std::sscanf(line.c_str(), "flushed %ld %ld", &g, &ms) == 2) {
        r.flushed = g;
        flush_ms = ms;
        if (!mid_flush) {
          std::this_thread::sleep_for(std::chrono::milliseconds((*rng)() % 20));
          break;
        }
      } else if (std::sscanf(line.c_str(), "flushing %ld", &g) == 1) {
        r.flushing = g;
        if (mid_flush && flush_ms >= 0) {
          // Somewhere inside this flush: the previous one took flush_ms.
          std::this_thread::sleep_for(
              std::chrono::milliseconds((*rng)() % std::max<int64_t>(1, flush_ms * 4 / 5)));
          break;
        }
      }
    }
    ::kill(w.pid(), SIGKILL);
    Exit x = w.Wait();
    EXPECT_EQ(x.signal, SIGKILL) << "worker ended with exit " << x.code << ": " << x.err;
    // A killed process leaves its stats segment (the next runtime of this user removes
    // it); the test removes it itself so that it leaves nothing behind.
    const std::string prefix = "umap-stat." + std::to_string(w.pid()) + ".";
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(e.path());
    }
    return r;
  }

  void Recover() {
    ChildProcess rec({UMAP_RECOVER, "--journal", journal_, "--progress", "never"}, {},
                     dir_.File("recover.err"));
    rec.CloseStdin();
    std::string out, line;
    while (!(line = rec.ReadLine()).empty()) out += line + "\n";
    Exit x = rec.Wait();
    // 1: staged (never flushed) blocks were discarded, as the atomic policy promises.
    ASSERT_TRUE(x.code == 0 || x.code == 1) << "umap-recover exit " << x.code << "\n"
                                            << out << x.err;
  }

  // Kill/recover rounds on one matrix; returns the rounds killed inside a flush.
  int Rounds(const std::string& mode, const std::string& file, size_t data_offset,
             const std::vector<std::string>& env, int rounds, std::mt19937* rng) {
    int64_t next = 1;
    int in_flush = 0;
    for (int i = 0; i < rounds; ++i) {
      const bool mid_flush = i % 4 != 3;
      std::vector<std::string> args = {mode, file, std::to_string(kRows), std::to_string(kCols)};
      if (mode == "memmap") args.push_back(std::to_string(data_offset));
      args.push_back(std::to_string(next));
      const Round r = RunAndKill(args, env, mid_flush, rng);
      Recover();
      if (HasFatalFailure()) return in_flush;
      std::string why;
      const int64_t g = UniformGeneration(file, data_offset, &why);
      SCOPED_TRACE("round " + std::to_string(i) + " (" + mode + "): flushed " +
                   std::to_string(r.flushed) + ", flushing " + std::to_string(r.flushing));
      if (g < 0) {
        ADD_FAILURE() << why;
        return in_flush;
      }
      if (r.flushing > r.flushed) {
        ++in_flush;
        // The interrupted umsync is indeterminate: present or absent, never partial.
        EXPECT_TRUE(g == r.flushed || g == r.flushing) << "file holds generation " << g;
      } else {
        EXPECT_EQ(g, r.flushed) << "the last completed flush is not what the file holds";
      }
      if (r.flushed < 0 && r.flushing < 0) ADD_FAILURE() << "the worker printed nothing";
      next = std::max<int64_t>(g, 0) + 1;
    }
    return in_flush;
  }

  std::vector<std::string> Env(const std::string& block_size) const {
    return {std::string("LD_PRELOAD=") + UMAP_PRELOAD_LIB, "UMAP_PATHS=" + data_,
            "UMAP_JOURNAL_DIR=" + journal_, "UMAP_CACHE_BYTES=2M", "UMAP_BLOCK_SIZE=" + block_size};
  }

  umaptest::TempDir dir_;
  std::string data_, journal_;
};

TEST_F(NumpyKillTest, MemmapAtAnOffsetOffTheBlockSizeRecoversTheLastFlush) {
  // The matrix starts 12304 bytes into the file: numpy maps from 12288 (its allocation
  // granularity), which is not a multiple of the 64 KiB blocks; the shim maps from 0 and
  // returns the interior pointer. The file starts short: numpy extends it by writing its
  // last byte.
  const std::string file = data_ + "/m.bin";
  const size_t offset = 12304;
  { std::ofstream(file, std::ios::binary) << std::string(offset, 'H'); }
  std::mt19937 rng(20261201);
  const int in_flush = Rounds("memmap", file, offset, Env("65536"), 6, &rng);
  EXPECT_GE(in_flush, 1) << "no round was killed inside a flush";
  EXPECT_EQ(std::filesystem::file_size(file), offset + kMatrixBytes);
  std::ifstream f(file, std::ios::binary);
  std::string head(offset, '\0');
  f.read(head.data(), static_cast<std::streamsize>(offset));
  EXPECT_EQ(head, std::string(offset, 'H')) << "the bytes before the matrix changed";
}

TEST_F(NumpyKillTest, NpyLoadedWithMmapModeRecoversTheLastFlush) {
  const std::string file = data_ + "/m.npy";
  ChildProcess save({PYTHON3, "-c",
                     "import numpy as np, sys; np.save(sys.argv[1], np.zeros((" +
                         std::to_string(kRows) + "," + std::to_string(kCols) + ")))",
                     file},
                    {}, dir_.File("save.err"));
  save.CloseStdin();
  ASSERT_EQ(save.Wait().code, 0);
  // .npy: magic (6), version (2), header length (2, little-endian), header, data.
  std::ifstream f(file, std::ios::binary);
  unsigned char pre[10];
  f.read(reinterpret_cast<char*>(pre), sizeof(pre));
  ASSERT_EQ(std::memcmp(pre, "\x93NUMPY\x01\x00", 8), 0);
  const size_t offset = 10 + (pre[8] | pre[9] << 8);
  std::mt19937 rng(20261202);
  const int in_flush = Rounds("npy", file, offset, Env("4096"), 6, &rng);
  EXPECT_GE(in_flush, 1) << "no round was killed inside a flush";
}

}  // namespace
