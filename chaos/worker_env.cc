#include "chaos/worker_env.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include "absl/time/time.h"
#include "faultinject/fault_env.h"
#include "faultinject/fault_fs.h"
#include "rocksdb/file_system.h"
#include "runtime/options.h"
#include "runtime/runtime.h"
#include "runtime/umap_c_internal.h"

namespace chaos_worker {
namespace {

using umap::faultinject::DropOptions;
using umap::faultinject::Fault;
using umap::faultinject::FaultEnv;
using umap::faultinject::FaultFs;
using umap::faultinject::FsDropOptions;
using umap::faultinject::FsFault;
using umap::faultinject::FsOp;
using umap::faultinject::Op;

// Lives until the process ends (the runtime holds a pointer to it; the worker is killed or
// exits without destroying it first).
FaultEnv* g_env = nullptr;
std::shared_ptr<FaultFs> g_fs;
std::string g_file_name;
RuntimeSpec g_spec;

// The journal's fault rules (RocksDB calls them from its own threads as well): 1 in n WAL
// appends and syncs, and file creations (a reopen's WAL, flush and compaction tables), fail
// with IOError (eio) or NoSpace (enospc, sticky on request). An eio sync also loses its
// bytes (the pages are marked clean): a later power cut of the journal zeroes them.
absl::Status ArmJournal(const RuntimeSpec& spec) {
  if (spec.journal_fault == "none") return absl::OkStatus();
  if (spec.journal_fault != "eio" && spec.journal_fault != "enospc") {
    return absl::InvalidArgumentError("unknown journal fault '" + spec.journal_fault + "'");
  }
  const uint32_t n = static_cast<uint32_t>(spec.journal_one_in);
  const uint64_t seed = spec.fault_seed ^ 0x6a6f75726e616cull;  // "journal"
  const bool eio = spec.journal_fault == "eio";
  for (FsOp op : {FsOp::kAppend, FsOp::kSync, FsOp::kNewWritableFile}) {
    FsFault f = eio ? FsFault::IOError() : FsFault::NoSpace();
    if (eio && op == FsOp::kSync) f = std::move(f).LosesData();
    if (spec.journal_sticky) f = std::move(f).Sticky();
    if (spec.journal_wal_only) f = std::move(f).OnlyFor(umap::faultinject::FileClass::kWal);
    // Per-op generators (eio's file creations keep the offset the measured runs used).
    const uint64_t op_seed =
        seed + (eio && op == FsOp::kNewWritableFile ? 7 : static_cast<int>(op));
    absl::Status s = g_fs->FailOneIn(op, n, op_seed, std::move(f));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

umap_runtime* CreateRuntime(const RuntimeSpec& spec, std::string* error) {
  FaultEnv::Options fo;
  fo.seed = spec.fault_seed;
  g_env = new FaultEnv(umap::Env::Default(), fo);
  g_file_name = spec.file_name;
  absl::Status armed = absl::OkStatus();
  if (spec.fault == "eio") {
    armed = g_env->FailOneIn(Op::kWrite, spec.fault_one_in, spec.fault_seed,
                             Fault::Error(EIO).OnlyFor(spec.file_name));
    if (armed.ok()) {
      // fsync that fails after "marking the pages clean": the bytes never become durable.
      armed = g_env->FailOneIn(Op::kSync, spec.fault_one_in, spec.fault_seed + 1,
                               Fault::SyncLosesData(EIO).OnlyFor(spec.file_name));
    }
    if (armed.ok()) {
      // A read interrupted by a signal after part of it arrived (NFS intr, FUSE): retried.
      armed = g_env->FailOneIn(Op::kRead, spec.fault_one_in, spec.fault_seed + 2,
                               Fault::ShortRead(EINTR).OnlyFor(spec.file_name));
    }
  } else if (spec.fault == "torn") {
    armed = g_env->FailOneIn(Op::kWrite, spec.fault_one_in, spec.fault_seed,
                             Fault::TornWrite(EIO).OnlyFor(spec.file_name));
  }
  if (!armed.ok()) {
    *error = "arming " + spec.fault + ": " + armed.ToString();
    return nullptr;
  }
  // Always there, so every run takes the same journal code path; unarmed it only forwards
  // and tracks what is unsynced (PowerCutJournal).
  g_fs = std::make_shared<FaultFs>(rocksdb::FileSystem::Default());
  g_spec = spec;
  if (spec.journal_fault_at_open && !ArmJournalFaults(error)) return nullptr;
  umap::runtime::RuntimeOptions o;
  o.cache_bytes = spec.cache_bytes;
  o.block_size = spec.block_size;
  o.journal_dir = spec.journal_dir;
  o.policy = spec.relaxed ? UMAP_POLICY_RELAXED : UMAP_POLICY_ATOMIC;
  o.defer_file_sync = spec.defer_file_sync;
  if (spec.umsync_chunk_bytes != 0) o.umsync_chunk_bytes = spec.umsync_chunk_bytes;
  o.env = g_env;
  o.journal_fs = g_fs;
  auto rt = umap::runtime::Runtime::Create(o);
  if (!rt.ok()) {
    *error = "Runtime::Create: " + rt.status().ToString();
    return nullptr;
  }
  umap_runtime* r = umap::c_api::TEST_AdoptRuntime(*std::move(rt));
  if (r == nullptr) *error = "TEST_AdoptRuntime failed";
  return r;
}

bool ArmSyncStall(uint64_t ms, bool timeout_error, std::string* error) {
  absl::Status s = g_env->FailNext(
      Op::kSync, 1,
      Fault::Stall(absl::Milliseconds(static_cast<int64_t>(ms)), timeout_error ? ETIMEDOUT : 0)
          .OnlyFor(g_file_name));
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

void PowerCutDataFile(uint64_t seed) {
  g_env->SimulatePowerCut();
  absl::Status s = g_env->DropUnsyncedData(DropOptions::Tear(seed));
  if (!s.ok())
    std::fprintf(stderr, "umap-chaos-worker: DropUnsyncedData: %s\n", s.ToString().c_str());
}

void DieInStall(uint64_t seed, bool power_cut) {
  std::thread([seed, power_cut] {
    while (!g_env->WaitForStalled(1, absl::Hours(1))) {
    }
    g_fs->SimulatePowerCut();  // freeze only: the journal's disk keeps what it has
    if (power_cut) PowerCutDataFile(seed);
    std::raise(SIGKILL);
  }).detach();
}

void PowerCutJournal(uint64_t seed, bool garble) {
  g_fs->SimulatePowerCut();
  absl::Status s = g_fs->DropUnsyncedData(FsDropOptions::Tear(seed, garble));
  if (!s.ok()) {
    std::fprintf(stderr, "umap-chaos-worker: journal DropUnsyncedData: %s\n", s.ToString().c_str());
  }
}

bool ArmJournalFaults(std::string* error) {
  absl::Status s = ArmJournal(g_spec);
  if (!s.ok()) *error = "arming journal fault " + g_spec.journal_fault + ": " + s.ToString();
  return s.ok();
}

void HealJournal() { g_fs->ClearAll(); }

uint64_t DataFaultsFired() {
  uint64_t n = 0;
  for (int k = 0; k < umap::faultinject::kNumFaultKinds; ++k) {
    if (static_cast<umap::faultinject::FaultKind>(k) == umap::faultinject::FaultKind::kPowerCut)
      continue;
    n += g_env->fired(static_cast<umap::faultinject::FaultKind>(k));
  }
  return n;
}

uint64_t JournalBytesZeroed() { return g_fs->counters().bytes_zeroed; }

uint64_t JournalFaultsFired() {
  uint64_t n = 0;
  for (uint64_t f : g_fs->counters().fired) n += f;
  return n;
}

}  // namespace chaos_worker
