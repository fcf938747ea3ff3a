// One run as one flat JSON object (a line of --json output), and back: umap-bench's cgroup
// children hand their results to the parent this way. Only our own output is parsed back (no
// nesting, no escapes in numbers).
#ifndef UMAP_BENCH_RUN_JSON_H_
#define UMAP_BENCH_RUN_JSON_H_

#include <string>

#include "bench/bench_file.h"
#include "bench/run_result.h"
#include "bench/workload.h"

namespace umap_bench {

// Every field of r plus the run's context (no newline).
std::string ToJson(const RunResult& r, const Workload& w, const RunConfig& rc,
                   const BenchFile& file, const std::string& label);

// The RunResult fields the report uses, from a ToJson line.
RunResult ResultFromJson(const std::string& line);

}  // namespace umap_bench

#endif  // UMAP_BENCH_RUN_JSON_H_
