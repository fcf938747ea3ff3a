#!/usr/bin/env python3
"""conformance.py --case NAME --user root|nobody --preload LIB: one conformance case.

A case is a real program (SQLite, LMDB, NumPy, fio, or a few lines of Python doing what
programs do) run twice on the same input: plainly, with the kernel's mmap, and under the
LD_PRELOAD shim with default settings. Each run prints its observations as one JSON object
on its last line of output; the case passes when the two objects are equal and the shim
served the files the case names (its log says "Umap serves PATH" for each), and did not
decline them. docs/preload.md's table of mmap behaviours is what these cases check.

Each case is one file in cases/: a module with run(dir) -> dict (what the program
observed), SERVED (regular expressions of the file names the shim must serve), and
optionally CGROUP_BYTES (both runs go into a fresh memory cgroup of that limit), TIMEOUT
(seconds per run), NEEDS (capabilities, as faultinject/probe-capability names them) and
LOG_MUST_MATCH (regular expressions the shim's log must match, e.g. that forked children
were served too) and MAY_DECLINE (files the shim is expected to hand to the kernel, each
decline printed with its log line; any other decline fails the case). The runs happen in a fresh directory that both users may write.

As `nobody` the runs go through setpriv (the shim then runs with user-mode-only
userfaultfd). Exit: 0 pass, 1 fail (the difference printed), 77 a capability this machine
lacks (named on the "umap-skip:" line, as faultinject/probe-capability prints it).
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "..", "..", "faultinject", "probe-capability")
PYTHON = "/usr/bin/python3"  # Debian's, with python3-numpy and python3-lmdb


def load_case(name):
    path = os.path.join(HERE, "cases", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return path, mod


def probe(*caps):
    """Exits 77 with the probe's line when a capability is missing."""
    r = subprocess.run([PROBE, *caps], capture_output=True, text=True)
    if r.returncode == 1:
        print(r.stdout.strip())
        sys.exit(77)
    if r.returncode != 0:
        sys.exit(f"probe-capability {caps}: {r.stdout}{r.stderr}")


class Cgroup:
    """A cgroup v1 memory cgroup (or v2) of a given limit; the runs start inside it."""

    def __init__(self, limit):
        self.path = None
        if limit is None:
            return
        name = f"umap-conformance-{os.getpid()}-{int(time.time() * 1000)}"
        v1 = "/sys/fs/cgroup/memory"
        if os.path.isdir(v1):
            self.path = os.path.join(v1, name)
            os.mkdir(self.path)
            with open(os.path.join(self.path, "memory.limit_in_bytes"), "w") as f:
                f.write(str(limit))
            self.peak_file = "memory.max_usage_in_bytes"
            self.oom_file = "memory.oom_control"
        else:
            self.path = os.path.join("/sys/fs/cgroup", name)
            os.mkdir(self.path)
            with open(os.path.join(self.path, "memory.max"), "w") as f:
                f.write(str(limit))
            self.peak_file = "memory.peak"
            self.oom_file = "memory.events"

    def prefix(self):
        """A command prefix that moves the process into the cgroup, then execs."""
        if self.path is None:
            return []
        procs = "tasks" if self.path.startswith("/sys/fs/cgroup/memory") else "cgroup.procs"
        return ["sh", "-c", f'echo $$ > "{self.path}/{procs}" && exec "$@"', "sh"]

    def oom_kills(self):
        if self.path is None:
            return 0
        with open(os.path.join(self.path, self.oom_file)) as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return 0

    def peak(self):
        if self.path is None or not os.path.exists(os.path.join(self.path, self.peak_file)):
            return None
        with open(os.path.join(self.path, self.peak_file)) as f:
            return int(f.read())

    def remove(self):
        if self.path is not None:
            for _ in range(50):
                try:
                    os.rmdir(self.path)
                    return
                except OSError:
                    time.sleep(0.1)


