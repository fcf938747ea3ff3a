// libumap_preload.so end to end: real processes (plain_mmap, a small C program that knows
// nothing about Umap; /bin/true; sort) run with the shim preloaded, and the test checks
// the bytes with an independent run without it. Whether Umap or the kernel served a mapping
// is read from /proc/PID: a Umap mapping is an anonymous region of a process holding a
// userfaultfd, a kernel mapping names its file in /proc/PID/maps.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/child_process.h"
#include "tests/testing/temp_dir.h"

namespace {

using preloadtest::ChildProcess;
using preloadtest::Exit;

class PreloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    umap_dir_ = dir_.File("umap");
    plain_dir_ = dir_.File("plain");
    std::filesystem::create_directories(umap_dir_);
    std::filesystem::create_directories(plain_dir_);
  }

  std::vector<std::string> Preload(std::vector<std::string> extra = {}) const {
    std::vector<std::string> env = {std::string("LD_PRELOAD=") + UMAP_PRELOAD_LIB,
                                    "UMAP_PATHS=" + umap_dir_, "UMAP_CACHE_BYTES=4M"};
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
  }

  Exit Run(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    ChildProcess p(argv, env, dir_.File("stderr"));
    p.CloseStdin();
    return p.Wait();
  }
  Exit Plain(const std::vector<std::string>& args, const std::vector<std::string>& env) {
    std::vector<std::string> argv = {PLAIN_MMAP};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(argv, env);
  }
  // Checks FILE against the pattern with the kernel's mmap (no shim).
  void ExpectPattern(const std::string& file, size_t size, int seed, size_t off = 0) {
    Exit x = Plain(
        {"verify", file, std::to_string(size), std::to_string(seed), std::to_string(off)}, {});
    EXPECT_EQ(x.code, 0) << x.err;
  }

  umaptest::TempDir dir_;
  std::string umap_dir_, plain_dir_;
};

TEST_F(PreloadTest, ProgramsThatNeverMapRunUntouched) {
  Exit t = Run({"/bin/true"}, Preload());
  EXPECT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(t.err, "");
  const std::string in = umap_dir_ + "/lines.txt";
  { std::ofstream(in) << "3\n1\n2\n"; }
  ChildProcess sort({"sort", "-n", in}, Preload(), dir_.File("sort.err"));
  sort.CloseStdin();
  EXPECT_EQ(sort.ReadLine(), "1");
  EXPECT_EQ(sort.ReadLine(), "2");
  EXPECT_EQ(sort.ReadLine(), "3");
  Exit s = sort.Wait();
  EXPECT_EQ(s.code, 0) << s.err;
}

TEST_F(PreloadTest, OnlyFilesUnderUmapPathsAreMappedByUmap) {
  const std::string inside = umap_dir_ + "/in.bin", outside = plain_dir_ + "/out.bin";
  for (const std::string& f : {inside, outside}) {
    ASSERT_EQ(Plain({"write", f, "1048576", "1"}, {}).code, 0);
  }
  ChildProcess a({PLAIN_MMAP, "hold", inside, "1048576"}, Preload(), dir_.File("a.err"));
  ChildProcess b({PLAIN_MMAP, "hold", outside, "1048576"}, Preload(), dir_.File("b.err"));
  ASSERT_EQ(a.ReadLine().rfind("ready", 0), 0u);
  ASSERT_EQ(b.ReadLine().rfind("ready", 0), 0u);
  EXPECT_EQ(preloadtest::MapsLinesNaming(a.pid(), inside), 0);  // an anonymous Umap region
  EXPECT_TRUE(preloadtest::HoldsUserfaultfd(a.pid()));
  EXPECT_GE(preloadtest::MapsLinesNaming(b.pid(), outside), 1);  // the kernel's mapping
  EXPECT_FALSE(preloadtest::HoldsUserfaultfd(b.pid()));
  a.CloseStdin();
  b.CloseStdin();
  EXPECT_EQ(a.Wait().code, 0);
  EXPECT_EQ(b.Wait().code, 0);
}

TEST_F(PreloadTest, FileSystemTypeSelectsFilesOnThatFileSystem) {
  // /dev/shm is tmpfs, the test directory is not (it is on the root file system).
  const std::string shm = "/dev/shm/umap-preload-test-" + std::to_string(::getpid());
  ASSERT_EQ(Plain({"write", shm, "65536", "2"}, {}).code, 0);
  const std::string other = plain_dir_ + "/other.bin";
  ASSERT_EQ(Plain({"write", other, "65536", "2"}, {}).code, 0);
  const std::vector<std::string> env = {std::string("LD_PRELOAD=") + UMAP_PRELOAD_LIB,
                                        "UMAP_FSTYPES=nfs4,tmpfs"};
  ChildProcess a({PLAIN_MMAP, "hold", shm, "65536"}, env, dir_.File("a.err"));
  ChildProcess b({PLAIN_MMAP, "hold", other, "65536"}, env, dir_.File("b.err"));
  ASSERT_EQ(a.ReadLine().rfind("ready", 0), 0u);
  ASSERT_EQ(b.ReadLine().rfind("ready", 0), 0u);
  EXPECT_EQ(preloadtest::MapsLinesNaming(a.pid(), shm), 0);
  EXPECT_TRUE(preloadtest::HoldsUserfaultfd(a.pid()));
  EXPECT_GE(preloadtest::MapsLinesNaming(b.pid(), other), 1);
  a.CloseStdin();
  b.CloseStdin();
  EXPECT_EQ(a.Wait().code, 0);
  EXPECT_EQ(b.Wait().code, 0);
  ::unlink(shm.c_str());
}

