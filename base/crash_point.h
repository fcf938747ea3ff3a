// Crash points: named places in the protocol code where the chaos harness may kill the
// process.
//
//   UMAP_CRASH_POINT("journal.after_commit");
//
// Crash points exist only in the testing variant of the libraries (the `*_testing` CMake
// targets, compiled with UMAP_TEST_SWITCHES=1), which tests/ and chaos/ link. In the release
// libraries (libumap, the installed tools) UMAP_CRASH_POINT expands to a compile-time name
// check and nothing else, UMAP_CRASH_POINTS_ACTIVE() is the constant false, and neither this
// file's functions nor UMAP_CRASH_AT exist: a process linking the release library cannot be
// killed through them (as RocksDB compiles its sync points out under NDEBUG).
//
// In the testing variant, disarmed (always, unless a harness armed one), a crash point costs
// one relaxed load of a global std::atomic<bool> and a not-taken branch; the slow path is out
// of line.
//
// Arming (testing variant), by the harness only:
//   - the environment variable UMAP_CRASH_AT=<name>[:<n>] (SIGKILL at the n-th hit of <name>,
//     default n = 1). It is read once, by a static initializer in crash_point.cc; a malformed
//     value or an unknown name aborts the process at start-up, so a typo in a chaos script
//     fails loudly instead of never crashing;
//   - crash_point::Arm(name, n, action) for in-process tests (action: SIGKILL or a callback).
// At most one point is armed at a time. While anything is armed (or counting is enabled),
// every hit of every point is counted per name (HitCount), for chaos reports.
//
// Names: every name is listed in kNames below, sorted, in the form `component.step`
// (lower case, digits and '_'). The macro checks its argument against kNames at compile
// time in both variants, so an unregistered or misspelt name does not build, and AllNames()
// is the complete list that docs/crash_points.md documents (a test keeps the two equal). To
// add a call site with a new name: add the name here and a row to docs/crash_points.md, in
// one change. A .cc file with a call site is listed in its library's SWITCHED_SRCS
// (cmake/UmapHelpers.cmake), so that each variant gets its own object.
//
// Thread safety: every function here may be called from any thread. A callback action runs
// on the thread that hit the point, with no lock held; the point is disarmed before it runs.
#ifndef UMAP_BASE_CRASH_POINT_H_
#define UMAP_BASE_CRASH_POINT_H_

#include <string_view>

#if UMAP_TEST_SWITCHES
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#endif

