// Rendering of a recovery::Report for umap-recover: human-readable lines (docs/operations.md
// explains each) and the --json document (schema in docs/recovery.md).
#ifndef UMAP_TOOLS_RENDER_H_
#define UMAP_TOOLS_RENDER_H_

#include <string>

#include "absl/status/status.h"
#include "recovery/recovery.h"

namespace umap::tools {

enum class Command { kReplay, kDryRun, kVerify, kStatus };
absl::string_view CommandName(Command c);

// The process exit code for a finished run. `status` subcommand: 0 whenever the journal
// could be read (pending work is a field of the report), else as for the others.
int ExitCodeFor(Command c, const recovery::Report& report);
int ExitCodeFor(Command c, const absl::Status& error);

// One line saying what the exit code means for this command.
std::string ExitMeaning(Command c, int code, const recovery::Report* report);

std::string RenderText(Command c, const recovery::Report& report, int code);
std::string RenderJson(Command c, const recovery::Report& report, int code);
// A run that produced no report (journal refused or unreadable).
std::string RenderErrorText(Command c, const std::string& journal, const absl::Status& error,
                            int code);
std::string RenderErrorJson(Command c, const std::string& journal, const absl::Status& error,
                            int code);

// "1.5 GiB", "12.0 KiB", "512 B".
std::string HumanBytes(uint64_t n);

}  // namespace umap::tools

#endif  // UMAP_TOOLS_RENDER_H_