TEST_F(PreloadTest, WrittenBytesReachTheFileAndTheJournalIsRemovedAtExit) {
  const std::string f = umap_dir_ + "/w.bin";
  for (const char* bs : {"4096", "65536"}) {
    Exit w = Plain({"write", f, "3145728", "5"}, Preload({std::string("UMAP_BLOCK_SIZE=") + bs}));
    ASSERT_EQ(w.code, 0) << w.err;
    ExpectPattern(f, 3145728, 5);
  }
  // The runtime's automatic journal directory is gone after a clean exit.
  const std::string root = "/var/tmp/umap-journal-" + std::to_string(::getuid());
  ChildProcess p({PLAIN_MMAP, "hold", f, "3145728"}, Preload(), dir_.File("p.err"));
  ASSERT_EQ(p.ReadLine().rfind("ready", 0), 0u);
  const std::string mine = root + "/" + std::to_string(p.pid()) + "-0";
  p.CloseStdin();
  EXPECT_EQ(p.Wait().code, 0);
  EXPECT_FALSE(std::filesystem::exists(mine)) << mine;
}

TEST_F(PreloadTest, OffsetOffTheBlockSizeMapsFromTheRoundedDownOffset) {
  const std::string f = umap_dir_ + "/o.bin";
  ASSERT_EQ(Plain({"write", f, "1048576", "6"}, {}).code, 0);
  // 12 KiB is a page multiple but not a multiple of 64 KiB blocks.
  Exit v = Plain({"verify", f, "1048576", "6", "12288"}, Preload({"UMAP_BLOCK_SIZE=65536"}));
  EXPECT_EQ(v.code, 0) << v.err;
  // An offset that is not a page multiple is EINVAL, as with the kernel.
  Exit bad = Plain({"verify", f, "1048576", "6", "100"}, Preload());
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("Invalid argument"), std::string::npos) << bad.err;
}

TEST_F(PreloadTest, ThreadsStartedBeforeAndAfterTheFirstMappingShareIt) {
  const std::string f = umap_dir_ + "/t.bin";
  Exit x = Plain({"threads", f, "4194304", "7", "8"}, Preload());
  ASSERT_EQ(x.code, 0) << x.err;
  ExpectPattern(f, 4194304, 7);
}

TEST_F(PreloadTest, ReadAndWriteSystemCallsOnUmapBuffers) {
  // The source sits under UMAP_PATHS too: OTHER.sock, next to it, is then a Umap mapping.
  const std::string f = umap_dir_ + "/k.bin", other = umap_dir_ + "/src.bin";
  ASSERT_EQ(Plain({"write", other, "2097152", "8"}, {}).code, 0);
  Exit x = Plain({"kernel-io", f, "2097152", other}, Preload());
  ASSERT_EQ(x.code, 0) << x.err;
  ExpectPattern(f, 2097152, 8);               // read()/pread() into the mapping
  ExpectPattern(other + ".out", 2097152, 8);  // writev()/pwrite() from it
  ExpectPattern(other + ".sock", 65536, 8);   // send() from it, recv() into another
}

TEST_F(PreloadTest, ForkChildReadsTheSyncedFileAndItsWritesAreRefused) {
  const std::string f = umap_dir_ + "/f.bin";
  Exit x = Plain({"fork", f, "1048576", "9"}, Preload());
  EXPECT_EQ(x.code, 0) << x.err;
  ExpectPattern(f, 1048576, 9);
}

TEST_F(PreloadTest, AChildForkedBeforeAnyMappingKeepsTheShim) {
  const std::string f = umap_dir_ + "/ff.bin";
  ASSERT_EQ(Plain({"write", f, "1048576", "3"}, {}).code, 0);
  ChildProcess p({PLAIN_MMAP, "fork-first", f, "1048576"}, Preload(), dir_.File("ff.err"));
  const std::string child = p.ReadLine();
  ASSERT_EQ(child.rfind("child ", 0), 0u) << child;
  const pid_t pid = std::stoi(child.substr(6));
  ASSERT_EQ(p.ReadLine().rfind("ready", 0), 0u);
  EXPECT_EQ(preloadtest::MapsLinesNaming(pid, f), 0);  // a Umap mapping of the child's own
  EXPECT_TRUE(preloadtest::HoldsUserfaultfd(pid));
  p.CloseStdin();
  Exit x = p.Wait();
  EXPECT_EQ(x.code, 0) << x.err;
}

