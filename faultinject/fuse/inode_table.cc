#include "faultinject/fuse/inode_table.h"

#include <vector>

#include "absl/strings/match.h"

namespace umap::faultfuse {
namespace {

constexpr uint64_t kRootIno = 1;  // FUSE_ROOT_ID

}  // namespace

InodeTable::InodeTable() : next_(kRootIno + 1) {
  absl::MutexLock l(&mu_);
  // The root is never forgotten: one lookup that no FORGET balances.
  nodes_[kRootIno] = Node{"", 1, true};
  by_path_[""] = kRootIno;
}

uint64_t InodeTable::Lookup(const std::string& path) {
  absl::MutexLock l(&mu_);
  auto it = by_path_.find(path);
  if (it != by_path_.end()) {
    ++nodes_[it->second].lookups;
    return it->second;
  }
  const uint64_t ino = next_++;
  nodes_[ino] = Node{path, 1, true};
  by_path_[path] = ino;
  return ino;
}

std::optional<std::string> InodeTable::PathOf(uint64_t ino) const {
  absl::MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return std::nullopt;
  return it->second.path;
}

void InodeTable::Forget(uint64_t ino, uint64_t n) {
  absl::MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end() || ino == kRootIno) return;
  it->second.lookups -= std::min(n, it->second.lookups);
  if (it->second.lookups > 0) return;
  if (it->second.linked) by_path_.erase(it->second.path);
  nodes_.erase(it);
}

void InodeTable::Unlinked(const std::string& path) {
  absl::MutexLock l(&mu_);
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return;
  nodes_[it->second].linked = false;
  by_path_.erase(it);
}

void InodeTable::Renamed(const std::string& from, const std::string& to) {
  absl::MutexLock l(&mu_);
  // A file renamed over `to` replaces it: the old inode at `to` is unlinked.
  if (auto old = by_path_.find(to); old != by_path_.end()) {
    nodes_[old->second].linked = false;
    by_path_.erase(old);
  }
  std::vector<std::pair<std::string, uint64_t>> moved;
  const std::string prefix = from + "/";
  for (auto it = by_path_.begin(); it != by_path_.end();) {
    if (it->first == from || absl::StartsWith(it->first, prefix)) {
      moved.emplace_back(to + it->first.substr(from.size()), it->second);
      it = by_path_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [path, ino] : moved) {
    nodes_[ino].path = path;
    by_path_[path] = ino;
  }
}

std::string InodeTable::Child(const std::string& parent, const std::string& name) {
  return parent.empty() ? name : parent + "/" + name;
}

}  // namespace umap::faultfuse
