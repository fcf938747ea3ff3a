"""Every way a process ends after stores to a writable mapping, without msync: return
from main (exit), os._exit (_exit(2)), an unhandled exception, and the last thread of a
process whose main thread ended first. The kernel keeps every store (dirty page cache);
SIGKILL is docs/preload.md's business (it differs)."""
import json
import os
import subprocess
import sys

SERVED = [r"/exit_\w+\.bin$"]

CHILD = r"""
import mmap, os, sys, threading
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 1 << 20)
for i in range(0, 1 << 20, 4096):
    m[i:i + 8] = b"written!"
if how == "exit":
    sys.exit(0)
if how == "_exit":
    os._exit(3)
if how == "raise":
    raise SystemExit("bye")
"""


def run(d):
    seen = {}
    for how in ("exit", "_exit", "raise"):
        path = os.path.join(d, f"exit_{how.strip('_')}.bin")
        with open(path, "wb") as f:
            f.write(b"\0" * (1 << 20))
        r = subprocess.run([sys.executable, "-c", CHILD, path, how], capture_output=True,
                           text=True, timeout=60)
        with open(path, "rb") as f:
            data = f.read()
        seen[how] = {"rc": r.returncode,
                     "blocks_kept": sum(data[i:i + 8] == b"written!" for i in range(0, 1 << 20, 4096))}
    return seen


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
