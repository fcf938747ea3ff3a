#!/usr/bin/python3
"""A DataLoader-style read benchmark (issue 39): a NumPy memmap read at random rows by the
forked workers of a multiprocessing.Pool, in a memory cgroup smaller than the file.

What it measures. A file of rows (float32, 1024 to a row: 4 KiB; row r holds the value r
everywhere) is made once and reused. For each mode, in a fresh cgroup v1 memory cgroup
(/sys/fs/cgroup/memory/<name>, memory.limit_in_bytes = --limit) with the file's page
cache dropped first (posix_fadvise DONTNEED), a parent process np.memmap's the file
(mode "r": a read-only MAP_SHARED mapping), starts multiprocessing.Pool(--workers) with the
"fork" start method, and hands it --rows-per-worker x --workers uniformly random rows in
batches of --batch (one batch = one task, as a DataLoader's batch sampler does). Each
worker reads its batch from the memmap it inherited (fancy indexing copies the rows),
sums it in float64 and checks every row's first and last value against its index. Modes:

  mmap         the kernel's mapping, default advice
  mmap+random  the same after madvise(MADV_RANDOM) on the memmap's mmap (before the fork)
  shim         the same script under LD_PRELOAD=libumap_preload.so with UMAP_PATHS = the
               file's directory (docs/preload.md: the parent maps the file with Umap; each
               forked worker adopts the inherited mapping with a runtime of its own)

Per run: rows/s = rows read / wall time of the pool's work (first task handed out to last
result in; the fork of the pool is timed apart), the cgroup's peak
(memory.max_usage_in_bytes), its OOM kills (memory.oom_control's oom_kill), failcnt, each
worker's exit code (a worker killed by a signal loses its batch: the run stops there and is
marked failed), the parent's exit status, rows that read wrong, and excerpts of stderr and
of the shim's log. --repeats R runs the modes interleaved R times (the same random rows for
every mode of a repeat) and reports medians and min-max; the shim's ratios to the others
are medians of the ratios within a repeat. In shim runs umap-stat (--umap-stat) is sampled
every 2 s on the cgroup's processes: each runtime's cache, hits, misses. A run that passes
--max-seconds stops handing out rows (workers skip the rest) and says so ("capped"): its
rate is the rows read over the time taken.

Run as root (cgroups, dropping the page cache), with Debian's python3 (python3-numpy):

  /usr/bin/python3 bench/dataloader_bench.py --preload build/runtime/preload/libumap_preload.so \\
      --repeats 3 --json dataloader.json
  ... --user nobody     # the workload as nobody (setpriv), the cgroup made by root

Defaults: a 1 GiB file in /var/tmp/umap-dataloader, a 256 MiB limit, 8 workers, 64-row
batches, 25000 rows per worker (200k rows: ~7-12 s for mmap+random and the shim on the
2-vCPU VM), a 30 s cap per run (mmap with default advice reaches it: with the VM's 8 MiB
read_ahead_kb every fault reads megabytes). Only the standard library and NumPy.
"""

import argparse
import json
import mmap
import multiprocessing
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

ROW_FLOATS = 1024
ROW_BYTES = ROW_FLOATS * 4
MODES = ("mmap", "mmap+random", "shim")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CGROUP_V1 = "/sys/fs/cgroup/memory"

# --- sizes ---------------------------------------------------------------------------------


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMGT]?)(i?B)?", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2).upper()]


def mib(n):
    return None if n is None else round(n / (1 << 20), 1)


# --- the workload (runs inside the cgroup, in its own process) -------------------------------

_M = None       # the parent's memmap; the forked workers inherit it
_ROWS = 0


def read_batch(task):
    """One batch in a worker: (pid, rows read, checksum ok, bad rows, seconds, skipped)."""
    import numpy as np
    seed, n, deadline = task
    if time.monotonic() > deadline:
        return os.getpid(), 0, True, 0, 0.0, True
    idx = np.random.default_rng(seed).integers(0, _ROWS, n)
    t0 = time.monotonic()
    rows = _M[idx]                                  # the reads: one 4 KiB row each
    total = float(rows.sum(dtype=np.float64))
    dt = time.monotonic() - t0
    want = np.asarray(idx, dtype=np.float32)
    bad = int(np.count_nonzero((rows[:, 0] != want) | (rows[:, -1] != want)))
    return os.getpid(), n, total == float(idx.sum()) * ROW_FLOATS, bad, dt, False


