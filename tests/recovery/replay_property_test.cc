// Property: the optimised replay (only the newest image of each block, streamed from the
// journal in bounded buffers, merged writes through the WriteEngine, checkpoints that mark
// what is complete, files in parallel) leaves every file exactly as the plain replay does:
// every committed transaction's images written in LSN order, one after the other. For
// random backlogs (several files, two mappings of one file, short last blocks, a crashed
// writer that applied and marked some transactions), random options, and a first run
// interrupted at a random write.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/crash_point.h"
#include "faultinject/fault_env.h"
#include "journal/journal.h"
#include "recovery/recovery.h"
#include "tests/recovery/recovery_test_util.h"
#include "tests/testing/temp_dir.h"

namespace umap::recovery {
namespace {

// 50 cases by default (each builds a journal and runs recovery once or twice: about a
// quarter of a second on a quiet machine); RC_PARAMS="max_success=N" overrides. Set before
// rapidcheck reads RC_PARAMS, on first use.
const bool kDefaultParams = [] {
  const char* p = std::getenv("RC_PARAMS");
  std::string params = p ? p : "";
  if (params.find("max_success") == std::string::npos) {
    params += params.empty() ? "max_success=50" : " max_success=50";
    ::setenv("RC_PARAMS", params.c_str(), 1);
  }
  return true;
}();

struct TestFile {
  std::string path;
  uint32_t block_size = 0;
  uint64_t size = 0;
  std::vector<uint64_t> mappings;  // journal mapping ids (one or two)
  std::string model;               // the plain replay's result
};

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Files with random initial bytes, registered in the journal (one or two mappings each).
std::vector<TestFile> MakeFiles(const umap::testing::TempDir& dir, journal::Journal& j,
                                std::mt19937_64& rng) {
  std::vector<TestFile> files(*rc::gen::inRange<size_t>(1, 4));
  for (size_t f = 0; f < files.size(); ++f) {
    TestFile& tf = files[f];
    tf.path = dir.File("file" + std::to_string(f));
    tf.block_size = *rc::gen::element<uint32_t>(512, 4096);
    const uint64_t blocks = *rc::gen::inRange<uint64_t>(1, 25);
    // Sometimes a short last block (Umap never changes a file's size; images fit it).
    tf.size = blocks * tf.block_size - (*rc::gen::inRange(0, 3) == 0 ? tf.block_size / 3 : 0);
    tf.model = RandomBytes(rng, tf.size);
    RC_ASSERT(recoverytest::WriteFile(tf.path, tf.model));
    absl::StatusOr<FileIdentity> id = Env::Default()->IdentifyPath(tf.path);
    RC_ASSERT(id.ok());
    const int mappings = *rc::gen::inRange(1, 3);
    for (int k = 0; k < mappings; ++k) {
      absl::StatusOr<uint64_t> m = j.RegisterMapping(*id, tf.block_size, journal::Policy::kAtomic,
                                                     journal::Contents::kData);
      RC_ASSERT(m.ok());
      tf.mappings.push_back(*m);
    }
  }
  return files;
}

// Commits random transactions; the crashed writer applied (in LSN order) a prefix of them
// and marked some of that prefix applied. Each file's model gets every transaction in LSN
// order.
void CommitBacklog(journal::Journal& j, std::vector<TestFile>& files, std::mt19937_64& rng) {
  const int txns = *rc::gen::inRange(1, 17);
  const int applied = *rc::gen::inRange(0, txns + 1);
  for (int t = 0; t < txns; ++t) {
    TestFile& tf = files[*rc::gen::inRange<size_t>(0, files.size())];
    const uint64_t blocks = (tf.size + tf.block_size - 1) / tf.block_size;
    const uint64_t mapping = tf.mappings[*rc::gen::inRange<size_t>(0, tf.mappings.size())];
    std::map<uint64_t, std::string> images;
    const int n = *rc::gen::inRange(1, 7);
    for (int k = 0; k < n; ++k) {
      const uint64_t b = *rc::gen::inRange<uint64_t>(0, blocks);
      images[b] = RandomBytes(rng, std::min<uint64_t>(tf.block_size, tf.size - b * tf.block_size));
    }
    std::vector<journal::BlockWrite> writes;
    for (const auto& [b, image] : images) writes.push_back({b, image});
    absl::StatusOr<journal::Transaction> c = j.Commit(mapping, writes, 0, 0);
    RC_ASSERT(c.ok());
    for (const auto& [b, image] : images) tf.model.replace(b * tf.block_size, image.size(), image);
    if (t < applied) {
      for (const auto& [b, image] : images) {
        RC_ASSERT(recoverytest::PWrite(tf.path, b * tf.block_size, image));
      }
      if (*rc::gen::inRange(0, 2) == 0) RC_ASSERT(j.MarkApplied(c->lsn).ok());
    }
  }
}

RecoverOptions RandomOptions(const std::string& jdir) {
  RecoverOptions o;
  o.journal_dir = jdir;
  o.io_max_bytes = *rc::gen::element<uint64_t>(512, 4096, 64 << 10, 1 << 20);
  o.checkpoint_bytes = *rc::gen::element<uint64_t>(0, 512, 4096, 3 * 4096, 256 << 20);
  o.parallel_files = *rc::gen::element<size_t>(1, 4);
  o.io_depth = *rc::gen::element<unsigned>(1, 16);
  return o;
}

RC_GTEST_PROP(ReplayProperty, OptimisedReplayEqualsThePlainInOrderReplay, ()) {
  umap::testing::TempDir dir;
  const std::string jdir = dir.File("journal");
  std::mt19937_64 rng(*rc::gen::arbitrary<uint64_t>());
  std::vector<TestFile> files;
  {
    journal::JournalOptions jo;
    jo.dir = jdir;
    absl::StatusOr<std::unique_ptr<journal::Journal>> j = journal::Journal::Open(jo);
    RC_ASSERT(j.ok());
    files = MakeFiles(dir, **j, rng);
    CommitBacklog(**j, files, rng);
  }  // the writer dies
  RecoverOptions o = RandomOptions(jdir);
  if (*rc::gen::inRange(0, 2) == 0) {
    // A first run that dies at its n-th write: that write and every later one fail, as if
    // the process was gone.
    faultinject::FaultEnv fenv(Env::Default());
    RecoverOptions first = o;
    first.env = &fenv;
    const int n = *rc::gen::inRange(1, 8);
    // The callback runs on a replay thread, where an RC_ASSERT could not report. Should the
    // fault not arm, the first run simply completes; the property holds either way.
    RC_ASSERT(crash_point::Arm("recovery.mid_replay", n, crash_point::Action::Call([&](auto) {
                                 fenv.FailNext(faultinject::Op::kWrite, 1 << 20,
                                               faultinject::Fault::Error(EIO))
                                     .IgnoreError();
                               }))
                  .ok());
    absl::StatusOr<Report> r = Recover(first);
    crash_point::Disarm();
    RC_ASSERT(r.ok());
  }
  absl::StatusOr<Report> r = Recover(o);
  RC_ASSERT(r.ok());
  RC_ASSERT(ExitCodeOf(*r) == ExitCode::kOk);
  for (const TestFile& tf : files) RC_ASSERT(recoverytest::ReadFile(tf.path) == tf.model);
  journal::JournalOptions jo;
  jo.dir = jdir;
  absl::StatusOr<std::unique_ptr<journal::Journal>> j = journal::Journal::Open(jo);
  RC_ASSERT(j.ok());
  RC_ASSERT((*j)->PendingLsns().empty());
}

}  // namespace
}  // namespace umap::recovery
