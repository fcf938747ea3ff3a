"""Another process writes a file this process maps. With the kernel, one copy: its pwrite is
seen at once, and this process's msync never undoes it. Under the shim the pwrite is seen
within the bound docs/preload.md states (this case waits 0.5 s), or at once when this
process takes a lock the writer held; and a msync never overwrites bytes the other process
wrote in parts of a block this process did not change (or refuses with EBUSY)."""
import errno
import fcntl
import json
import mmap
import os
import subprocess
import sys
import time

SERVED = [r"/shared\.bin$", r"/shared_rw\.bin$"]

WRITE = "import os,sys; fd=os.open(sys.argv[1], os.O_RDWR); os.pwrite(fd, sys.argv[2].encode(), int(sys.argv[3]))"

LOCKED_WRITE = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 1, 1 << 30)
os.pwrite(fd, b"LOCKED", 8192)
fcntl.lockf(fd, fcntl.LOCK_UN, 1, 1 << 30)
"""


def other(path, data, off):
    subprocess.run([sys.executable, "-c", WRITE, path, data, str(off)], check=True, timeout=30)


def run(d):
    seen = {}
    path = os.path.join(d, "shared.bin")
    with open(path, "wb") as f:
        f.write(b"." * (1 << 20))
    fd = os.open(path, os.O_RDWR)
    ro = mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED, mmap.PROT_READ)
    seen["before"] = bytes(ro[0:5]).decode()
    other(path, "OTHER", 0)
    time.sleep(0.5)
    seen["after_bound"] = bytes(ro[0:5]).decode()
    # A lock-disciplined reader: the writer's change is seen once the lock is taken.
    seen["before_lock"] = bytes(ro[8192:8198]).decode()
    subprocess.run([sys.executable, "-c", LOCKED_WRITE, path], check=True, timeout=30)
    fcntl.lockf(fd, fcntl.LOCK_SH, 1, 1 << 30)
    seen["after_lock"] = bytes(ro[8192:8198]).decode()
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, 1 << 30)
    ro.close()
    os.close(fd)
    # A writable mapping changes byte 100 of a block; the other process changes byte 200.
    path = os.path.join(d, "shared_rw.bin")
    with open(path, "wb") as f:
        f.write(b"." * (1 << 20))
    fd = os.open(path, os.O_RDWR)
    rw = mmap.mmap(fd, 1 << 20)
    rw[100:104] = b"MINE"
    other(path, "THEIRS", 200)
    time.sleep(0.5)
    try:
        rw.flush()
        seen["msync"] = "ok"
    except OSError as e:
        seen["msync"] = "ok" if e.errno == errno.EBUSY else errno.errorcode[e.errno]
    rw.close()
    os.close(fd)
    with open(path, "rb") as f:
        data = f.read()
    seen["their_bytes_kept"] = data[200:206].decode()
    return seen


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
