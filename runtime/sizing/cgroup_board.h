// CgroupBoard: how the runtimes of processes that share one memory cgroup split its room
// (docs/design.md "Cache sizing", "Several processes").
//
// Each runtime with lazy sizing in a cgroup with a limit claims a slot in a small shared
// file, /dev/shm/umap-board.<uid>.<hash of the cgroup's path>, mode 0600, and publishes
// there every sizing period (100 ms) the bytes its cache holds and the bytes it asks for:
// what it holds, plus one growth step when its growth was blocked by the budget (it keeps
// missing blocks it had before). The room for caches is the cgroup's limit less the margin
// and less what is used outside the published caches; each runtime takes its max-min fair
// share of it: runtimes asking less than an equal share get what they ask, the rest split
// what remains equally, and what the demands leave of the room is split equally among all
// (a demand is the next step a runtime asks for, not a cap: a runtime alone in its cgroup
// may grow into all of the room at the fault path's pace, not a step per period). So a
// process that started late is never starved by one that filled the cgroup first (it gains
// a step per period while the other gives one back), and one that needs little leaves the
// rest to the others.
//
// A slot is owned by one runtime (pid and a per-process sequence number, claimed by CAS)
// and is free again when its owner clears it or its heartbeat is older than kStaleUs (a
// process that was killed). Runtimes of other users cannot open the file (mode 0600, its
// owner is checked): they are seen only through the cgroup's usage. Every member holds a
// shared flock on the file; the last to leave (the only one that gets the exclusive lock)
// removes it, so finished jobs leave no boards behind; a board whose last member was killed
// is removed by the next Join of this user (RemoveAbandoned).
#ifndef UMAP_RUNTIME_SIZING_CGROUP_BOARD_H_
#define UMAP_RUNTIME_SIZING_CGROUP_BOARD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace umap::runtime {

class CgroupBoard {
 public:
  static constexpr int kSlots = 64;
  static constexpr uint64_t kStaleUs = 3'000'000;

  // Opens (or creates) the board of `cgroup_id` in `dir` and claims a slot.
  static absl::StatusOr<std::unique_ptr<CgroupBoard>> Join(const std::string& cgroup_id,
                                                           const std::string& dir = "/dev/shm");
  ~CgroupBoard();  // frees the slot
  CgroupBoard(const CgroupBoard&) = delete;
  CgroupBoard& operator=(const CgroupBoard&) = delete;

  struct View {
    uint64_t held_total = 0;  // bytes held by every live runtime on the board (this one too)
    uint32_t runtimes = 0;    // live runtimes (this one too)
    uint64_t share = 0;       // this runtime's share of the room
  };
  // Publishes this runtime's figures and computes its share of `room` (bytes the caches of
  // the cgroup may hold together). `now_us`: CLOCK_MONOTONIC, machine-wide.
  View Publish(uint64_t held, uint64_t demand, uint64_t now_us,
               absl::FunctionRef<uint64_t(uint64_t held_total)> room);

  const std::string& path() const { return path_; }

  // Max-min fair share of `room` for claimant `me` among `demands`, plus an equal part of
  // what the demands leave of the room.
  static uint64_t MaxMinShare(absl::Span<const uint64_t> demands, size_t me, uint64_t room);

 private:
  struct Slot {
    std::atomic<uint64_t> owner;  // pid << 32 | sequence + 1; 0: free
    std::atomic<uint64_t> heartbeat_us;
    std::atomic<uint64_t> held;
    std::atomic<uint64_t> demand;
  };
  struct Layout {
    char magic[8];
    std::atomic<uint32_t> version;
    uint32_t slots;
    Slot slot[kSlots];
  };
  CgroupBoard(std::string path, int fd, Layout* layout, int slot, uint64_t owner)
      : path_(std::move(path)), fd_(fd), layout_(layout), slot_(slot), owner_(owner) {}
  // Removes this user's boards in `dir` that no member holds (their last member was
  // killed, so it never removed them).
  static void RemoveAbandoned(const std::string& dir);
  // Opens (creating) the file at `path`, takes the shared lock every member holds, checks
  // that it is this user's private file and sizes it for the layout.
  static absl::StatusOr<int> OpenLocked(const std::string& path);

  const std::string path_;
  const int fd_;  // open for the board's life, holding a shared flock
  Layout* const layout_;
  const int slot_;
  const uint64_t owner_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_SIZING_CGROUP_BOARD_H_
