// Mutation switches: deliberate protocol bugs, for proving that the chaos suite catches them.
//
//   bool crc_ok = Crc(...) == stored;
//   UMAP_IF_MUTATION(kSkipCrc) { crc_ok = true; }  // the deliberately wrong code
//
// Mutations exist only in the testing variant of the libraries (the `*_testing` CMake
// targets, compiled with UMAP_TEST_SWITCHES=1), which tests/ and chaos/ link. In the release
// libraries UMAP_IF_MUTATION(m) is `if constexpr (false)`: the statement after it is
// type-checked and discarded, so the wrong code is not in the release objects at all, and
// neither the functions below nor UMAP_TEST_MUTATION exist there.
//
// In the testing variant a mutation is armed only by the environment variable
// UMAP_TEST_MUTATION=<name>, read once by a static initializer in mutation.cc (before
// main()). An unknown name aborts the process at start-up with a message on stderr, so a
// typo in a test never silently tests nothing. Off (always, unless a test armed one) a check
// costs one relaxed load of a global std::atomic<int> and a not-taken branch, like a crash
// point (base/crash_point.h).
//
// The mutations (docs/chaos.md, "Mutation checks"):
//   apply_before_commit  JournalWriteBack writes a transaction's blocks to the file before
//                        the commit batch is written (runtime/writeback/journal_write_back.cc);
//   gc_before_sync       a committed transaction's journal records are deleted (marked
//                        applied) right after the commit, before its blocks are written and
//                        fdatasync'ed (runtime/writeback/journal_write_back.cc);
//   skip_crc             journal record and block-image CRCs are not checked when reading
//                        (journal/format.cc), nor the read-back CRC of --verify-after
//                        (recovery/recovery.cc).
// A .cc file that uses UMAP_IF_MUTATION is listed in its library's SWITCHED_SRCS
// (cmake/UmapHelpers.cmake). Thread safety: Active() may be called from any thread.
#ifndef UMAP_BASE_MUTATION_H_
#define UMAP_BASE_MUTATION_H_

#if UMAP_TEST_SWITCHES
#include <atomic>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#endif

namespace umap::mutation {

// Declared in both variants, so that a release build checks the names at the call sites.
enum class Mutation : int {
  kNone = 0,
  kApplyBeforeCommit = 1,
  kGcBeforeSync = 2,
  kSkipCrc = 3,
};

#if UMAP_TEST_SWITCHES
namespace internal {
// The armed mutation as an int; kNone unless UMAP_TEST_MUTATION named one.
extern std::atomic<int> g_mutation;
}  // namespace internal

// Whether mutation `m` is armed. One relaxed load.
inline bool Active(Mutation m) {
  return internal::g_mutation.load(std::memory_order_relaxed) == static_cast<int>(m);
}

// The environment name of `m` ("none" for kNone).
absl::string_view Name(Mutation m);
// Parses an environment name. kInvalidArgument for an unknown one (the message lists them).
absl::Status Parse(absl::string_view name, Mutation* out);
// The armed mutation.
Mutation Armed();
// Arms `m` in this process (in-process tests only; kNone disarms).
void TEST_Arm(Mutation m);
#endif  // UMAP_TEST_SWITCHES

}  // namespace umap::mutation

// `UMAP_IF_MUTATION(kName) statement`: runs the statement when mutation kName is armed.
#if !defined(UMAP_TEST_SWITCHES)
// Compiled by a target that builds only one variant: the mutation would be dead in tests too.
#define UMAP_IF_MUTATION(m)                                                              \
  static_assert(::umap::mutation::Mutation::m != ::umap::mutation::Mutation::m,          \
                "a file with a mutation switch must be listed in its library's "         \
                "SWITCHED_SRCS (cmake/UmapHelpers.cmake)");                              \
  if constexpr (false)
#elif UMAP_TEST_SWITCHES
#define UMAP_IF_MUTATION(m) if (::umap::mutation::Active(::umap::mutation::Mutation::m))
#else
#define UMAP_IF_MUTATION(m) \
  if constexpr (static_cast<void>(::umap::mutation::Mutation::m), false)
#endif

#endif  // UMAP_BASE_MUTATION_H_
