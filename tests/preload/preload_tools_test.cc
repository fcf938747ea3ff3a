// Everyday programs under libumap_preload.so with Umap engaged only for the configured
// paths: python3 with NumPy (two matrices, one under UMAP_PATHS, one elsewhere), cp and
// sort (which read and write files but never map them), and a small C program using plain
// mmap. umap-stat shows which processes have Umap mappings, and of which files; every
// output is checked byte for byte.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/child_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/tools/json_check.h"

namespace {

using preloadtest::ChildProcess;
using preloadtest::Exit;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class PreloadToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = dir_.File("data");
    other_ = dir_.File("other");
    std::filesystem::create_directories(data_);
    std::filesystem::create_directories(other_);
  }

  std::vector<std::string> Env() const {
    return {std::string("LD_PRELOAD=") + UMAP_PRELOAD_LIB, "UMAP_PATHS=" + data_,
            "UMAP_JOURNAL_DIR=" + dir_.File("journal"), "UMAP_CACHE_BYTES=8M"};
  }

  // umap-stat's JSON for pid, polled (at most 3 s) until it contains `want`; "" when
  // umap-stat finds nothing to show. *code gets its exit code.
  std::string StatJson(pid_t pid, const std::string& want, int* code, std::string* err) {
    std::string out;
    for (int i = 0; i < 30; ++i) {
      ChildProcess s({UMAP_STAT, "--json", std::to_string(pid)}, {}, dir_.File("stat.err"));
      s.CloseStdin();
      out.clear();
      for (std::string l; !(l = s.ReadLine()).empty();) out += l + "\n";
      Exit x = s.Wait();
      *code = x.code;
      *err = x.err;
      if (x.code != 0 || out.find(want) != std::string::npos) break;
      usleep(100 * 1000);
    }
    return out;
  }

  // Waits (at most 10 s) until process pid runs with the shim loaded and sleeps (blocked
  // on the FIFO), so that whatever it does before reading its input has been done.
  void WaitUntilBlockedWithTheShim(pid_t pid) {
    const std::string lib = std::filesystem::path(UMAP_PRELOAD_LIB).filename();
    for (int i = 0; i < 1000; ++i) {
      const std::string stat = Slurp("/proc/" + std::to_string(pid) + "/stat");
      const size_t close = stat.rfind(')');
      const bool sleeping = close != std::string::npos && stat.compare(close, 4, ") S ") == 0;
      if (sleeping && preloadtest::MapsLinesNaming(pid, lib) > 0) return;
      usleep(10 * 1000);
    }
    ADD_FAILURE() << "process " << pid << " never blocked with " << lib << " loaded";
  }

  // Checks that process pid has no Umap runtime at all, by umap-stat.
  void ExpectNoUmap(pid_t pid, const std::string& who) {
    int code = 0;
    std::string err;
    const std::string out = StatJson(pid, "", &code, &err);
    EXPECT_EQ(code, 1) << who << ": " << out;
    EXPECT_NE(err.find("has no Umap stats segment"), std::string::npos) << who << ": " << err;
  }

  umaptest::TempDir dir_;
  std::string data_, other_;
};

TEST_F(PreloadToolsTest, NumpyMapsOnlyTheMatrixUnderUmapPathsWithUmap) {
  const std::string inside = data_ + "/a.bin", outside = other_ + "/b.bin";
  ChildProcess py({PYTHON3, NUMPY_TWO_FILES, inside, outside, "512", "256", "7"}, Env(),
                  dir_.File("py.err"));
  const std::string ready = py.ReadLine();
  if (ready.empty()) {
    Exit x = py.Wait();
    if (x.err.find("No module named 'numpy'") != std::string::npos) {
      GTEST_SKIP() << PYTHON3 << " has no numpy (Debian python3-numpy, installed by "
                   << "scripts/install-deps.sh)";
    }
    FAIL() << "python3 ended: " << x.code << " " << x.err;
  }
  int code = 0;
  std::string err;
  const std::string j = StatJson(py.pid(), inside, &code, &err);
  EXPECT_EQ(code, 0) << err;
  EXPECT_TRUE(jsoncheck::IsValidJson(j)) << j;
  EXPECT_NE(j.find("\"mappings_total\":1,\"mappings\":[{\"file\":\"" + inside +
                   "\",\"writable\":true,\"length\":1048576"),
            std::string::npos)
      << j;
  EXPECT_EQ(j.find(outside), std::string::npos) << "the other matrix is the kernel's: " << j;
  EXPECT_GE(preloadtest::MapsLinesNaming(py.pid(), outside), 1);
  EXPECT_EQ(preloadtest::MapsLinesNaming(py.pid(), inside), 0);
  ASSERT_TRUE(py.WriteLine("go"));
  EXPECT_EQ(py.ReadLine(), "done");
  Exit x = py.Wait();
  EXPECT_EQ(x.code, 0) << x.err;
  for (const std::string& f : {inside, outside}) {
    const std::string bytes = Slurp(f);
    ASSERT_EQ(bytes.size(), 512u * 256 * sizeof(double)) << f;
    for (size_t i = 0; i < 512 * 256; ++i) {
      double v;
      std::memcpy(&v, bytes.data() + i * sizeof(double), sizeof(v));
      ASSERT_EQ(v, 7e6 + static_cast<double>(i)) << f << " element " << i;
    }
  }
}

