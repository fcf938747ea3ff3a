"""NumPy + multiprocessing (fork), the DataLoader pattern, in a memory cgroup smaller than
the file: the parent writes a memmap it has not flushed, then a Pool of 4 forked workers
reads random rows of it. Each worker must see the parent's data as of the fork (under the
shim, served by Umap in the worker too), and nothing is OOM-killed. (Each worker's own
runtime costs it about 15 MiB beside its cache: in 128 MiB, five such Python processes
with NumPy were OOM-killed: one cache shared by the processes of a node is the answer.)"""
import json
import multiprocessing
import os
import sys

import numpy as np

SERVED = [r"/rows\.f64$"]
# The workers too: each adopts the mapping it inherited with a runtime of its own.
LOG_MUST_MATCH = [r"Umap serves \S+/rows\.f64 .*inherited by this fork\(\) child"]
CGROUP_BYTES = 192 << 20
ROWS, COLS = 64_000, 512           # 250 MiB of float64: more than the cgroup holds
TIMEOUT = 400

_m = None


def check(seed):
    rng = np.random.default_rng(seed)
    bad = 0
    for r in rng.integers(0, ROWS, 500):
        row = _m[r]
        if row[0] != r or row[-1] != r * 2 + 1:
            bad += 1
    return bad


def run(d):
    global _m
    path = os.path.join(d, "rows.f64")
    _m = np.memmap(path, dtype=np.float64, mode="w+", shape=(ROWS, COLS))
    for r0 in range(0, ROWS, 4000):
        block = np.arange(r0, r0 + 4000, dtype=np.float64)
        _m[r0:r0 + 4000, 0] = block
        _m[r0:r0 + 4000, 1:-1] = 0.5
        _m[r0:r0 + 4000, -1] = block * 2 + 1
    with multiprocessing.get_context("fork").Pool(4) as pool:
        bad = sum(pool.map(check, range(32)))
    _m.flush()
    del _m
    return {"bad_rows": int(bad), "checked_rows": 32 * 500}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
