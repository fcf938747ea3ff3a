"""Access past a truncated end raises SIGBUS, as with mmap, whoever truncated the file (the
process itself, or another process); a later msync never grows the file back."""
import json
import mmap
import os
import signal
import subprocess
import sys
import time

SERVED = [r"/(self|other)\.bin$"]
SIZE = 64 << 10

CHILD = r"""
import mmap, os, sys, time, subprocess
path, who = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 65536)
m[100] = 7                      # dirty, below the new end
m[40000] = 9                    # dirty, past the new end
x = m[50000]                    # resident, past the new end
if who == "self":
    os.ftruncate(fd, 16384)
else:
    subprocess.run([sys.executable, "-c",
                    "import os,sys; os.truncate(sys.argv[1], 16384)", path], check=True)
    time.sleep(0.5)             # the bound within which another process's truncate is seen
m.flush()                       # must not grow the file back
print("size after flush", os.fstat(fd).st_size, flush=True)
print("below", m[100], flush=True)
print("touching", flush=True)
y = m[50000]
print("no SIGBUS", y, flush=True)
"""


def one(d, who):
    path = os.path.join(d, who + ".bin")
    with open(path, "wb") as f:
        f.write(b"\1" * SIZE)
    r = subprocess.run([sys.executable, "-c", CHILD, path, who], capture_output=True,
                       text=True, timeout=60)
    return {"signal": -r.returncode if r.returncode < 0 else None,
            "rc": r.returncode if r.returncode >= 0 else None,
            "stdout": r.stdout.strip().splitlines(),
            "file_size": os.path.getsize(path)}


def run(d):
    return {"self": one(d, "self"), "other": one(d, "other")}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
