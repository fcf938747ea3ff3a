// The in-process storage faults that the eio and torn classes share: the worker's FaultEnv
// breaks its data file, its FaultFs the journal's storage, and the worker dies after a
// drawn round, with or without a power cut of either (chaos/worker_env.h).
#ifndef UMAP_CHAOS_FAULTS_IN_PROCESS_H_
#define UMAP_CHAOS_FAULTS_IN_PROCESS_H_

#include "chaos/epoch.h"
#include "chaos/system.h"
#include "chaos/worker.h"

namespace chaos {

// Which storage an epoch's in-process faults break.
enum class FaultySide { kData = 0, kJournal = 1, kBoth = 2 };

// Draws and arms the faults of class `cls` ("eio" or "torn") for epoch e: worker flags, the
// description and the fault-draw rows ("<cls>/<side>", "<cls>/power cut: <which>").
// replayable: the journal's faults hit its WAL only (the tables RocksDB writes from its
// background threads would draw in the order of the clock). Returns the side drawn.
FaultySide ArmInProcessFaults(const char* cls, Epoch& e, bool replayable);

// Whether the armed faults fired: a umsync failed, an injected fault fired, or the worker
// died of something other than the driver's SIGKILL.
bool InProcessFaultsFired(const Worker& worker, const Exit& exit);

}  // namespace chaos

#endif  // UMAP_CHAOS_FAULTS_IN_PROCESS_H_
