// Runs a real process for the kill and CLI tests: argv, extra environment, captured stdout
// and stderr, and how it ended (exit code or signal). No namespace umap, so C API test
// helpers can use it too.
#ifndef UMAP_TESTS_RECOVERY_SUBPROCESS_H_
#define UMAP_TESTS_RECOVERY_SUBPROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace recoverytest {

struct ProcResult {
  int exit_code = -1;  // when exited
  int signal = 0;      // when killed by a signal
  std::string out, err;
  bool exited() const { return signal == 0 && exit_code >= 0; }
};

inline std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Starts argv[0] with `env` ("NAME=value") added to this process's environment; stdout and
// stderr go to files under `scratch`. Returns the pid (or -1).
inline pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                   const std::string& out_path, const std::string& err_path) {
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    // The chaos harness's variable must never leak into a child that did not ask for it.
    if (std::string(*e).rfind("UMAP_CRASH_AT=", 0) == 0) continue;
    envs.emplace_back(*e);
  }
  for (const std::string& e : env) envs.push_back(e);
  std::vector<char*> a, e;
  for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (const std::string& s : envs) e.push_back(const_cast<char*>(s.c_str()));
  e.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  if (posix_spawn(&pid, a[0], &fa, nullptr, a.data(), e.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

inline ProcResult Wait(pid_t pid, const std::string& out_path, const std::string& err_path) {
  ProcResult r;
  int st = 0;
  if (pid > 0 && ::waitpid(pid, &st, 0) == pid) {
    if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
    if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  }
  r.out = Slurp(out_path);
  r.err = Slurp(err_path);
  return r;
}

inline ProcResult Run(const std::vector<std::string>& argv, const std::string& scratch,
                      const std::vector<std::string>& env = {}) {
  const std::string out = scratch + "/stdout", err = scratch + "/stderr";
  return Wait(Spawn(argv, env, out, err), out, err);
}

}  // namespace recoverytest

#endif  // UMAP_TESTS_RECOVERY_SUBPROCESS_H_