TEST_F(PreloadToolsTest, ACProgramUsingPlainMmapIsServedByUmapOnlyUnderUmapPaths) {
  const std::string inside = data_ + "/c.bin", outside = other_ + "/c.bin";
  for (const std::string& f : {inside, outside}) {
    ChildProcess w({PLAIN_MMAP, "write", f, "2097152", "9"}, Env(), dir_.File("w.err"));
    w.CloseStdin();
    Exit x = w.Wait();
    ASSERT_EQ(x.code, 0) << x.err;
  }
  ChildProcess in({PLAIN_MMAP, "hold", inside, "2097152"}, Env(), dir_.File("in.err"));
  ChildProcess out({PLAIN_MMAP, "hold", outside, "2097152"}, Env(), dir_.File("out.err"));
  ASSERT_EQ(in.ReadLine().rfind("ready", 0), 0u);
  ASSERT_EQ(out.ReadLine().rfind("ready", 0), 0u);
  int code = 0;
  std::string err;
  const std::string j = StatJson(in.pid(), inside, &code, &err);
  EXPECT_EQ(code, 0) << err;
  EXPECT_NE(j.find("\"file\":\"" + inside + "\",\"writable\":false"), std::string::npos) << j;
  ExpectNoUmap(out.pid(), "plain_mmap on a file outside UMAP_PATHS");
  in.CloseStdin();
  out.CloseStdin();
  EXPECT_EQ(in.Wait().code, 0);
  EXPECT_EQ(out.Wait().code, 0);
  // Both files hold the pattern, read by the kernel's mmap without the shim.
  for (const std::string& f : {inside, outside}) {
    ChildProcess v({PLAIN_MMAP, "verify", f, "2097152", "9"}, {}, dir_.File("v.err"));
    v.CloseStdin();
    Exit x = v.Wait();
    EXPECT_EQ(x.code, 0) << f << ": " << x.err;
  }
}

TEST_F(PreloadToolsTest, CpAndSortReadAndWriteUmapPathsWithoutEverStartingUmap) {
  // A FIFO keeps each tool waiting for input while umap-stat looks at it.
  const std::string fifo = dir_.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string payload;
  for (int i = 0; i < 200000; ++i) payload += std::to_string((i * 7919) % 200000) + "\n";

  ChildProcess cp({"cp", fifo, data_ + "/copy.txt"}, Env(), dir_.File("cp.err"));
  WaitUntilBlockedWithTheShim(cp.pid());
  ExpectNoUmap(cp.pid(), "cp");
  {
    std::ofstream w(fifo, std::ios::binary);
    w << payload;
  }
  Exit c = cp.Wait();
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(Slurp(data_ + "/copy.txt"), payload);

  ChildProcess sort({"sort", "-n", fifo, "-o", data_ + "/sorted.txt"}, Env(), dir_.File("s.err"));
  WaitUntilBlockedWithTheShim(sort.pid());
  ExpectNoUmap(sort.pid(), "sort");
  {
    std::ofstream w(fifo, std::ios::binary);
    w << payload;
  }
  Exit s = sort.Wait();
  ASSERT_EQ(s.code, 0) << s.err;
  std::string want;
  for (int i = 0; i < 200000; ++i) want += std::to_string(i) + "\n";
  EXPECT_EQ(Slurp(data_ + "/sorted.txt"), want);

  // And out of the Umap path again, file to file.
  ChildProcess cp2({"cp", data_ + "/sorted.txt", other_ + "/sorted.txt"}, Env(),
                   dir_.File("cp2.err"));
  cp2.CloseStdin();
  EXPECT_EQ(cp2.Wait().code, 0);
  EXPECT_EQ(Slurp(other_ + "/sorted.txt"), want);
}

}  // namespace