def collect(pool, it, n_tasks, hard_deadline):
    """Results as they come; stops early when a worker dies (its batch is lost) or at the
    hard deadline. Returns (results, every worker process seen, why it stopped or None)."""
    import multiprocessing as mp
    results, seen, stop = [], {}, None
    while len(results) < n_tasks:
        try:
            results.append(it.next(timeout=0.25))
        except mp.TimeoutError:
            pass
        for p in list(pool._pool):
            seen.setdefault(p.pid, p)
        dead = [p for p in seen.values() if p.exitcode not in (None, 0)]
        if dead:
            stop = "worker(s) died: " + ", ".join(f"pid {p.pid} exit {p.exitcode}" for p in dead)
            break
        if time.monotonic() > hard_deadline:
            stop = "hard deadline passed with tasks outstanding"
            break
    return results, seen, stop


def workload(args):
    global _M, _ROWS
    import numpy as np
    _ROWS = os.path.getsize(args.file) // ROW_BYTES
    _M = np.memmap(args.file, dtype=np.float32, mode="r", shape=(_ROWS, ROW_FLOATS))
    if args.workload == "mmap+random":
        _M._mmap.madvise(mmap.MADV_RANDOM)
    n_tasks = args.rows_per_worker * args.workers // args.batch
    t0 = time.monotonic()
    pool = multiprocessing.get_context("fork").Pool(args.workers)
    t1 = time.monotonic()
    deadline = t1 + args.max_seconds
    seed0 = args.seed * 1_000_003
    tasks = [(seed0 + i, args.batch, deadline) for i in range(n_tasks)]
    it = pool.imap_unordered(read_batch, tasks, chunksize=1)
    results, seen, stop = collect(pool, it, n_tasks, deadline + 60)
    t2 = time.monotonic()
    if stop is None:
        pool.close()
        pool.join()
    else:
        pool.terminate()
    for p in list(pool._pool):
        seen.setdefault(p.pid, p)
    per = {pid: {"pid": pid, "rows": 0, "exit": p.exitcode} for pid, p in seen.items()}
    for pid, n, ok, bad, dt, skipped in results:
        per.setdefault(pid, {"pid": pid, "rows": 0, "exit": None})["rows"] += n
    rows = sum(r[1] for r in results)
    out = {
        "mode": args.workload, "rows": rows, "rows_wanted": n_tasks * args.batch,
        "work_s": round(t2 - t1, 3), "pool_start_s": round(t1 - t0, 3),
        "rows_per_s": round(rows / (t2 - t1), 1) if t2 > t1 else None,
        "capped": any(r[5] for r in results), "stopped": stop,
        "bad_rows": sum(r[3] for r in results), "bad_sums": sum(1 for r in results if not r[2]),
        "workers": sorted(per.values(), key=lambda w: w["pid"]),
        "parent_pid": os.getpid(),
    }
    print(json.dumps(out), flush=True)
    return 1 if stop else 0


# --- the data file -----------------------------------------------------------------------------


