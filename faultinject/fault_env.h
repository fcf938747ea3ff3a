// FaultEnv: an Env wrapper that breaks the backend on purpose, for tests and the chaos harness.
//
// Models leveldb's fault_injection_test and rocksdb's FaultInjectionTestFS, for our Env:
//   - durability tracking: per file, which byte ranges were written since its last successful
//     Sync, with the pre-image of every overwritten durable byte (so unsynced overwrites can
//     be rolled back, not only unsynced appends);
//   - injected failures of the next N calls of an operation, or of 1 call in n drawn from a
//     fixed seed, transient or sticky, optionally for one file only, with a chosen errno
//     (EIO, ENOSPC, ETIMEDOUT, EINTR/EAGAIN, ...): the rule engine FaultFs uses too
//     (faultinject/fault_rules.h);
//   - torn writes (a prefix of the bytes reaches the file, then an error), short and
//     truncated reads, stalls (block for a time or until released: timeout tests), and an
//     fsync that fails after "marking the pages clean" (the data is lost to a power cut even
//     if a later Sync succeeds, as Linux and GlusterFS do);
//   - a power cut: SimulatePowerCut() freezes the env (every later call fails with EIO), then
//     DropUnsyncedData() rolls each file back to what survives (all unsynced data dropped,
//     torn at sector granularity, or kept), then Restart() thaws it.
//
// Every injected error is a PosixError (same code and errno payload as a real one from
// base/env_posix.cc) carrying an extra payload, so tests can tell injected from real errors
// with IsInjected()/InjectedKind() instead of matching messages.
//
// What the Env interface does not let FaultEnv model: Env cannot create, delete or rename
// files, so there are no "files created since the last directory sync" to drop; SyncDir
// only counts and can be failed. Env has no Truncate either: dropping unsynced appends uses
// Options::truncate if set, else ftruncate() on the file's descriptor (POSIX files); a file
// with neither (memory env without a hook) makes DropUnsyncedData fail with
// kFailedPrecondition. Use MemEnvTruncator() with NewMemEnv().
//
// Cost: every unsynced write keeps a copy of its bytes and of the durable bytes it
// overwrote until the next successful Sync of that file. Meant for tests, never shipped.
//
// Thread safety: all methods, and all methods of the files it returns, may be called
// concurrently. REQUIRES: no call is in flight (or stalled) when the FaultEnv is destroyed;
// files it returned must not be used after it is destroyed. The target Env must outlive it.
#ifndef UMAP_FAULTINJECT_FAULT_ENV_H_
#define UMAP_FAULTINJECT_FAULT_ENV_H_

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "faultinject/fault_rules.h"
#include "umap/env.h"

namespace umap::faultinject {

class FaultFile;
struct TrackedFile;

// What an injected fault does.
enum class FaultKind {
  kError,          // the call does nothing and returns the error
  kTornWrite,      // WriteAt: a prefix of the bytes reaches the file, then the error
  kShortRead,      // ReadAt: a prefix of dst is filled from the file, then the error
  kTruncatedRead,  // ReadAt: returns OK with a prefix count, as if the file ended there
  kStall,          // the call blocks (Fault::stall or until ReleaseStalls), then proceeds
                   // normally (err == 0) or fails with err
  kSyncLosesData,  // Sync: returns the error; the bytes written since the last good Sync stay
                   // readable but never become durable, even if a later Sync succeeds
  kPowerCut,       // (not armable) a call refused because of SimulatePowerCut
};
inline constexpr int kNumFaultKinds = 7;
absl::string_view FaultKindName(FaultKind kind);

// Operations a fault can target.
enum class Op { kOpen, kRead, kWrite, kSync, kSyncDir };  // kOpen covers OpenFile and AdoptFd
inline constexpr int kNumOps = 5;

// One fault, built with the named constructors below:
//   env.FailNext(Op::kWrite, 1, Fault::Error(ENOSPC));
//   env.FailNext(Op::kRead, 1, Fault::Stall(absl::Seconds(5), ETIMEDOUT).OnlyFor("data"));
struct Fault {
  static Fault Error(int err) { return Of(FaultKind::kError, err); }
  // `prefix` bytes reach the file (unset: a seeded random count below the write's size).
  static Fault TornWrite(int err, std::optional<uint64_t> prefix = std::nullopt) {
    Fault f = Of(FaultKind::kTornWrite, err);
    f.prefix = prefix;
    return f;
  }
  static Fault ShortRead(int err, std::optional<uint64_t> prefix = std::nullopt) {
    Fault f = Of(FaultKind::kShortRead, err);
    f.prefix = prefix;
    return f;
  }
  static Fault TruncatedRead(std::optional<uint64_t> prefix = std::nullopt) {
    Fault f = Of(FaultKind::kTruncatedRead, 0);
    f.prefix = prefix;
    return f;
  }
  // Blocks for `duration` (InfiniteDuration: until ReleaseStalls or a power cut), then the
  // call proceeds (err == 0) or fails with `err` (e.g. ENOTCONN, as a stopped brick does).
  static Fault Stall(absl::Duration duration, int err = 0) {
    Fault f = Of(FaultKind::kStall, err);
    f.stall = duration;
    return f;
  }
  static Fault SyncLosesData(int err = EIO) { return Of(FaultKind::kSyncLosesData, err); }

