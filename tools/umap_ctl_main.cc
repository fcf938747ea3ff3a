// umap-ctl: quiesces and resumes running Umap programs through their checkpoint control
// socket (runtime/control/checkpoint_control.h), by hand or as criu's --action-script. A thin main()
// over checkpoint_client; docs/operations.md "Checkpoint a job with CRIU".
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "tools/checkpoint_client.h"

namespace umap::tools {
namespace {

// clang-format off
constexpr char kFooter[] = R"doc(As criu's action script (it reads CRTOOLS_SCRIPT_ACTION and CRTOOLS_INIT_PID):
  criu dump -t PID ... --action-script "$(command -v umap-ctl)"
  criu restore ...     --action-script "$(command -v umap-ctl)"
pre-dump quiesces every Umap process of the dumped tree (and resumes them by itself if
they are still alive when criu exits: a failed dump, --leave-running); post-resume resumes
the restored tree. UMAP_CTL_TIMEOUT (seconds) bounds each request there.
The programs must run with UMAP_CHECKPOINT=1.
Exit codes:
  0  every process answered ok
  1  a process refused or failed (the message says why: a write-back error, ESTALE for a
     stale restore whose runtime is now fenced, EBUSY for a journal held elsewhere)
  2  usage error
  3  a process serves no Umap control socket (not Umap's, or no UMAP_CHECKPOINT=1))doc";
// clang-format on

int Main(int argc, char** argv) {
  int timeout_s = 600;
  if (const char* t = std::getenv("UMAP_CTL_TIMEOUT")) timeout_s = std::atoi(t);
  // Run by criu as the action script: no arguments, the action in the environment.
  if (argc == 1 && std::getenv("CRTOOLS_SCRIPT_ACTION") != nullptr) return CriuHook(timeout_s);

  CLI::App app{"Quiesce and resume Umap programs around a CRIU checkpoint", "umap-ctl"};
  app.footer(kFooter);
  app.require_subcommand(1);
  std::vector<int> pids;
  bool tree = false;
  std::string command;
  for (const char* name : {"quiesce", "resume", "state"}) {
    CLI::App* sub = app.add_subcommand(
        name, std::string(name) == "quiesce"
                  ? "write back everything and close what CRIU cannot dump"
              : std::string(name) == "resume" ? "check the journal and files, re-create, run on"
                                              : "print each process's state");
    sub->add_option("pid", pids, "process ids")->required();
    sub->add_flag("--tree", tree, "also every descendant of each pid");
    sub->add_option("--timeout", timeout_s, "seconds to wait for each answer");
    sub->callback([&command, name] { command = name; });
  }
  app.add_subcommand("criu-hook", "run as criu --action-script (same as no arguments)")
      ->callback([&command] { command = "criu-hook"; });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (command == "criu-hook") return CriuHook(timeout_s);
  return Control(std::vector<pid_t>(pids.begin(), pids.end()), command, tree, timeout_s).exit_code;
}

}  // namespace
}  // namespace umap::tools

int main(int argc, char** argv) {
  try {
    return umap::tools::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "umap-ctl: %s\n", e.what());
    return 2;
  }
}