def file_ok(path, size):
    if not os.path.exists(path) or os.path.getsize(path) != size:
        return False
    rows = size // ROW_BYTES
    with open(path, "rb") as f:
        for r in (0, rows // 3, rows - 1):
            f.seek(r * ROW_BYTES)
            head = memoryview(f.read(ROW_BYTES)).cast("f")
            if head[0] != r or head[-1] != r:
                return False
    return True


def make_file(path, size):
    import numpy as np
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.chmod(os.path.dirname(path), 0o755)
    if file_ok(path, size):
        return False
    rows, step = size // ROW_BYTES, 4096
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            f.write(np.repeat(np.arange(r0, r1, dtype=np.float32), ROW_FLOATS).tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)
    return True


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return resident_bytes(path)


def resident_bytes(path):
    try:
        out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", path], capture_output=True,
                             text=True, timeout=30).stdout.split()
        return int(out[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


# --- the cgroup ---------------------------------------------------------------------------------


class Cgroup:
    """A fresh cgroup v1 memory cgroup with a limit; the run's first process joins it."""

    def __init__(self, name, limit):
        self.path = os.path.join(CGROUP_V1, name)
        os.mkdir(self.path)
        self.write("memory.limit_in_bytes", limit)

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def prefix(self):
        return ["sh", "-c", f'echo $$ > "{self.path}/cgroup.procs" && exec "$@"', "sh"]

    def figures(self):
        oom = dict(line.split() for line in self.read("memory.oom_control").splitlines())
        return {"peak": int(self.read("memory.max_usage_in_bytes")),
                "failcnt": int(self.read("memory.failcnt")),
                "oom_kills": int(oom.get("oom_kill", 0)),
                "under_oom": int(oom.get("under_oom", 0))}

    def procs(self):
        return [int(p) for p in self.read("cgroup.procs").split()]

    def remove(self):
        """Kills what the run left behind (its own processes), then removes the cgroup."""
        left = self.procs()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for _ in range(100):
            try:
                os.rmdir(self.path)
                break
            except OSError:
                time.sleep(0.1)
        return left


# --- the shim's processes, seen through umap-stat ---------------------------------------------------


class StatSampler:
    """Every 2 s during a shim run: umap-stat --json on the cgroup's processes. Keeps the
    last sample that saw the most Umap runtimes (each process's own cache, misses, reads)."""

    def __init__(self, tool, cgroup):
        self.tool, self.cgroup, self.best = tool, cgroup, None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.done.wait(2.0):
            try:
                pids = [str(p) for p in self.cgroup.procs()]
                out = subprocess.run([self.tool, "--json", *pids], capture_output=True,
                                     text=True, timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                continue
            procs = [self.brief(json.loads(l)) for l in out.splitlines() if l.startswith("{")]
            procs = [p for p in procs if p]
            if procs and (self.best is None or len(procs) >= len(self.best["processes"])):
                self.best = {"t": time.strftime("%H:%M:%S"), "processes": procs}

    @staticmethod
    def brief(doc):
        rts = doc.get("runtimes") or []
        if not rts:
            return None
        rt = rts[0]
        c, n, m = rt["cache"], rt["counters"], (rt.get("mappings") or [{}])[0]
        return {"pid": doc["pid"], "cache_used_mib": mib(c["used_bytes"]),
                "cache_capacity_mib": mib(c["capacity_bytes"]), "cache_peak_mib": mib(c["peak_bytes"]),
                "runtimes_sharing": rt["memory"].get("runtimes_sharing"),
                "hits": m.get("hits"), "misses": m.get("misses"), "io_reads": n["io_reads"],
                "io_read_mib": mib(n["io_read_bytes"]), "evictions": n["evictions"],
                "fault_mode": rt.get("fault_mode"), "uffd": rt.get("userfaultfd_access")}

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.best


# --- one run, driven from outside ------------------------------------------------------------------


def shim_env(env, args, log):
    env["LD_PRELOAD"] = os.path.abspath(args.preload)
    env["UMAP_PATHS"] = os.path.dirname(os.path.abspath(args.file))
    env["UMAP_LOG_LEVEL"] = "info"
    env["UMAP_LOG_FILE"] = log          # every process of the run appends here
    with open(log, "w"):
        pass
    os.chmod(log, 0o666)


def shim_log_summary(log):
    try:
        with open(log, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    pids = lambda pat: sorted({m.group(1) for l in lines if re.search(pat, l)
                               for m in [re.match(r"umap\[(\d+)\]", l)] if m})
    notable = [l for l in lines if re.search(r" (WARN|ERROR) ", l)]
    return {"lines": len(lines),
            "serving_pids": pids(r"Umap serves"),
            "adopted_pids": pids(r"inherited by this fork\(\) child"),
            "warn_error_lines": len(notable),
            "first_lines": lines[:6], "notable": notable[:12]}


def run_one(args, mode, repeat, logdir):
    name = f"umap-dataloader-{os.getpid()}-{repeat}-{mode.replace('+', '-')}"
    resident = drop_cache(args.file)
    env = {k: v for k, v in os.environ.items() if not (k.startswith("UMAP_") or k == "LD_PRELOAD")}
    log = os.path.join(logdir, f"shim-{repeat}.log")
    if mode == "shim":
        shim_env(env, args, log)
    cmd = [sys.executable, os.path.abspath(__file__), "--workload", mode, "--file", args.file,
           "--workers", str(args.workers), "--batch", str(args.batch),
           "--rows-per-worker", str(args.rows_per_worker), "--max-seconds", str(args.max_seconds),
           "--seed", str(repeat + 1)]
    if args.user == "nobody":
        cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] + cmd
    cg = Cgroup(name, args.limit)
    sampler = (StatSampler(args.umap_stat, cg)
               if mode == "shim" and args.umap_stat and os.path.exists(args.umap_stat) else None)
    t0 = time.monotonic()
    p = subprocess.Popen(cg.prefix() + cmd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        out, err = p.communicate(timeout=args.max_seconds + 120)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        rc = "timeout"
    wall = time.monotonic() - t0
    stat = sampler.stop() if sampler else None
    figs = cg.figures()
    leftover = cg.remove()
    lines = [l for l in out.splitlines() if l.startswith("{")]
    result = json.loads(lines[-1]) if lines else None
    run = {"mode": mode, "repeat": repeat, "user": args.user, "rc": rc, "wall_s": round(wall, 2),
           "parent_pid": p.pid, "resident_before": resident, "leftover_pids": leftover, **figs,
           "oom_killed": oom_victims(name, p.pid) if figs["oom_kills"] else [],
           "result": result, "stderr_tail": err[-3000:]}
    if mode == "shim":
        run["shim_log"] = shim_log_summary(log)
        run["umap_stat"] = stat
    run["ok"] = (rc == 0 and result is not None and result["stopped"] is None
                 and figs["oom_kills"] == 0 and result["bad_rows"] == 0 and result["bad_sums"] == 0)
    return run


def oom_victims(cgroup_name, parent_pid):
    """The kernel log's OOM kills in this cgroup: pid, whether it was the parent, RSS."""
    try:
        log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    pids = re.findall(r"oom-kill:.*oom_memcg=/" + re.escape(cgroup_name) + r",.*?,pid=(\d+)", log)
    out = []
    for pid in dict.fromkeys(pids):
        m = re.search(r"Killed process " + pid + r" \(\S+\) (.*)", log)
        out.append({"pid": int(pid), "parent": int(pid) == parent_pid,
                    "kernel": m.group(1)[:160] if m else None})
    return out


def describe(run):
    r = run["result"] or {}
    dead = [w for w in r.get("workers", []) if w["exit"] not in (None, 0)]
    s = (f"{run['mode']:<12} rep {run['repeat']}: "
         + (f"{r['rows_per_s']:.0f} rows/s ({r['rows']} rows in {r['work_s']} s"
            + (", capped" if r.get("capped") else "") + ")" if r else "no result")
         + f", peak {mib(run['peak'])} MiB, oom_kills {run['oom_kills']}, rc {run['rc']}")
    if dead:
        s += ", dead workers: " + ", ".join(f"{w['pid']}({w['exit']})" for w in dead)
    for v in run["oom_killed"]:
        s += f"\n  OOM-killed: pid {v['pid']} ({'the parent' if v['parent'] else 'a worker'}): {v['kernel']}"
    if r.get("stopped"):
        s += f", stopped: {r['stopped']}"
    if r.get("bad_rows") or r.get("bad_sums"):
        s += f", BAD rows {r['bad_rows']} sums {r['bad_sums']}"
    log, stat = run.get("shim_log"), run.get("umap_stat")
    if log:
        s += (f"\n  shim log: {len(log['serving_pids'])} processes served the file, "
              f"{len(log['adopted_pids'])} of them as adopting fork children, "
              f"{log['warn_error_lines']} warn/error lines")
    if stat:
        ps = stat["processes"]
        used = [p["cache_used_mib"] for p in ps]
        s += (f"\n  umap-stat at {stat['t']}: {len(ps)} runtimes, caches {sum(used):.0f} MiB in all "
              f"(each {min(used)}-{max(used)} MiB), misses {sum(p['misses'] or 0 for p in ps)}, "
              f"hits {sum(p['hits'] or 0 for p in ps)}")
    return s


# --- summary -------------------------------------------------------------------------------------


def med_range(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def summarize(runs, modes):
    out = {}
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]
        ok = [r for r in mine if r["ok"]]
        dead = sum(sum(1 for w in r["result"]["workers"] if w["exit"] not in (None, 0))
                   if r["result"] else sum(1 for v in r["oom_killed"] if not v["parent"])
                   for r in mine)
        out[mode] = {
            "runs": len(mine), "ok_runs": len(ok),
            "rows_per_s": med_range([r["result"]["rows_per_s"] for r in ok]),
            "rows_per_s_all": med_range([(r["result"] or {}).get("rows_per_s") for r in mine]),
            "peak_mib": med_range([mib(r["peak"]) for r in mine]),
            "oom_kills": [r["oom_kills"] for r in mine], "dead_workers": dead,
            "parent_rc": [r["rc"] for r in mine],
            "capped_runs": sum(1 for r in mine if (r["result"] or {}).get("capped")),
        }
    if "shim" in modes:
        for other in modes:
            if other == "shim":
                continue
            ratios = []
            for rep in {r["repeat"] for r in runs}:
                a = [r for r in runs if r["repeat"] == rep and r["mode"] == "shim" and r["ok"]]
                b = [r for r in runs if r["repeat"] == rep and r["mode"] == other and r["ok"]]
                if a and b and b[0]["result"]["rows_per_s"]:
                    ratios.append(a[0]["result"]["rows_per_s"] / b[0]["result"]["rows_per_s"])
            out[f"shim/{other}"] = med_range(ratios)
    return out


def table(summary, modes):
    lines = ["| mode | ok runs | rows/s median (min-max) | cgroup peak MiB median (min-max) "
             "| OOM kills per run | workers died | parent exit |",
             "|---|---:|---:|---:|---|---:|---|"]
    for mode in modes:
        s = summary[mode]
        rps, pk = s["rows_per_s"] or s["rows_per_s_all"], s["peak_mib"]
        cell = (f"{rps['median']:.0f} ({rps['min']:.0f}-{rps['max']:.0f})" if rps else "-")
        if rps and not s["rows_per_s"]:
            cell += " (failed runs)"
        lines.append(f"| {mode} | {s['ok_runs']}/{s['runs']} | {cell} | "
                     f"{pk['median']} ({pk['min']}-{pk['max']}) | "
                     f"{','.join(map(str, s['oom_kills']))} | {s['dead_workers']} | "
                     f"{','.join(map(str, s['parent_rc']))} |")
    for key in [k for k in summary if k.startswith("shim/")]:
        r = summary[key]
        lines.append(f"\n{key}: " + (f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f}, n={r['n']})"
                                      if r else "no pair of ok runs"))
    return "\n".join(lines)


def machine():
    return {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
            "loadavg_start": os.getloadavg(), "python": platform.python_version(),
            "numpy": __import__("numpy").__version__, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def drive(args):
    if os.geteuid() != 0:
        sys.exit("dataloader_bench: run as root (memory cgroups, page cache drop)")
    if not os.path.isdir(CGROUP_V1):
        sys.exit(f"dataloader_bench: no cgroup v1 memory controller at {CGROUP_V1}")
    modes = args.modes.split(",")
    if "shim" in modes and not os.path.exists(args.preload):
        sys.exit(f"dataloader_bench: no shim at {args.preload} (--preload)")
    info = machine()
    print(f"# load average at start: {info['loadavg_start']}", flush=True)
    made = make_file(args.file, args.file_size)
    print(f"# file {args.file}: {args.file_size >> 20} MiB, {'made' if made else 'reused'}",
          flush=True)
    logdir = args.log_dir or os.path.join(os.path.dirname(args.file), "logs")
    os.makedirs(logdir, exist_ok=True)
    os.chmod(logdir, 0o755)
    runs = []
    for rep in range(args.repeats):
        for mode in modes:
            run = run_one(args, mode, rep, logdir)
            runs.append(run)
            print(describe(run), flush=True)
            if not run["ok"]:
                print("  stderr: " + run["stderr_tail"][-800:].replace("\n", "\n  "), flush=True)
    summary = summarize(runs, modes)
    print(table(summary, modes))
    if args.json:
        conf = {k: v for k, v in vars(args).items() if k != "workload"}
        with open(args.json, "w") as f:
            json.dump({"machine": info, "args": conf, "runs": runs, "summary": summary}, f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default="/var/tmp/umap-dataloader/rows.f32")
    ap.add_argument("--file-size", type=parse_size, default=parse_size("1G"))
    ap.add_argument("--limit", type=parse_size, default=parse_size("256M"),
                    help="the memory cgroup's limit")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64, help="rows per task")
    ap.add_argument("--rows-per-worker", type=int, default=25000)
    ap.add_argument("--max-seconds", type=float, default=30)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--user", choices=["root", "nobody"], default="root",
                    help="who runs the workload (the cgroup is made by root either way)")
    ap.add_argument("--preload", default=os.path.join(REPO, "build/runtime/preload/libumap_preload.so"))
    ap.add_argument("--umap-stat", help="umap-stat, sampled during shim runs "
                    "(default: tools/umap-stat of the build the shim comes from)")
    ap.add_argument("--log-dir", help="where the shim's logs go (default: FILE's dir/logs)")
    ap.add_argument("--json", help="write every run and the summary here")
    ap.add_argument("--workload", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.workload:
        return workload(args)
    if args.umap_stat is None:
        build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.preload))))
        args.umap_stat = os.path.join(build, "tools", "umap-stat")
    bad = set(args.modes.split(",")) - set(MODES)
    if bad:
        ap.error(f"unknown mode(s) {sorted(bad)}; choose from {MODES}")
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
