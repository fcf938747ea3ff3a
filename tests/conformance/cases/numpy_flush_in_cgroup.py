"""A NumPy memmap four times larger than the process's memory cgroup, created, written
whole and flushed (msync), then read back: it must complete (no OOM kill) with the same
bytes. Under the shim the cache, the journal's memtables and a umsync's staging must all
stay within the cgroup's limit."""
import hashlib
import json
import os
import sys

import numpy as np

SERVED = [r"/big\.f32$"]
CGROUP_BYTES = 128 << 20
ROWS, COLS = 32_768, 4096            # 512 MiB of float32
TIMEOUT = 600


def run(d):
    path = os.path.join(d, "big.f32")
    m = np.memmap(path, dtype=np.float32, mode="w+", shape=(ROWS, COLS))
    for r0 in range(0, ROWS, 1024):
        m[r0:r0 + 1024] = np.arange(r0, r0 + 1024, dtype=np.float32)[:, None]
    m.flush()
    del m
    h = hashlib.sha256()
    m = np.memmap(path, dtype=np.float32, mode="r", shape=(ROWS, COLS))
    for r0 in range(0, ROWS, 1024):
        h.update(m[r0:r0 + 1024].tobytes())
    del m
    return {"size": os.path.getsize(path), "sha256": h.hexdigest()[:16]}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
