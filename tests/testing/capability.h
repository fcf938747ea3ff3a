// Skipping a test because the machine lacks what it needs, the one way tests may skip:
//
//   TEST(LoopDeviceTest, ...) {
//     UMAP_SKIP_WITHOUT("root", "loop-device");
//     ...
//   }
//
// asks faultinject/probe-capability (the capability names are listed there) and, when one
// is missing, skips with the probe's line "umap-skip: missing CAP: WHY" as the message.
// ctest reports the test as skipped (cmake/UmapHelpers.cmake), and CI probes CAP again
// (.ci/check-skips): a skip on a machine that has CAP fails CI. A probe that cannot run
// fails the test. Use it in a TEST body (it returns from the function).
#ifndef UMAP_TESTS_TESTING_CAPABILITY_H_
#define UMAP_TESTS_TESTING_CAPABILITY_H_

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <initializer_list>
#include <string>

#ifndef UMAP_PROBE_CAPABILITY
#error "UMAP_PROBE_CAPABILITY: link umap_testing (tests/CMakeLists.txt) to get the probe's path"
#endif

namespace umap::testing {

struct ProbeResult {
  std::string missing;  // the probe's skip line; empty when everything is present
  std::string error;    // the probe did not answer as documented
};

inline ProbeResult ProbeCapabilities(std::initializer_list<const char*> capabilities) {
  std::string cmd = UMAP_PROBE_CAPABILITY;
  for (const char* c : capabilities) cmd += std::string(" '") + c + "'";
  ProbeResult r;
  FILE* out = ::popen(cmd.c_str(), "r");
  if (out == nullptr) {
    r.error = "cannot run " + cmd;
    return r;
  }
  std::string line;
  char buf[512];
  while (std::fgets(buf, sizeof buf, out) != nullptr) line += buf;
  const int status = ::pclose(out);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 0) return r;
  if (code == 1 && line.rfind("umap-skip: missing ", 0) == 0) {
    r.missing = line;
  } else {
    r.error = cmd + " exited " + std::to_string(code) + ": '" + line + "'";
  }
  return r;
}

}  // namespace umap::testing

#define UMAP_SKIP_WITHOUT(...)                                               \
  do {                                                                       \
    const ::umap::testing::ProbeResult umap_probe_ =                         \
        ::umap::testing::ProbeCapabilities({__VA_ARGS__});                   \
    if (!umap_probe_.error.empty()) FAIL() << umap_probe_.error;             \
    if (!umap_probe_.missing.empty()) GTEST_SKIP() << umap_probe_.missing;   \
  } while (0)

#endif  // UMAP_TESTS_TESTING_CAPABILITY_H_
