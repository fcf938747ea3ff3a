#include "chaos/lanes.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "chaos/system.h"

namespace chaos {
namespace {

using Clock = std::chrono::steady_clock;

// Fields are separated by tabs, records by newlines: both escaped inside a field.
std::string Escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch == '\n') {
      out += "\\n";
    } else {
      out += ch;
    }
  }
  return out;
}

std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char next = s[++i];
    out += next == 't' ? '\t' : next == 'n' ? '\n' : next;
  }
  return out;
}

// The command line of lane `lane`: every option of the run, minus --jobs and --report
// (the parent merges and reports), plus the lane's work dir and report file.
std::vector<std::string> LaneArgs(const Config& c, int lane, const std::string& work_dir,
                                  const std::string& report) {
  std::vector<std::string> a = {c.self,
                                "--seed",
                                absl::StrCat(c.seed),
                                "--faults",
                                c.faults_arg,
                                "--dfs",
                                c.dfs,
                                "--duration",
                                c.duration,
                                "--iterations",
                                absl::StrCat(c.iterations),
                                "--work-dir",
                                work_dir,
                                "--worker",
                                c.worker,
                                "--recover",
                                c.recover,
                                "--gluster-testbed",
                                c.testbed,
                                "--probe-capability",
                                c.probe,
                                "--lane",
                                absl::StrCat(lane, "/", c.jobs),
                                "--lane-report",
                                report};
  if (!c.mutation.empty()) a.insert(a.end(), {"--mutation", c.mutation});
  if (c.defer_file_sync_one_in != 0) {
    a.insert(a.end(), {"--defer-file-sync-one-in", absl::StrCat(c.defer_file_sync_one_in)});
  }
  if (c.expect_violation) a.push_back("--expect-violation");
  if (c.keep) a.push_back("--keep");
  if (c.keep_crash) a.push_back("--keep-crash-state");
  if (c.verbose) a.push_back("--verbose");
  if (c.replayable) a.push_back("--replayable");
  return a;
}

// fork + exec with stdout and stderr inherited: the lanes' iteration lines go straight to
// the run's output (each one printf + fflush, so lines do not interleave).
absl::StatusOr<pid_t> StartLane(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (std::string& s : copy) args.push_back(s.data());
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork for a lane: ", strerror(errno)));
  if (pid == 0) {
    ::execv(args[0], args.data());
    std::fprintf(stderr, "umap-chaos: exec %s: %s\n", args[0], strerror(errno));
    ::_exit(127);
  }
  return pid;
}

// A record that stands for a lane that failed as a whole.
IterationRecord LaneFailure(int lane, const std::string& why) {
  IterationRecord rec;
  rec.index = -1;
  rec.cls = absl::StrCat("(lane ", lane, ")");
  rec.Violate("harness", why);
  return rec;
}

// Waits for every lane; past `deadline` (if set) the ones still running are killed.
std::vector<int> WaitForLanes(const std::vector<pid_t>& pids,
                              std::optional<Clock::time_point> deadline) {
  std::vector<int> status(pids.size(), 0);
  std::vector<bool> done(pids.size(), false);
  size_t left = pids.size();
  bool killed = false;
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      const pid_t r = ::waitpid(pids[i], &status[i], WNOHANG);
      if (r == pids[i] || (r < 0 && errno == ECHILD)) {
        done[i] = true;
        --left;
      }
    }
    if (left > 0 && deadline && !killed && Clock::now() > *deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (!done[i]) ::kill(pids[i], SIGKILL);
      }
      killed = true;
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return status;
}

}  // namespace

