#include "base/mutation.h"

// Compiled into the testing variant only (umap_base_testing): the release library has no
// mutation switches at all.
#if !UMAP_TEST_SWITCHES
#error "base/mutation.cc is built only with UMAP_TEST_SWITCHES=1 (cmake/UmapHelpers.cmake)"
#endif

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace umap::mutation {
namespace internal {

// Constant-initialized: a check reached during another file's static initialization reads
// kNone.
std::atomic<int> g_mutation{0};

}  // namespace internal

namespace {

constexpr Mutation kAll[] = {Mutation::kApplyBeforeCommit, Mutation::kGcBeforeSync,
                             Mutation::kSkipCrc};

// Read once, before main(), in every binary that links this file. An unknown name aborts:
// a mutation test whose mutation silently never applies would pass for the wrong reason.
[[maybe_unused]] const bool g_armed_from_env = [] {
  const char* name = std::getenv("UMAP_TEST_MUTATION");
  if (name == nullptr || *name == '\0') return false;
  Mutation m;
  absl::Status s = Parse(name, &m);
  if (!s.ok()) {
    std::fprintf(stderr, "umap: UMAP_TEST_MUTATION=%s: %s\n", name, s.ToString().c_str());
    std::abort();
  }
  std::fprintf(stderr, "umap: TEST MUTATION %s armed: this process breaks the protocol\n",
               name);
  internal::g_mutation.store(static_cast<int>(m), std::memory_order_relaxed);
  return true;
}();

}  // namespace

absl::string_view Name(Mutation m) {
  switch (m) {
    case Mutation::kNone: return "none";
    case Mutation::kApplyBeforeCommit: return "apply_before_commit";
    case Mutation::kGcBeforeSync: return "gc_before_sync";
    case Mutation::kSkipCrc: return "skip_crc";
  }
  return "unknown";
}

absl::Status Parse(absl::string_view name, Mutation* out) {
  if (name == "none") {
    *out = Mutation::kNone;
    return absl::OkStatus();
  }
  for (Mutation m : kAll) {
    if (name == Name(m)) {
      *out = m;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown mutation '", name, "' (known: apply_before_commit, gc_before_sync, skip_crc)"));
}

Mutation Armed() {
  return static_cast<Mutation>(internal::g_mutation.load(std::memory_order_relaxed));
}

void TEST_Arm(Mutation m) {
  internal::g_mutation.store(static_cast<int>(m), std::memory_order_relaxed);
}

}  // namespace umap::mutation
