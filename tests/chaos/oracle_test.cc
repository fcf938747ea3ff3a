// The chaos oracle flags each invariant it is responsible for, and accepts what the
// protocol allows (a test that cannot fail is a defect: these make sure it can).
#include "chaos/oracle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "chaos/workload.h"

namespace chaos {
namespace {

constexpr uint64_t kSeed = 42, kTag = 7, kBlocks = 16;

class OracleTest : public ::testing::Test {
 protected:
  OracleTest() : model_(kSeed, kBlocks, std::vector<uint64_t>(kBlocks, 0)) {}

  // The decoded file with every block at `versions[b]` (each a real image).
  std::vector<Decoded> File(const std::vector<uint64_t>& versions) const {
    std::vector<Decoded> out;
    std::string buf(kBlockSize, '\0');
    for (uint64_t b = 0; b < kBlocks; ++b) {
      FillBlock(kTag, b, versions[b], absl::MakeSpan(buf));
      out.push_back(DecodeBlock(kTag, b, buf));
    }
    return out;
  }
  EpochEvents Acked(uint64_t acked, uint64_t begun) const {
    EpochEvents ev;
    ev.first_round = 1;
    if (acked > 0) ev.last_acked = acked;
    ev.last_begun = begun;
    return ev;
  }
  std::vector<Violation> CheckAtomic(const EpochEvents& ev, const std::vector<uint64_t>& v) {
    return Check(model_, Policy::kAtomic, ev, *ev.last_begun + 1, File(v), {});
  }
  static bool Has(const std::vector<Violation>& vs, const std::string& inv) {
    for (const Violation& v : vs) {
      if (v.invariant == inv) return true;
    }
    return false;
  }

