"""An unmodified NumPy job for preload_tools_test: two matrices, one under UMAP_PATHS and
one elsewhere. Turns on faulthandler once they are mapped (it installs its own SIGBUS
handler, as pytest does), fills both (value = seed * 1e6 + index), flushes, prints
"ready", waits for a line on stdin, checks both again and exits.

usage: numpy_two_files.py INSIDE OUTSIDE ROWS COLS SEED
"""
import faulthandler
import sys

import numpy as np


def main():
    inside, outside = sys.argv[1], sys.argv[2]
    rows, cols, seed = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    want = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols) + seed * 1e6
    maps = [np.memmap(p, dtype=np.float64, mode="w+", shape=(rows, cols)) for p in (inside, outside)]
    faulthandler.enable()
    for m in maps:
        m[:] = want
        m.flush()
    print("ready", flush=True)
    sys.stdin.readline()
    for m in maps:
        assert (m == want).all()
    del maps
    print("done", flush=True)


if __name__ == "__main__":
    main()