  // Only calls on files whose path contains `part` (calls of other files are not counted
  // and do not draw from the 1-in-n generator).
  Fault OnlyFor(std::string part) && {
    path_contains = std::move(part);
    return std::move(*this);
  }
  // Once it fired, every later matching call fails too (a disk that stays full), until
  // Clear; FailNext's count then only says when it starts.
  Fault Sticky() && {
    sticky = true;
    return std::move(*this);
  }
  // The path filter (FaultRules).
  bool Matches(absl::string_view path) const {
    return path_contains.empty() || path.find(path_contains) != absl::string_view::npos;
  }

  // Any kind (table-driven tests); FailNext/FailOneIn validate the combination.
  static Fault Of(FaultKind kind, int err) {
    Fault f;
    f.kind = kind;
    f.err = err;
    return f;
  }

  FaultKind kind = FaultKind::kError;
  int err = EIO;
  std::optional<uint64_t> prefix;
  absl::Duration stall = absl::InfiniteDuration();
  std::string path_contains;  // empty: every file
  bool sticky = false;
};

// The payload that marks an injected error (type URL "umap.dev/faultinject").
bool IsInjected(const absl::Status& status);
// The kind of an injected error, or nullopt for OK and for real errors.
std::optional<FaultKind> InjectedKind(const absl::Status& status);

// What DropUnsyncedData keeps of the data written since each file's last successful Sync.
enum class DropMode {
  kDropAll,  // nothing: every file returns to its last synced content and size
  kTear,     // per write, a random sector-aligned prefix (seeded); see DropOptions::garble
  kKeep,     // everything (the OS wrote it back in time), except kSyncLosesData data
};
struct DropOptions {
  static DropOptions Of(DropMode mode) {
    DropOptions o;
    o.mode = mode;
    return o;
  }
  static DropOptions Tear(uint64_t seed, bool garble = false) {
    DropOptions o = Of(DropMode::kTear);
    o.seed = seed;
    o.garble = garble;
    return o;
  }

  DropMode mode = DropMode::kDropAll;
  uint64_t seed = 1;          // kTear: which prefix each write keeps
  bool garble = false;        // kTear: the sector after the kept prefix (the one being
                              // written when power failed) holds random bytes
  uint64_t sector_size = 512;  // kTear: cut points are multiples of this (file offsets)
};

// Truncates the file at `path` (seen through the target Env) to `size`.
using TruncateFn = std::function<absl::Status(const std::string& path, uint64_t size)>;
// A TruncateFn for an Env returned by NewMemEnv (rewrites the whole file: tests only).
TruncateFn MemEnvTruncator(Env* mem_env);

class FaultEnv : public EnvWrapper {
 public:
  struct Options {
    uint64_t seed = 0x5eed;  // draws for torn/short prefixes of FailNext faults
    TruncateFn truncate;     // unset: ftruncate() on the file's descriptor
    // The files offer io_uring when their target does (File::SupportsRing): the runtime's
    // merged reads and writes then run on io_uring, as in production, and this env applies
    // the armed read and write faults to their results (errors, short and truncated reads,
    // torn writes) and tracks their bytes for power cuts. A stall of a read or write cannot
    // be armed then (it would block the ring's reaper): use faultinject/fuse for that.
    // Off: the files offer no io_uring, and every byte goes through ReadAt and WriteAt.
    bool through_ring = false;
  };

  // `target` must outlive this env.
  explicit FaultEnv(Env* target) : FaultEnv(target, Options()) {}
  FaultEnv(Env* target, Options options);
  ~FaultEnv() override;
  FaultEnv(const FaultEnv&) = delete;
  FaultEnv& operator=(const FaultEnv&) = delete;

