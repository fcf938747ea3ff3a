// ChildProcess: a program started by a preload test with a given environment, its stdin
// and stdout on pipes (so a test can wait for "ready" and then inspect /proc/PID), its
// stderr in a file. No namespace umap, so tests of the C API can use it as well.
#ifndef UMAP_TESTS_PRELOAD_CHILD_PROCESS_H_
#define UMAP_TESTS_PRELOAD_CHILD_PROCESS_H_

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace preloadtest {

struct Exit {
  int code = -1;   // exit status when it exited
  int signal = 0;  // signal when killed
  std::string err;
};

class ChildProcess {
 public:
  // Starts argv with this process's environment plus `env` ("NAME=value"; a later entry
  // wins) and minus any variable named in `unset`.
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const std::string& err_path, const std::vector<std::string>& unset = {})
      : err_path_(err_path) {
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string s(*e);
      bool drop = s.rfind("LD_PRELOAD=", 0) == 0 || s.rfind("UMAP_", 0) == 0;
      for (const std::string& u : unset) drop |= s.rfind(u + "=", 0) == 0;
      if (!drop) envs.push_back(s);
    }
    for (const std::string& e : env) {
      const std::string name = e.substr(0, e.find('=') + 1);
      std::erase_if(envs, [&](const std::string& s) { return s.rfind(name, 0) == 0; });
      envs.push_back(e);
    }
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return;
    std::vector<char*> a, e;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (const std::string& s : envs) e.push_back(const_cast<char*>(s.c_str()));
    e.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (posix_spawnp(&pid_, a[0], &fa, nullptr, a.data(), e.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~ChildProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stdin_ >= 0) ::close(stdin_);
    if (stdout_ >= 0) ::close(stdout_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Reads stdout up to and including the next newline; "" on EOF or after `timeout`.
  std::string ReadLine(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const size_t nl = pending_.find('\n');
      if (nl != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p = {stdout_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(stdout_, buf, sizeof(buf));
      if (n <= 0) return "";
      pending_.append(buf, static_cast<size_t>(n));
    }
  }
  bool WriteLine(const std::string& line) {
    const std::string l = line + "\n";
    return ::write(stdin_, l.data(), l.size()) == static_cast<ssize_t>(l.size());
  }
  void CloseStdin() {
    ::close(stdin_);
    stdin_ = -1;
  }

  Exit Wait() {
    Exit x;
    int st = 0;
    if (pid_ > 0 && ::waitpid(pid_, &st, 0) == pid_) {
      reaped_ = true;
      if (WIFEXITED(st)) x.code = WEXITSTATUS(st);
      if (WIFSIGNALED(st)) x.signal = WTERMSIG(st);
    }
    std::ifstream f(err_path_);
    std::stringstream ss;
    ss << f.rdbuf();
    x.err = ss.str();
    return x;
  }

 private:
  const std::string err_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int stdin_ = -1, stdout_ = -1;
  std::string pending_;
};

// The lines of /proc/PID/maps that name `path`.
inline int MapsLinesNaming(pid_t pid, const std::string& path) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    if (line.size() >= path.size() &&
        line.compare(line.size() - path.size(), path.size(), path) == 0) {
      ++n;
    }
  }
  return n;
}

// True when process `pid` holds a userfaultfd descriptor.
inline bool HoldsUserfaultfd(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) {
    char target[256];
    const ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
    if (n > 0 && std::string(target, static_cast<size_t>(n)) == "anon_inode:[userfaultfd]") {
      found = true;
    }
  }
  ::closedir(d);
  return found;
}

}  // namespace preloadtest

#endif  // UMAP_TESTS_PRELOAD_CHILD_PROCESS_H_
