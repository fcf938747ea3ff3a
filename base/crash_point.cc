#include "base/crash_point.h"

// Compiled into the testing variant only (umap_base_testing): the release library has no
// crash points at all.
#if !UMAP_TEST_SWITCHES
#error "base/crash_point.cc is built only with UMAP_TEST_SWITCHES=1 (cmake/UmapHelpers.cmake)"
#endif

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "absl/base/attributes.h"
#include "absl/base/const_init.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace umap::crash_point {
namespace internal {

// Constant-initialized, so a crash point reached during another file's static
// initialization reads a valid (false) flag.
std::atomic<bool> g_active{false};

}  // namespace internal

namespace {

// Hit counters are plain relaxed atomics: the slow path of one point must not serialize
// with the slow path of another just to count.
std::atomic<uint64_t> g_hits[kNumNames];

ABSL_CONST_INIT absl::Mutex g_mu(absl::kConstInit);
int g_armed_id ABSL_GUARDED_BY(g_mu) = -1;
uint64_t g_remaining ABSL_GUARDED_BY(g_mu) = 0;
bool g_counting ABSL_GUARDED_BY(g_mu) = false;
// Heap-allocated and never freed: a point may fire while static destructors run.
Action* g_action ABSL_GUARDED_BY(g_mu) = nullptr;

void UpdateActiveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  internal::g_active.store(g_armed_id >= 0 || g_counting, std::memory_order_relaxed);
}

// The environment is read here and nowhere else: once, before main(), in whichever binary
// links this file (every binary with a crash point does, through g_active). An unusable
// value aborts: a chaos run whose crash point silently never fires proves nothing.
[[maybe_unused]] const bool g_armed_from_env = [] {
  const char* spec = std::getenv("UMAP_CRASH_AT");
  if (spec == nullptr || *spec == '\0') return false;
  absl::Status s = internal::TEST_ArmFromSpec(spec);
  if (!s.ok()) {
    std::fprintf(stderr, "umap: UMAP_CRASH_AT=%s: %s\n", spec, s.ToString().c_str());
    std::abort();
  }
  return true;
}();

}  // namespace

namespace internal {

void HitSlow(int id) {
  if (id < 0 || id >= kNumNames) return;
  g_hits[id].fetch_add(1, std::memory_order_relaxed);
  std::function<void(absl::string_view)> callback;
  {
    absl::MutexLock l(&g_mu);
    if (g_armed_id != id || --g_remaining != 0) return;
    // Disarm before acting, so a callback that reaches a point again does not recurse.
    g_armed_id = -1;
    UpdateActiveLocked();
    if (g_action != nullptr) callback = std::move(g_action->callback);
  }
  if (callback) {
    callback(kNames[id]);
    return;
  }
  // SIGKILL cannot be caught or blocked: the process ends here, as in a real kill -9.
  std::raise(SIGKILL);
}

absl::Status TEST_ArmFromSpec(absl::string_view spec) {
  absl::string_view name = spec;
  uint64_t n = 1;
  if (size_t colon = spec.find(':'); colon != absl::string_view::npos) {
    name = spec.substr(0, colon);
    absl::string_view count = spec.substr(colon + 1);
    if (!absl::SimpleAtoi(count, &n) || n == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("crash point spec '", spec, "': hit count must be a positive integer"));
    }
  }
  return Arm(name, n, Action::Kill());
}

}  // namespace internal

absl::Status Arm(absl::string_view name, uint64_t n, Action action) {
  int id = IdOf(std::string_view(name.data(), name.size()));
  if (id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unregistered crash point '", name, "' (see docs/crash_points.md)"));
  }
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("crash point '", name, "': hit count must be at least 1"));
  }
  auto* fresh = new Action(std::move(action));
  Action* old;
  {
    absl::MutexLock l(&g_mu);
    old = g_action;
    g_action = fresh;
    g_armed_id = id;
    g_remaining = n;
    UpdateActiveLocked();
  }
  delete old;
  return absl::OkStatus();
}

void Disarm() {
  absl::MutexLock l(&g_mu);
  g_armed_id = -1;
  UpdateActiveLocked();
}

void EnableCounting(bool on) {
  absl::MutexLock l(&g_mu);
  g_counting = on;
  UpdateActiveLocked();
}

std::string ArmedName() {
  absl::MutexLock l(&g_mu);
  return g_armed_id >= 0 ? std::string(kNames[g_armed_id]) : std::string();
}

uint64_t HitCount(absl::string_view name) {
  int id = IdOf(std::string_view(name.data(), name.size()));
  return id < 0 ? 0 : g_hits[id].load(std::memory_order_relaxed);
}

std::vector<std::pair<std::string, uint64_t>> HitCounts() {
  std::vector<std::pair<std::string, uint64_t>> out;
  out.reserve(kNumNames);
  for (int i = 0; i < kNumNames; ++i) {
    out.emplace_back(kNames[i], g_hits[i].load(std::memory_order_relaxed));
  }
  return out;
}

void ResetHitCounts() {
  for (auto& h : g_hits) h.store(0, std::memory_order_relaxed);
}

absl::Span<const char* const> AllNames() { return absl::MakeConstSpan(kNames); }

bool IsRegistered(absl::string_view name) {
  return IdOf(std::string_view(name.data(), name.size())) >= 0;
}

}  // namespace umap::crash_point
