// Capabilities of the machine a fault class needs (root, loop devices, FUSE, ...), asked of
// faultinject/probe-capability: the one script that decides whether a test may skip, and
// that CI asks again (.ci/check-skips) to tell a genuine skip from a broken machine.
#ifndef UMAP_CHAOS_CAPABILITY_H_
#define UMAP_CHAOS_CAPABILITY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

#ifndef UMAP_PROBE_CAPABILITY
#define UMAP_PROBE_CAPABILITY "probe-capability"
#endif

namespace chaos {

// OK when every capability is present. When one is missing: a status that
// IsMissingCapability() recognises, whose message is the probe's line "umap-skip: missing
// CAP: WHY". Any other error (the probe did not run, or answered something else) is a
// failure of the harness, not a skip. `log` receives the probe's stderr.
absl::Status RequireCapabilities(const std::string& probe,
                                 const std::vector<std::string>& capabilities,
                                 const std::string& log);

// A status saying that the machine lacks a capability; `line` is the probe's skip line.
absl::Status MissingCapability(const std::string& line);
bool IsMissingCapability(const absl::Status& status);

}  // namespace chaos

#endif  // UMAP_CHAOS_CAPABILITY_H_