  Model model_;
};

TEST_F(OracleTest, BlockImagesRoundTripAndATornOneMatchesNoVersion) {
  std::string buf(kBlockSize, '\0');
  FillBlock(kTag, 3, 9, absl::MakeSpan(buf));
  Decoded d = DecodeBlock(kTag, 3, buf);
  ASSERT_EQ(d.kind, Decoded::Kind::kVersion);
  EXPECT_EQ(d.version, 9u);
  EXPECT_EQ(DecodeBlock(kTag, 4, buf).kind, Decoded::Kind::kForeign);
  buf[2000] ^= 1;
  EXPECT_EQ(DecodeBlock(kTag, 3, buf).kind, Decoded::Kind::kTorn);
}

TEST_F(OracleTest, AtomicAcceptsTheLastAckedStateAndTheInFlightOne) {
  EXPECT_TRUE(CheckAtomic(Acked(3, 4), model_.StateAfter(1, 3)).empty());
  EXPECT_TRUE(CheckAtomic(Acked(3, 4), model_.StateAfter(1, 4)).empty());
}

TEST_F(OracleTest, AtomicFlagsALostAcknowledgedUmsyncAsDurability) {
  // Round 3 wrote at least one block, so the state after round 2 lacks an acked version.
  EXPECT_TRUE(Has(CheckAtomic(Acked(3, 4), model_.StateAfter(1, 2)), "durability"));
}

TEST_F(OracleTest, AtomicFlagsAPartialTransaction) {
  // Find a round that writes at least two blocks; apply only its first block.
  uint64_t r = 1;
  while (RoundBlocks(kSeed, r, kBlocks).size() < 2) ++r;
  std::vector<uint64_t> v = model_.StateAfter(1, r - 1);
  v[RoundBlocks(kSeed, r, kBlocks)[0]] = r;
  EXPECT_TRUE(Has(CheckAtomic(Acked(r - 1, r), v), "prefix"));
}

TEST_F(OracleTest, AtomicFlagsUnsyncedWritesInTheFile) {
  std::vector<uint64_t> v = model_.StateAfter(1, 2);
  v[RoundBlocks(kSeed, 3, kBlocks)[0]] = 3;  // round 3 never began its umsync
  EXPECT_TRUE(Has(CheckAtomic(Acked(2, 2), v), "atomicity"));
}

TEST_F(OracleTest, RelaxedAcceptsAnyWrittenVersionNoOlderThanTheAckedOne) {
  std::vector<uint64_t> v = model_.StateAfter(1, 2);
  v[RoundBlocks(kSeed, 3, kBlocks)[0]] = 3;  // evicted and stolen before umsync 3
  EXPECT_TRUE(Check(model_, Policy::kRelaxed, Acked(2, 2), 3, File(v), {}).empty());
}

TEST_F(OracleTest, EveryPolicyFlagsATornBlock) {
  std::vector<Decoded> f = File(model_.StateAfter(1, 2));
  f[5].kind = Decoded::Kind::kTorn;
  f[5].why = "test";
  EXPECT_TRUE(Has(Check(model_, Policy::kRelaxed, Acked(2, 2), 3, f, {}), "atomicity"));
  EXPECT_TRUE(Has(Check(model_, Policy::kAtomic, Acked(2, 2), 3, f, {}), "atomicity"));
}

TEST_F(OracleTest, RecoveryThatMovesABlockBackIsAMonotonicityViolation) {
  const std::vector<uint64_t> after = model_.StateAfter(1, 2);
  std::vector<uint64_t> before = model_.StateAfter(1, 3);
  EpochEvents ev = Acked(2, 3);
  std::vector<Violation> vs = Check(model_, Policy::kRelaxed, ev, 4, File(after), File(before));
  EXPECT_EQ(Has(vs, "monotonicity"), before != after);
}

// Zeros: an initial hole nobody wrote yet is version 0; zeros anywhere else are a lost block.
std::vector<Decoded> WithZeros(std::vector<Decoded> f, const std::vector<uint64_t>& zero) {
  const std::string zeros(kBlockSize, '\0');
  for (uint64_t b : zero) f[b] = DecodeBlock(kTag, b, zeros);
  return f;
}

TEST_F(OracleTest, AZeroBlockDecodesAsZeroNotTorn) {
  const std::string zeros(kBlockSize, '\0');
  Decoded d = DecodeBlock(kTag, 5, zeros);
  EXPECT_EQ(d.kind, Decoded::Kind::kZero);
  EXPECT_EQ(d.version, 0u);
}

TEST_F(OracleTest, ZerosAreVersionZeroOnlyWhereTheHarnessLeftAHole) {
  std::vector<bool> holes(kBlocks, false);
  holes[2] = holes[9] = true;
  Model m(kSeed, kBlocks, std::vector<uint64_t>(kBlocks, 0), holes);
  // Acknowledged up to 0 rounds: a hole still reading as zeros is fine ...
  EpochEvents ev;
  ev.first_round = 1;
  ev.last_begun = 1;
  std::vector<Decoded> f = WithZeros(File(m.StateAfter(1, 0)), {2, 9});
  EXPECT_TRUE(Check(m, Policy::kAtomic, ev, 2, f, {}).empty());
  EXPECT_TRUE(Check(m, Policy::kRelaxed, ev, 2, f, {}).empty());
  // ... zeros in a block that was never a hole are a violation in both policies.
  f = WithZeros(File(m.StateAfter(1, 0)), {3});
  EXPECT_TRUE(Has(Check(m, Policy::kAtomic, ev, 2, f, {}), "atomicity"));
  EXPECT_TRUE(Has(Check(m, Policy::kRelaxed, ev, 2, f, {}), "atomicity"));
}

TEST_F(OracleTest, AHoleThatWasWrittenAndAcknowledgedMustNotReadAsZerosAgain) {
  std::vector<bool> holes(kBlocks, true);
  Model m(kSeed, kBlocks, std::vector<uint64_t>(kBlocks, 0), holes);
  const uint64_t b = RoundBlocks(kSeed, 1, kBlocks)[0];
  EpochEvents ev;
  ev.first_round = 1;
  ev.last_acked = 1;
  ev.last_begun = 1;
  std::vector<Decoded> f = WithZeros(File(m.StateAfter(1, 1)), {b});
  EXPECT_TRUE(Has(Check(m, Policy::kAtomic, ev, 2, f, {}), "durability"));
  EXPECT_TRUE(Has(Check(m, Policy::kRelaxed, ev, 2, f, {}), "durability"));
  // And recovery must not turn a block the crash left at version 1 back into a hole.
  EpochEvents unacked;
  unacked.first_round = 1;
  unacked.last_begun = 1;
  std::vector<Decoded> before = File(m.StateAfter(1, 1));
  f = WithZeros(File(m.StateAfter(1, 1)), {b});
  EXPECT_TRUE(Has(Check(m, Policy::kRelaxed, unacked, 2, f, before), "monotonicity"));
}

TEST_F(OracleTest, AFailedRoundKnownCommittedIsAsDurableAsAnAcknowledgedOne) {
  // Round 3's umsync failed with ENOSPC from the data disk: committed, so the file may not
  // stay at the state after round 2.
  EpochEvents ev = Acked(2, 4);
  EXPECT_TRUE(CheckAtomic(ev, model_.StateAfter(1, 2)).empty());
  ev.committed = 3;
  EXPECT_TRUE(Has(CheckAtomic(ev, model_.StateAfter(1, 2)), "durability"));
  EXPECT_TRUE(CheckAtomic(ev, model_.StateAfter(1, 3)).empty());
  EXPECT_TRUE(CheckAtomic(ev, model_.StateAfter(1, 4)).empty());
}

TEST_F(OracleTest, AFileJudgedAloneMayLagAcknowledgedRoundsButNotHoldWhatWasNeverWritten) {
  // Deferred file sync, journal refused: rounds 1..4 acknowledged, the applier wrote round 1
  // and half of round 2 to the file before the kill.
  const EpochEvents ev = Acked(4, 5);
  std::vector<uint64_t> v = model_.StateAfter(1, 1);
  v[RoundBlocks(kSeed, 2, kBlocks)[0]] = 2;
  EXPECT_TRUE(Has(CheckAtomic(ev, v), "durability"));
  EXPECT_TRUE(CheckFileAlone(model_, ev, 6, File(v), {}).empty());
  EXPECT_TRUE(CheckFileAlone(model_, ev, 6, File(model_.StateAfter(1, 0)), {}).empty());
  // Still flagged: a torn block, a version never written to that block, a step back.
  std::vector<Decoded> torn = File(v);
  torn[5].kind = Decoded::Kind::kTorn;
  torn[5].why = "test";
  EXPECT_TRUE(Has(CheckFileAlone(model_, ev, 6, torn, {}), "atomicity"));
  uint64_t unwritten = 0;  // a block round 3 did not write
  const std::vector<uint64_t>& r3 = RoundBlocks(kSeed, 3, kBlocks);
  while (std::binary_search(r3.begin(), r3.end(), unwritten)) ++unwritten;
  std::vector<uint64_t> foreign = v;
  foreign[unwritten] = 3;
  EXPECT_TRUE(Has(CheckFileAlone(model_, ev, 6, File(foreign), {}), "atomicity"));
  EXPECT_TRUE(Has(CheckFileAlone(model_, ev, 6, File(model_.StateAfter(1, 0)),
                                 File(model_.StateAfter(1, 1))),
                  "monotonicity"));
}

}  // namespace
}  // namespace chaos
