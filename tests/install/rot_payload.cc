// rot_payload JOURNAL_DIR SEED: flips one bit of one committed block image in a closed
// journal, below Umap's CRCs (chaos/journal_rot.h), and prints what it changed. Exit 1 when
// the journal holds no payload, 2 on an error. For release_ignores_switches.sh.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "chaos/journal_rot.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s JOURNAL_DIR SEED\n", argv[0]);
    return 2;
  }
  absl::StatusOr<std::string> what =
      chaos::RotOnePayload(argv[1], std::strtoull(argv[2], nullptr, 10));
  if (!what.ok()) {
    std::fprintf(stderr, "rot_payload: %s\n", what.status().ToString().c_str());
    return 2;
  }
  if (what->empty()) {
    std::fprintf(stderr, "rot_payload: %s holds no block image\n", argv[1]);
    return 1;
  }
  std::printf("%s\n", what->c_str());
  return 0;
}
