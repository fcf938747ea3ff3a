// WriteRefusals: says why a write into a read-only part of a Umap mapping raised SIGSEGV.
//
// A read-only mapping (coherence read-only) and the parts of a partitioned-write mapping
// outside its declared write ranges are mapped without PROT_WRITE, so the kernel refuses a
// store there with SIGSEGV before any Umap code runs: nothing is written, nothing is cached
// dirty, nothing can reach the file. A SIGSEGV handler (installed with the first registered
// range, chaining to the disposition it replaced) logs one line naming the file, the file
// offset and the reason, then hands the signal on: by default the process dies of SIGSEGV,
// as it would without Umap. A program that installs its own SIGSEGV handler afterwards gets
// the signal without that line.
//
// Thread safety: Register and Unregister from any thread; the handler reads the table
// without locks (a range being removed may still be reported once with its old reason).
#ifndef UMAP_RUNTIME_WRITEBACK_WRITE_REFUSALS_H_
#define UMAP_RUNTIME_WRITEBACK_WRITE_REFUSALS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace umap::runtime {

class WriteRefusals {
 public:
  enum class Reason {
    kReadOnly,       // the mapping's coherence is read-only
    kOutsideRanges,  // partitioned-write: outside the ranges it declared (and locked)
  };
  // Registers [start, start+length), whose first byte is at `file_offset` of `file`. Returns
  // a handle for Unregister. Errors: ENOMEM when every slot is taken (the write still
  // raises SIGSEGV, without the line), sigaction's errno.
  static absl::StatusOr<int> Register(const char* start, size_t length, uint64_t file_offset,
                                      const std::string& file, Reason reason);
  static void Unregister(int handle);
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_WRITEBACK_WRITE_REFUSALS_H_
