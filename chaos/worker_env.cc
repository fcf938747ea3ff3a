#include "chaos/worker_env.h"

#include <cerrno>
#include <cstdio>
#include <memory>

#include "absl/time/time.h"
#include "faultinject/fault_env.h"
#include "runtime/options.h"
#include "runtime/runtime.h"
#include "runtime/umap_c_internal.h"

namespace chaos_worker {
namespace {

using umap::faultinject::DropOptions;
using umap::faultinject::Fault;
using umap::faultinject::FaultEnv;
using umap::faultinject::Op;

// Lives until the process ends (the runtime holds a pointer to it; the worker is killed or
// exits without destroying it first).
FaultEnv* g_env = nullptr;
std::string g_file_name;

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
  } else if (spec.fault == "torn") {
    armed = g_env->FailOneIn(Op::kWrite, spec.fault_one_in, spec.fault_seed,
                             Fault::TornWrite(EIO).OnlyFor(spec.file_name));
  }
  if (!armed.ok()) {
    *error = "arming " + spec.fault + ": " + armed.ToString();
    return nullptr;
  }
  umap::runtime::RuntimeOptions o;
  o.cache_bytes = spec.cache_bytes;
  o.block_size = spec.block_size;
  o.journal_dir = spec.journal_dir;
  o.policy = spec.relaxed ? UMAP_POLICY_RELAXED : UMAP_POLICY_ATOMIC;
  o.env = g_env;
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
  if (!s.ok()) std::fprintf(stderr, "umap-chaos-worker: DropUnsyncedData: %s\n", s.ToString().c_str());
}

}  // namespace chaos_worker