TEST_F(PreloadTest, TheProgramsOwnSigbusHandlerGetsOnlyItsSignals) {
  // A handler installed after the runtime started (signal fault mode: Umap's own SIGBUS
  // handler is in place) and one installed before: either way Umap's faults are served,
  // the bus error past end of file reaches the program's handler, and the program sees its
  // own dispositions. The same program with the kernel's mmap behaves the same.
  for (const char* when : {"after", "before"}) {
    SCOPED_TRACE(when);
    const std::string f = umap_dir_ + "/sb.bin", g = plain_dir_ + "/sb.bin";
    Exit x = Plain({"sigbus", f, "4096", "4", when}, Preload());
    EXPECT_EQ(x.code, 0) << x.err;
    Exit k = Plain({"sigbus", g, "4096", "4", when}, {});
    EXPECT_EQ(k.code, 0) << k.err;
  }
}

TEST_F(PreloadTest, MunmapOfPartOfAMappingIsRefusedWithEinval) {
  const std::string f = umap_dir_ + "/p.bin";
  ASSERT_EQ(Plain({"write", f, "1048576", "1"}, {}).code, 0);
  Exit x = Plain({"partial", f, "1048576"}, Preload());
  EXPECT_EQ(x.code, 0) << x.err;
  EXPECT_NE(x.err.find("would cut the Umap mapping of " + f), std::string::npos) << x.err;
}

TEST_F(PreloadTest, ResidencyAdviceKeepsTheBytesAndProtectionChangesAreRefused) {
  const std::string f = umap_dir_ + "/a.bin";
  Exit x = Plain({"advise", f, "1048576", "10"}, Preload({"PLAIN_MMAP_EXPECT_UMAP=1"}));
  EXPECT_EQ(x.code, 0) << x.err;
  ExpectPattern(f, 1048576, 10);
  // The same program with the kernel: the same bytes (mprotect/MADV_REMOVE not tried).
  const std::string g = plain_dir_ + "/a.bin";
  EXPECT_EQ(Plain({"advise", g, "1048576", "10"}, {}).code, 0);
  ExpectPattern(g, 1048576, 10);
}

TEST_F(PreloadTest, MremapMayMoveGrowsAMapping) {
  const std::string f = umap_dir_ + "/g.bin";
  Exit x = Plain({"grow", f, "1048576", "11"}, Preload());
  EXPECT_EQ(x.code, 0) << x.err;
  ExpectPattern(f, 2097152, 11);
}

TEST_F(PreloadTest, ExitWithoutMunmapWritesTheMappingBack) {
  const std::string f = umap_dir_ + "/e.bin";
  Exit x = Plain({"exit-mapped", f, "2097152", "12"}, Preload());
  EXPECT_EQ(x.code, 0) << x.err;
  ExpectPattern(f, 2097152, 12);
}

TEST_F(PreloadTest, MappingInAConstructorBeforeMainGoesThroughUmap) {
  const std::string f = umap_dir_ + "/c.bin";
  ASSERT_EQ(Plain({"write", f, "65536", "13"}, {}).code, 0);
  Exit x = Plain({"verify", f, "65536", "13"}, Preload({"PLAIN_MMAP_CTOR_FILE=" + f}));
  EXPECT_EQ(x.code, 0) << x.err;
}

TEST_F(PreloadTest, AllocationThroughMmapBeforeAndDuringSymbolResolution) {
  // A malloc that maps every block, preloaded first: dlsym's own allocations and libc's
  // start-up reach the shim's mmap before its constructor has resolved anything.
  std::vector<std::string> env = Preload();
  env[0] = std::string("LD_PRELOAD=") + MMAP_MALLOC + " " + UMAP_PRELOAD_LIB;
  const std::string f = umap_dir_ + "/m.bin";
  Exit w = Plain({"write", f, "1048576", "14"}, env);
  ASSERT_EQ(w.code, 0) << w.err;
  ExpectPattern(f, 1048576, 14);
  Exit v = Plain({"verify", f, "1048576", "14"}, env);
  EXPECT_EQ(v.code, 0) << v.err;
}

TEST_F(PreloadTest, UnusableRuntimeFailsTheMappingUnlessKernelFallbackIsChosen) {
  const std::string f = umap_dir_ + "/r.bin";
  // 1 byte of cache: the runtime refuses to start (EINVAL).
  Exit refused = Plain({"write", f, "65536", "15"}, Preload({"UMAP_CACHE_BYTES=1"}));
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("cannot start the Umap runtime"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("mmap fails (UMAP_PRELOAD_FALLBACK=kernel"), std::string::npos);
  Exit kernel = Plain({"write", f, "65536", "15"},
                      Preload({"UMAP_CACHE_BYTES=1", "UMAP_PRELOAD_FALLBACK=kernel"}));
  EXPECT_EQ(kernel.code, 0) << kernel.err;
  EXPECT_NE(kernel.err.find("mapping it with the kernel instead"), std::string::npos);
  ExpectPattern(f, 65536, 15);
}

}  // namespace
