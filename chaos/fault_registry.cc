#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "absl/strings/str_split.h"
#include "chaos/fault_class.h"

namespace chaos {
namespace {

// Never destroyed: classes register from static initialisers of other files, in any order.
// A deque: Find's pointers stay valid while later classes register.
std::deque<FaultClassInfo>& Registry() {
  static auto* registry = new std::deque<FaultClassInfo>();
  return *registry;
}

}  // namespace

bool FaultRegistry::Add(const FaultClassInfo& info) {
  if (Find(info.name) != nullptr) {
    std::fprintf(stderr, "umap-chaos: fault class '%s' registered twice\n", info.name);
    std::abort();
  }
  Registry().push_back(info);
  return true;
}

const FaultClassInfo* FaultRegistry::Find(const std::string& name) {
  for (const FaultClassInfo& info : Registry()) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

std::vector<const FaultClassInfo*> FaultRegistry::All(const std::string& preferred) {
  std::vector<const FaultClassInfo*> out;
  for (absl::string_view name : absl::StrSplit(preferred, ',', absl::SkipEmpty())) {
    if (const FaultClassInfo* info = Find(std::string(name)); info != nullptr) out.push_back(info);
  }
  std::vector<const FaultClassInfo*> rest;
  for (const FaultClassInfo& info : Registry()) {
    if (std::find(out.begin(), out.end(), &info) == out.end()) rest.push_back(&info);
  }
  std::sort(rest.begin(), rest.end(), [](const FaultClassInfo* a, const FaultClassInfo* b) {
    return std::strcmp(a->name, b->name) < 0;
  });
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

}  // namespace chaos