  // --- Arming (faultinject/fault_rules.h). Each op has at most one rule; arming replaces it. ---
  // Fails the next `count` matching calls of `op`. Errors: kInvalidArgument when the kind
  // does not apply to `op` (torn: kWrite; short/truncated read: kRead; sync-loses: kSync;
  // kPowerCut never), when count < 1, or when err <= 0 (0 is allowed for kStall, meaning
  // "proceed after the stall", and ignored for kTruncatedRead).
  absl::Status FailNext(Op op, int count, Fault fault);
  // Fails each matching call of `op` with probability 1/n, drawn from `seed`: the same seed
  // and the same sequence of calls give the same failures. n == 1 fails every call.
  absl::Status FailOneIn(Op op, uint32_t n, uint64_t seed, Fault fault);
  void Clear(Op op);
  void ClearAll();

  // Wakes every stalled call; later stalls block again.
  void ReleaseStalls();
  // Calls blocked in a stall right now.
  int stalled() const;
  // Waits until at least `n` calls are stalled; false on timeout.
  bool WaitForStalled(int n, absl::Duration timeout) const;

  // --- Power cut. ---
  // Freezes the env: every later call, on any file opened before or after, fails with EIO
  // (FaultKind::kPowerCut). Releases stalled calls (which then fail too).
  void SimulatePowerCut();
  bool frozen() const;
  // Rewrites every tracked file to what survives the cut, through the target Env.
  // REQUIRES: frozen() (else kFailedPrecondition). Errors of the target are returned after
  // every file was attempted; the first one wins.
  absl::Status DropUnsyncedData(const DropOptions& options);
  absl::Status DropUnsyncedData(DropMode mode) { return DropUnsyncedData(DropOptions::Of(mode)); }
  // Thaws the env after a cut, as after a reboot: tracking restarts from the files' current
  // contents (all durable). Files opened before the cut keep failing with EIO.
  void Restart();

  // --- Inspection. ---
  // Byte ranges [begin, end) of `path` written since its last successful Sync (merged,
  // sorted), including ranges whose Sync failed with kSyncLosesData.
  std::vector<std::pair<uint64_t, uint64_t>> UnsyncedRanges(const std::string& path) const;
  // Faults fired so far, per kind (kPowerCut counts refused calls).
  uint64_t fired(FaultKind kind) const;
  // io_uring results its files saw (FinishRead, FinishWritev): proof that a path ran on
  // the ring.
  uint64_t ring_results() const { return ring_results_.load(std::memory_order_relaxed); }
  // Successful SyncDir calls.
  uint64_t dir_syncs() const;

  // --- Env. ---
  absl::StatusOr<std::unique_ptr<File>> OpenFile(const std::string& path,
                                                 OpenMode mode) override;
  absl::StatusOr<std::unique_ptr<File>> AdoptFd(int fd, OpenMode mode) override;
  absl::Status CreateDir(const std::string& path, mode_t mode) override;
  absl::Status SyncDir(const std::string& path) override;
  absl::StatusOr<FileIdentity> IdentifyPath(const std::string& path) override;

 private:
  friend class FaultFile;
  using Rules = FaultRules<Op, kNumOps, Fault>;

  // Whether this call fails; the draw picks a default torn or short prefix.
  bool through_ring() const { return options_.through_ring; }
  void CountRingResult() { ring_results_.fetch_add(1, std::memory_order_relaxed); }
  std::optional<Rules::Fired> Decide(Op op, absl::string_view path) {
    return rules_.Decide(op, path, /*with_draw=*/true);
  }
  // kInvalidArgument when the fault's kind or errno does not fit `op`.
  static absl::Status Validate(Op op, const Fault& fault);
  absl::Status ValidateForRing(Op op, const Fault& f) const;
  // Blocks per `fault`; returns the error to report after the stall, or OK to proceed.
  absl::Status Stall(const Fault& fault, absl::string_view what);
  // A fired fault that does nothing but fail or stall (no partial data): stalls, then
  // returns OK to proceed or the stall's error; or returns the injected error.
  absl::Status FailOrStall(const Fault& fault, absl::string_view what);
  absl::Status PowerCutError(absl::string_view what);
  absl::StatusOr<std::unique_ptr<File>> Wrap(std::unique_ptr<File> file, uint64_t generation);
  bool IsStale(uint64_t generation) const;
  void Count(FaultKind kind);

  // Const after construction.
  const Options options_;

  Rules rules_;

  std::array<std::atomic<uint64_t>, kNumFaultKinds> fired_{};

  std::atomic<uint64_t> ring_results_{0};
  std::atomic<uint64_t> dir_syncs_{0};
  // Written under mu_; read without it on every call (a stale read only delays a refusal
  // by one call, and writers re-check under the file's lock).
  std::atomic<bool> frozen_{false};
  std::atomic<uint64_t> generation_{0};

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<TrackedFile>> files_ ABSL_GUARDED_BY(mu_);
  int stalled_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t release_epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace umap::faultinject

#endif  // UMAP_FAULTINJECT_FAULT_ENV_H_