std::string SerializeOutcome(const RunOutcome& o) {
  std::string out =
      absl::StrCat("exit ", o.exit_code, "\nseconds ", static_cast<int64_t>(o.seconds * 1e6), "\n");
  for (absl::string_view line : absl::StrSplit(o.tally.Serialize(), '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, "tally ", line, "\n");
  }
  for (const IterationRecord& r : o.records) {
    absl::StrAppend(&out, "record ", r.index, "\t", static_cast<int64_t>(r.seconds * 1e6), "\t",
                    r.skipped ? 1 : 0, "\t", r.epochs_run, "\t", Escape(r.cls), "\t",
                    Escape(r.policy), "\t", Escape(r.variant), "\t", Escape(r.what), "\t",
                    Escape(r.skip_reason), "\t", Escape(r.dir), "\n");
    for (const Violation& v : r.violations) {
      absl::StrAppend(&out, "violation ", r.index, "\t", Escape(v.invariant), "\t",
                      Escape(v.detail), "\n");
    }
  }
  return out;
}

absl::StatusOr<RunOutcome> ParseOutcome(const std::string& text) {
  RunOutcome o;
  std::string tally;
  auto bad = [](absl::string_view line) {
    return absl::DataLossError(absl::StrCat("lane report: unreadable line '", line, "'"));
  };
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t sp = line.find(' ');
    if (sp == absl::string_view::npos) return bad(line);
    const absl::string_view kind = line.substr(0, sp), rest = line.substr(sp + 1);
    int64_t n = 0;
    if (kind == "exit" && absl::SimpleAtoi(rest, &n)) {
      o.exit_code = static_cast<int>(n);
    } else if (kind == "seconds" && absl::SimpleAtoi(rest, &n)) {
      o.seconds = n / 1e6;
    } else if (kind == "tally") {
      absl::StrAppend(&tally, rest, "\n");
    } else if (kind == "record") {
      const std::vector<absl::string_view> f = absl::StrSplit(rest, '\t');
      IterationRecord r;
      int64_t us = 0, skipped = 0, epochs = 0;
      if (f.size() != 10 || !absl::SimpleAtoi(f[0], &r.index) || !absl::SimpleAtoi(f[1], &us) ||
          !absl::SimpleAtoi(f[2], &skipped) || !absl::SimpleAtoi(f[3], &epochs)) {
        return bad(line);
      }
      r.seconds = us / 1e6, r.skipped = skipped != 0, r.epochs_run = static_cast<int>(epochs);
      r.cls = Unescape(f[4]), r.policy = Unescape(f[5]), r.variant = Unescape(f[6]);
      r.what = Unescape(f[7]), r.skip_reason = Unescape(f[8]), r.dir = Unescape(f[9]);
      o.records.push_back(std::move(r));
    } else if (kind == "violation") {
      const std::vector<absl::string_view> f = absl::StrSplit(rest, '\t');
      int index = 0;
      if (f.size() != 3 || !absl::SimpleAtoi(f[0], &index) || o.records.empty() ||
          o.records.back().index != index) {
        return bad(line);
      }
      o.records.back().Violate(Unescape(f[1]), Unescape(f[2]));
    } else {
      return bad(line);
    }
  }
  absl::StatusOr<Tally> t = Tally::Parse(tally);
  if (!t.ok()) return t.status();
  o.tally = *std::move(t);
  return o;
}

int RunLaneProcess(const Config& c, uint64_t budget) {
  RunOutcome o = RunLane(c, budget);
  if (absl::Status s = WriteWholeFile(c.lane_report, SerializeOutcome(o), /*sync=*/false);
      !s.ok()) {
    std::printf("FAIL: lane %d/%d: writing its report: %s\n", c.lane, c.lanes,
                s.ToString().c_str());
    return 3;
  }
  const bool violated = std::any_of(o.records.begin(), o.records.end(),
                                    [](const IterationRecord& r) { return !r.violations.empty(); });
  if (!violated && !c.keep) RemoveTree(c.work_dir).IgnoreError();
  return o.exit_code < 0 ? 0 : o.exit_code;
}

RunOutcome RunLanes(const Config& c, uint64_t budget) {
  RunOutcome merged;
  const auto t0 = Clock::now();
  std::vector<pid_t> pids;
  std::vector<std::string> reports;
  for (int lane = 0; lane < c.jobs; ++lane) {
    const std::string dir = absl::StrCat(c.work_dir, "/lane-", lane);
    reports.push_back(absl::StrCat(c.work_dir, "/lane-", lane, ".report"));
    absl::StatusOr<pid_t> pid = StartLane(LaneArgs(c, lane, dir, reports.back()));
    if (!pid.ok()) {
      merged.records.push_back(LaneFailure(lane, pid.status().ToString()));
      pids.push_back(-1);
      continue;
    }
    pids.push_back(*pid);
  }
  std::optional<Clock::time_point> deadline;
  if (budget > 0) deadline = t0 + std::chrono::seconds(budget + 600);
  const std::vector<int> status = WaitForLanes(pids, deadline);
  for (int lane = 0; lane < c.jobs; ++lane) {
    if (pids[lane] < 0) continue;
    absl::StatusOr<std::string> text = ReadWholeFile(reports[lane]);
    absl::StatusOr<RunOutcome> o =
        text.ok() ? ParseOutcome(*text) : absl::StatusOr<RunOutcome>(text.status());
    const int st = status[lane];
    if (!o.ok() || !WIFEXITED(st) || o->exit_code >= 0) {
      merged.records.push_back(LaneFailure(
          lane, absl::StrCat("lane ", lane, " ended ",
                             WIFEXITED(st) ? absl::StrCat("with exit ", WEXITSTATUS(st))
                                           : absl::StrCat("by signal ", WTERMSIG(st)),
                             o.ok() ? "" : absl::StrCat(", report: ", o.status().ToString()))));
      if (!o.ok()) continue;
    }
    merged.tally.Merge(o->tally);
    for (IterationRecord& r : o->records) merged.records.push_back(std::move(r));
  }
  std::sort(merged.records.begin(), merged.records.end(),
            [](const IterationRecord& a, const IterationRecord& b) { return a.index < b.index; });
  merged.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return merged;
}

}  // namespace chaos
