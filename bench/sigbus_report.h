// A SIGBUS in a benchmark run (an I/O error, a page past end of file, or no cache block)
// prints the address, its file offset in the current mapping and the run, then exits 3.
// Arm() and Disarm() are called by the thread that runs the run, around its timed region.
#ifndef UMAP_BENCH_SIGBUS_REPORT_H_
#define UMAP_BENCH_SIGBUS_REPORT_H_

#include <cstddef>
#include <string>

namespace umap_bench {

class SigbusReport {
 public:
  // Installs the process's SIGBUS handler (once) and names the run and its mapping (base
  // may be nullptr when nothing is mapped).
  static void Arm(const char* base, size_t len, const std::string& what);
  // The mapping is gone: later SIGBUS reports give no file offset.
  static void Disarm();
};

}  // namespace umap_bench

#endif  // UMAP_BENCH_SIGBUS_REPORT_H_
