// The mutation switches (base/mutation.h) and the crash point the chaos suite placed in the
// journal's GC (gc.before_delete). The chaos-level proof that each mutation is caught is
// chaos/mutation_check.sh (ctest chaos_mutation_*).
#include "base/mutation.h"

#include <gtest/gtest.h>

#include <string>

#include "base/crash_point.h"
#include "base/status_macros.h"
#include "journal/format.h"
#include "journal/journal.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace umap {
namespace {

using mutation::Mutation;

TEST(MutationTest, EveryNameParsesToItsMutation) {
  for (Mutation m : {Mutation::kNone, Mutation::kApplyBeforeCommit, Mutation::kGcBeforeSync,
                     Mutation::kSkipCrc}) {
    Mutation parsed = Mutation::kNone;
    ASSERT_OK(mutation::Parse(mutation::Name(m), &parsed));
    EXPECT_EQ(parsed, m) << mutation::Name(m);
  }
}

TEST(MutationTest, UnknownNameIsInvalidArgumentListingTheKnownOnes) {
  Mutation parsed = Mutation::kNone;
  absl::Status s = mutation::Parse("skip_crcs", &parsed);
  EXPECT_THAT(s, testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(s.message().find("apply_before_commit"), absl::string_view::npos);
}

TEST(MutationTest, OffUnlessArmedAndOnlyTheArmedOneIsActive) {
  ASSERT_EQ(mutation::Armed(), Mutation::kNone) << "UMAP_TEST_MUTATION set for this test?";
  EXPECT_FALSE(mutation::Active(Mutation::kSkipCrc));
  mutation::TEST_Arm(Mutation::kSkipCrc);
  EXPECT_TRUE(mutation::Active(Mutation::kSkipCrc));
  EXPECT_FALSE(mutation::Active(Mutation::kGcBeforeSync));
  mutation::TEST_Arm(Mutation::kNone);
  EXPECT_FALSE(mutation::Active(Mutation::kSkipCrc));
}

TEST(MutationTest, SkipCrcAcceptsAGarbledBlockImageThatIsOtherwiseDataLoss) {
  std::string value = journal::EncodeTxnPayload(std::string(4096, 'a'));
  value[100] ^= 1;
  const std::string key = journal::TxnPayloadKey(1, 0);
  EXPECT_THAT(journal::DecodeTxnPayload(key, value).status(),
              testing::StatusIs(absl::StatusCode::kDataLoss));
  mutation::TEST_Arm(Mutation::kSkipCrc);
  absl::StatusOr<journal::TxnPayload> p = journal::DecodeTxnPayload(key, value);
  mutation::TEST_Arm(Mutation::kNone);
  ASSERT_OK(p.status());
  EXPECT_EQ(p->data[100 - 8], 'a' ^ 1);
}

TEST(GcCrashPointTest, FiresOncePerDeleteBatchBeforeTheRecordsGo) {
  testing::TempDir dir;
  journal::JournalOptions o;
  o.dir = dir.File("journal");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<journal::Journal> j, journal::Journal::Open(o));
  FileIdentity file{dir.File("f"), 1, 2, 1 << 20};
  ASSERT_OK_AND_ASSIGN(uint64_t id, j->RegisterMapping(file, 4096, journal::Policy::kAtomic,
                                                       journal::Contents::kData));
  const std::string image(4096, 'x');
  const journal::BlockWrite writes[] = {{3, image}};
  ASSERT_OK_AND_ASSIGN(journal::Transaction t, j->Commit(id, writes, 0, 0));
  uint64_t pending_at_fire = 0;
  int fired = 0;
  ASSERT_OK(crash_point::Arm("gc.before_delete", 1,
                             crash_point::Action::Call([&](absl::string_view) {
                               ++fired;
                               // The records are still readable: nothing was deleted yet.
                               pending_at_fire = j->ReadTransaction(t.lsn).ok() ? 1 : 0;
                             })));
  ASSERT_OK(j->MarkApplied(t.lsn));
  crash_point::Disarm();
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(pending_at_fire, 1u);
  EXPECT_THAT(j->ReadTransaction(t.lsn).status(), testing::StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace umap
