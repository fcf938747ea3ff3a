#!/usr/bin/env python3
"""Print the same-budget table of docs/performance.md from a run's results.jsonl.

Usage: bench/results-table.py [RESULTS.jsonl | RESULT_DIR]
Without an argument it reads the newest bench/results/*/results.jsonl (the directories
bench/run-standard.sh writes). One markdown table: a row per label (local, gluster, ...),
workload and thread count; umap's median ops/s, then umap/other for every other backend,
the median over repeats of the ratio of runs of the same repeat (as summary.md does).
Runs with an error (an OOM kill, a failed run) are left out of the medians; a cell whose
runs all failed reads "fail". Only the Python standard library is used.
"""

import glob
import json
import os
import statistics
import sys

# Column order: the references of the headline run, then anything else in the file.
BACKEND_ORDER = ["mmap", "mmap+random", "mmap+seq", "pread+direct", "pread", "uring"]


def newest_results():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    found = sorted(glob.glob(os.path.join(root, "*", "results.jsonl")))
    if not found:
        sys.exit("results-table: no bench/results/*/results.jsonl; run bench/run-standard.sh first")
    return found[-1]


def load(path):
    runs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                runs.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"results-table: {path}:{n}: not JSON: {e}")
    return runs


def rate(ops):
    if ops >= 1e6:
        return f"{ops / 1e6:.2f}M"
    if ops >= 1e5:
        return f"{ops / 1e3:.0f}k"
    if ops >= 1e3:
        return f"{ops / 1e3:.1f}k"
    return f"{ops:.0f}"


def ratio(x):
    return f"{x:.2f}" if x < 10 else f"{x:.0f}"


def table(runs):
    # (label, workload, threads) -> backend -> repeat -> ops/s (process 0 sums the others'
    # ops only when processes > 1; the headline runs are one process each).
    cells = {}
    for r in runs:
        key = (r.get("label", ""), r["workload"], int(r["threads"]))
        per = cells.setdefault(key, {}).setdefault(r["backend"], {})
        if r.get("error"):
            per.setdefault(int(r["repeat"]), None)
            continue
        rep = int(r["repeat"])
        per[rep] = (per.get(rep) or 0.0) + float(r["ops_per_s"])
    others = sorted({b for c in cells.values() for b in c if b != "umap"},
                    key=lambda b: (BACKEND_ORDER.index(b) if b in BACKEND_ORDER else 99, b))
    head = ["label", "workload", "threads", "umap ops/s"] + [f"umap/{b}" for b in others]
    out = ["| " + " | ".join(head) + " |",
           "|---|---|" + "---:|" * (len(head) - 2)]
    for key in sorted(cells):
        by = cells[key]
        umap = by.get("umap", {})
        good = [v for v in umap.values() if v]
        row = [key[0], key[1], str(key[2]),
               rate(statistics.median(good)) if good else ("fail" if umap else "")]
        for b in others:
            other = by.get(b, {})
            rs = [umap[k] / other[k] for k in umap
                  if umap[k] and other.get(k)]
            row.append(ratio(statistics.median(rs)) if rs else ("fail" if other else ""))
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


def main(argv):
    if len(argv) > 2:
        sys.exit(__doc__)
    path = argv[1] if len(argv) == 2 else newest_results()
    if os.path.isdir(path):
        path = os.path.join(path, "results.jsonl")
    runs = load(path)
    if not runs:
        sys.exit(f"results-table: {path}: no runs")
    print(f"<!-- bench/results-table.py {path} -->")
    print(table(runs))


if __name__ == "__main__":
    main(sys.argv)
