"""An unmodified NumPy job for the preload tests: it knows nothing about Umap.

usage: numpy_worker.py memmap FILE ROWS COLS OFFSET FIRST_GEN
       numpy_worker.py npy    FILE ROWS COLS FIRST_GEN

Opens the matrix with np.memmap(mode="r+", offset=OFFSET) -- which extends a short file by
writing its last byte first, and maps from OFFSET rounded down to the allocation
granularity -- or with np.load(mmap_mode="r+") of a .npy file. Then, for generation
g = FIRST_GEN, FIRST_GEN+1, ...: writes every element (g * 1e6 + row * COLS + col), row
by row, prints "flushing g", calls .flush() (msync), prints "flushed g MS" with the flush's
duration in milliseconds. Runs until killed.
"""
import sys
import time

import numpy as np


def main():
    mode, path = sys.argv[1], sys.argv[2]
    rows, cols = int(sys.argv[3]), int(sys.argv[4])
    if mode == "memmap":
        offset, gen = int(sys.argv[5]), int(sys.argv[6])
        m = np.memmap(path, dtype=np.float64, mode="r+", shape=(rows, cols), offset=offset)
    else:
        gen = int(sys.argv[5])
        m = np.load(path, mmap_mode="r+")
        assert m.shape == (rows, cols) and m.dtype == np.float64, (m.shape, m.dtype)
    base = np.arange(cols, dtype=np.float64)
    while True:
        for r in range(rows):
            m[r, :] = base + (gen * 1e6 + r * cols)
        print(f"flushing {gen}", flush=True)
        t = time.monotonic()
        m.flush()
        print(f"flushed {gen} {int((time.monotonic() - t) * 1000)}", flush=True)
        gen += 1


if __name__ == "__main__":
    main()