def run_once(case_path, mod, mode, user, preload, work):
    d = os.path.join(work, mode)
    os.mkdir(d)
    os.chmod(d, 0o777)
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("UMAP_") or k == "LD_PRELOAD":
            del env[k]
    env["TMPDIR"] = d  # temporary files too are in the directory the shim serves
    env["HOME"] = work
    if mode == "shim":
        env["LD_PRELOAD"] = preload
        env["UMAP_PATHS"] = d
        env["UMAP_LOG_LEVEL"] = "info"
        # Every process of the run (the programs' own children too) logs here.
        env["UMAP_LOG_FILE"] = os.path.join(work, "shim.log")
        with open(env["UMAP_LOG_FILE"], "a"):
            pass
        os.chmod(env["UMAP_LOG_FILE"], 0o666)
    cmd = [PYTHON, case_path, d]
    if user == "nobody":
        cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] + cmd
    cg = Cgroup(getattr(mod, "CGROUP_BYTES", None))
    t0 = time.monotonic()
    try:
        r = subprocess.run(cg.prefix() + cmd, env=env, capture_output=True, text=True,
                           timeout=getattr(mod, "TIMEOUT", 240), cwd=d)
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc = "timeout"
    seconds = time.monotonic() - t0
    ooms, peak = cg.oom_kills(), cg.peak()
    cg.remove()
    if mode == "shim":
        with open(os.path.join(work, "shim.log"), errors="replace") as f:
            err += f.read()
    lines = [l for l in out.strip().splitlines() if l.strip()]
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        result = None
    return {"rc": rc, "result": result, "stdout": out, "stderr": err, "seconds": seconds,
            "oom_kills": ooms, "peak": peak}


def served_and_declined(stderr):
    """The files the shim's log says it served, and those it declined to the kernel."""
    served = re.findall(r"Umap serves (\S+)", stderr)
    declined = [f.rstrip(":") for f in re.findall(r"libumap_preload: declining (\S+)", stderr)]
    return served, declined


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    ap.add_argument("--user", choices=["root", "nobody"], default="root")
    ap.add_argument("--preload", required=True)
    args = ap.parse_args()

    probe("root", "userfaultfd")
    if args.user == "nobody":
        probe("command:setpriv")
    case_path, mod = load_case(args.case)
    for cap in getattr(mod, "NEEDS", []):
        probe(cap)
    if getattr(mod, "CGROUP_BYTES", None) is not None:
        probe("memory-cgroup")

    work = tempfile.mkdtemp(prefix=f"umap-conf-{args.case}-", dir="/var/tmp")
    os.chmod(work, 0o1777)
    failures = []
    try:
        runs = {m: run_once(case_path, mod, m, args.user, args.preload, work)
                for m in ("plain", "shim")}
        for m, r in runs.items():
            print(f"--- {m} ({args.user}): rc {r['rc']}, {r['seconds']:.1f} s"
                  + (f", cgroup peak {r['peak'] >> 20} MiB" if r["peak"] else "")
                  + (f", {r['oom_kills']} OOM kills" if r["oom_kills"] else ""))
            print(f"    result: {json.dumps(r['result'], sort_keys=True)}")
            if r["rc"] != 0 or r["result"] is None:
                failures.append(f"{m} run failed (rc {r['rc']})")
                print(r["stdout"][-3000:])
                print(r["stderr"][-6000:])
            if r["oom_kills"]:
                failures.append(f"{m} run: {r['oom_kills']} OOM kills in its cgroup")
        plain, shim = runs["plain"], runs["shim"]
        if plain["result"] != shim["result"]:
            failures.append("the shim's result differs from the plain run's")
            p, s = plain["result"] or {}, shim["result"] or {}
            for k in sorted(set(p) | set(s)):
                if p.get(k) != s.get(k):
                    print(f"    {k}: plain {p.get(k)!r} / shim {s.get(k)!r}")
        served, declined = served_and_declined(shim["stderr"])
        print(f"    served by Umap: {len(served)} mappings of {len(set(served))} files; "
              f"declined: {sorted(set(declined)) or 'none'}")
        for pattern in getattr(mod, "SERVED", []):
            if not any(re.search(pattern, f) for f in served):
                failures.append(f"no file matching {pattern!r} was served by Umap "
                                f"(served: {sorted(set(served))})")
            for f in declined:
                if re.search(pattern, f):
                    failures.append(f"{f} was declined (its log line is in the output)")
        may_decline = getattr(mod, "MAY_DECLINE", [])
        for f in sorted(set(declined)):
            if not any(re.search(p, f) for p in may_decline + getattr(mod, "SERVED", [])):
                failures.append(f"{f} was declined, and the case does not expect it")
            elif any(re.search(p, f) for p in may_decline):
                line = re.search(r".*libumap_preload: declining " + re.escape(f) + r".*",
                                 shim["stderr"])
                print(f"    declined as expected: {line.group(0) if line else f}")
        for pattern in getattr(mod, "LOG_MUST_MATCH", []):
            if not re.search(pattern, shim["stderr"]):
                failures.append(f"the shim's log has no line matching {pattern!r}")
        if failures:
            print(shim["stderr"][-6000:])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"ok: {args.case} as {args.user}: the shim's result equals the plain run's")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
