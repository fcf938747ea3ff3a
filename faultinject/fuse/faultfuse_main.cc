// umap-faultfuse: a FUSE file system that passes through to a backing directory and
// breaks requests on command (stalls, errors, short and torn I/O, ignored fsyncs), so that
// tests drive the runtime's real descriptors (io_uring, O_DIRECT, the faulting thread's
// pread) into the failures a DFS client gives. Test-only; docs/testing.md, "The FUSE fault
// file system", has the how and why. The test-side handle is faultinject/fuse/fault_fuse.h.
//
//   umap-faultfuse --backing DIR --mount DIR --control SOCKET
//                  [--direct-io odirect|all|none] [--no-async-dio] [--max-background N]
//                  [--allow-other]
//
// Prints "ready" on stdout once mounted and listening, then closes stdout. Stops at
// SIGTERM/SIGINT or when the mount goes away (umount, connection abort); held requests
// then fail with EIO. Exit: 0 clean stop, 1 set-up failure (the reason on stderr), 2 usage.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "faultinject/fuse/control_server.h"
#include "faultinject/fuse/fault_fuse_fs.h"

namespace {

using umap::faultfuse::ControlServer;
using umap::faultfuse::DirectIo;
using umap::faultfuse::FaultFuseFs;

struct Flags {
  std::string backing, mount, control, direct_io = "odirect";
  bool no_async_dio = false;
  unsigned max_background = 64;
  bool allow_other = false;
};

int Run(const Flags& flags) {
  const int backing = ::open(flags.backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (backing < 0) {
    std::perror(("umap-faultfuse: open " + flags.backing).c_str());
    return 1;
  }
  const DirectIo direct = flags.direct_io == "all"    ? DirectIo::kAll
                          : flags.direct_io == "none" ? DirectIo::kNone
                                                      : DirectIo::kODirect;
  FaultFuseFs fs(backing, direct, !flags.no_async_dio, flags.max_background);
  // allow_other lets tests run the runtime as an ordinary user on a mount that root made;
  // default_permissions then makes the kernel check file modes as on any file system.
  std::string opts = "fsname=umap-faultfuse,subtype=umapfault";
  if (flags.allow_other) opts += ",allow_other,default_permissions";
  std::vector<std::string> argv_s = {"umap-faultfuse", "-o", opts};
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  fuse_session* se = fuse_session_new(&args, &FaultFuseFs::Ops(), sizeof(fuse_lowlevel_ops), &fs);
  if (se == nullptr) {
    std::fprintf(stderr, "umap-faultfuse: fuse_session_new failed\n");
    return 1;
  }
  int rc = 1;
  if (fuse_set_signal_handlers(se) != 0) {
    std::fprintf(stderr, "umap-faultfuse: fuse_set_signal_handlers failed\n");
  } else if (fuse_session_mount(se, flags.mount.c_str()) != 0) {
    std::fprintf(stderr, "umap-faultfuse: mounting %s failed\n", flags.mount.c_str());
  } else {
    ControlServer control(&fs.book(), &fs.stalls());
    if (absl::Status s = control.Listen(flags.control); !s.ok()) {
      std::fprintf(stderr, "umap-faultfuse: %s\n", std::string(s.message()).c_str());
    } else {
      std::printf("ready\n");
      std::fflush(stdout);
      // Nobody reads stdout after "ready": do not let a later write block or fail.
      const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      if (null >= 0) {
        ::dup2(null, STDOUT_FILENO);
        ::close(null);
      }
      fuse_loop_config* cfg = fuse_loop_cfg_create();
      // Handlers never block on a stall (held requests are answered later), so a few
      // threads serve any number of requests in flight.
      fuse_loop_cfg_set_max_threads(cfg, 16);
      fuse_loop_cfg_set_idle_threads(cfg, 4);
      rc = fuse_session_loop_mt(se, cfg) == 0 ? 0 : 1;
      fuse_loop_cfg_destroy(cfg);
      // Every held request is answered before the session goes.
      fs.stalls().Stop();
    }
    fuse_session_unmount(se);
  }
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  fuse_opt_free_args(&args);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"umap-faultfuse: a pass-through FUSE file system that injects faults on command"};
  app.add_option("--backing", flags.backing, "directory whose files the mount shows")->required();
  app.add_option("--mount", flags.mount, "mount point (an empty directory)")->required();
  app.add_option("--control", flags.control, "Unix socket for the test's commands")->required();
  app.add_option("--direct-io", flags.direct_io,
                 "FOPEN_DIRECT_IO for O_DIRECT opens (odirect), every open (all) or none")
      ->check(CLI::IsMember({"odirect", "all", "none"}));
  app.add_flag("--no-async-dio", flags.no_async_dio,
               "do not offer FUSE_CAP_ASYNC_DIO (the kernel then waits for each direct request "
               "in the submitting thread)");
  app.add_option("--max-background", flags.max_background,
                 "asynchronous requests the kernel keeps outstanding before it blocks the next "
                 "submitter (default 64, as GlusterFS's background-qlen; 0: the kernel's 12)");
  app.add_flag("--allow-other", flags.allow_other, "let other users use the mount (root only)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return Run(flags);
}