namespace umap::crash_point {

// The registry. Keep sorted (checked at compile time) and keep docs/crash_points.md in step.
inline constexpr const char* kNames[] = {
    "apply.after_sync",       // runtime: DFS apply fdatasync returned, before mark-applied
    "apply.mid_write",        // runtime: some blocks of a transaction written to the DFS
    "gc.before_delete",       // journal: applied records chosen, before their delete batch
    "journal.after_commit",   // journal: commit WriteBatch synced, before returning
    "journal.before_commit",  // journal: intent built, before the sync=true write
    "journal.before_mark",    // journal: commit synced in the WAL, not yet in UMAP-COMMITTED
    "journal.mid_stream",     // journal: a payload batch of a large commit written, no header
    "recovery.mid_replay",    // recovery: some committed transactions re-applied
};
inline constexpr int kNumNames = static_cast<int>(sizeof(kNames) / sizeof(kNames[0]));

// The index of `name` in kNames, or -1. constexpr: the macro calls it at compile time.
constexpr int IdOf(std::string_view name) {
  for (int i = 0; i < kNumNames; ++i) {
    if (name == std::string_view(kNames[i])) return i;
  }
  return -1;
}

namespace internal {

constexpr bool IsValidName(std::string_view name) {
  bool dot = false;
  if (name.empty() || name.front() == '.' || name.back() == '.') return false;
  for (char c : name) {
    if (c == '.') {
      dot = true;
    } else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return dot;
}

constexpr bool RegistryIsWellFormed() {
  for (int i = 0; i < kNumNames; ++i) {
    if (!IsValidName(kNames[i])) return false;
    if (i > 0 && !(std::string_view(kNames[i - 1]) < std::string_view(kNames[i]))) return false;
  }
  return true;
}
static_assert(RegistryIsWellFormed(),
              "crash_point::kNames must be sorted, unique and of the form component.step");

}  // namespace internal

#if UMAP_TEST_SWITCHES
namespace internal {

// True while a point is armed or counting is on. The only thing the fast path reads.
extern std::atomic<bool> g_active;

// The slow path: counts the hit and fires the armed action when this is its n-th hit.
void HitSlow(int id);

// Parses "<name>[:<n>]" (the UMAP_CRASH_AT syntax) and arms a SIGKILL there. Exposed for
// tests of the environment syntax; the harness sets the environment variable instead.
absl::Status TEST_ArmFromSpec(absl::string_view spec);

}  // namespace internal

// What an armed point does when it fires.
struct Action {
  // SIGKILL to the own process: no destructors, no atexit handlers, no stdio flush.
  static Action Kill() { return Action(); }
  // Runs `fn(name)` on the hitting thread (in-process tests). The point is disarmed first.
  static Action Call(std::function<void(absl::string_view name)> fn) {
    Action a;
    a.callback = std::move(fn);
    return a;
  }
  std::function<void(absl::string_view name)> callback;  // empty: Kill
};

// Arms `name` to fire `action` at its n-th hit from now (n >= 1), replacing any armed point,
// and resets that name's countdown (not the hit counters).
// Errors: kInvalidArgument for an unregistered name or n == 0.
absl::Status Arm(absl::string_view name, uint64_t n, Action action);
// Disarms the armed point, if any. Counting stays as EnableCounting left it.
void Disarm();
// Counts hits of every point without arming any (for chaos reports and for picking n).
void EnableCounting(bool on);

// The name currently armed, or empty.
std::string ArmedName();
// True while a point is armed or hits are counted: code whose crash-point semantics depend
// on doing steps one at a time (concurrent applies) does them one at a time then.
inline bool Active() { return internal::g_active.load(std::memory_order_relaxed); }
// Hits of `name` counted so far (0 for unknown names; only counted while active).
uint64_t HitCount(absl::string_view name);
// (name, hits) for every registered name, in kNames order.
std::vector<std::pair<std::string, uint64_t>> HitCounts();
void ResetHitCounts();

// Every registered name, sorted (the `umap-crash-points` list).
absl::Span<const char* const> AllNames();
// Whether `name` is registered (the run-time twin of the macro's compile-time check).
bool IsRegistered(absl::string_view name);

#endif  // UMAP_TEST_SWITCHES
}  // namespace umap::crash_point

#if !defined(UMAP_TEST_SWITCHES)

// Compiled by a target that builds only one variant (a common object of a library, a tool):
// a crash point there would be silently dead in the testing variant too.
#define UMAP_CRASH_POINT(name)                                                       \
  static_assert(sizeof(name) == 0, "a file with a crash point must be listed in its " \
                                   "library's SWITCHED_SRCS (cmake/UmapHelpers.cmake)")
#define UMAP_CRASH_POINTS_ACTIVE()                                                     \
  ([] {                                                                                \
    static_assert(false, "a file that asks UMAP_CRASH_POINTS_ACTIVE() must be listed " \
                         "in its library's SWITCHED_SRCS (cmake/UmapHelpers.cmake)");  \
    return false;                                                                      \
  }())

#elif UMAP_TEST_SWITCHES

// A crash point. `name` must be a string literal listed in umap::crash_point::kNames.
#define UMAP_CRASH_POINT(name)                                                             \
  do {                                                                                     \
    constexpr int umap_crash_point_id_ = ::umap::crash_point::IdOf(name);                  \
    static_assert(umap_crash_point_id_ >= 0, "unregistered crash point " name              \
                                             ": add it to kNames in base/crash_point.h "   \
                                             "and to docs/crash_points.md");               \
    if (__builtin_expect(                                                                  \
            ::umap::crash_point::internal::g_active.load(std::memory_order_relaxed), 0)) { \
      ::umap::crash_point::internal::HitSlow(umap_crash_point_id_);                        \
    }                                                                                      \
  } while (0)

// True while a point is armed or hits are counted: code whose crash-point semantics depend
// on doing steps one at a time (concurrent applies) does them one at a time then.
#define UMAP_CRASH_POINTS_ACTIVE() (::umap::crash_point::Active())

#else  // release: the name is still checked; no code, no data, no environment variable.

#define UMAP_CRASH_POINT(name)                                                            \
  do {                                                                                    \
    static_assert(::umap::crash_point::IdOf(name) >= 0,                                   \
                  "unregistered crash point " name                                        \
                  ": add it to kNames in base/crash_point.h and to docs/crash_points.md"); \
  } while (0)

#define UMAP_CRASH_POINTS_ACTIVE() false

#endif  // UMAP_TEST_SWITCHES

#endif  // UMAP_BASE_CRASH_POINT_H_
