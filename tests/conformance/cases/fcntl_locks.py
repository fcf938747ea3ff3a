"""A process's own POSIX (fcntl) locks on a file survive everything the mapping does: map,
stores, msync, a second mapping, unmap, and the program's own close of another descriptor
is what drops them, as POSIX says. Another process tests the lock after each step."""
import fcntl
import json
import mmap
import os
import subprocess
import sys

SERVED = [r"/locked\.bin$"]

PROBE = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    print("free")
except OSError:
    print("held")
"""


def held(path):
    r = subprocess.run([sys.executable, "-c", PROBE, path], capture_output=True, text=True,
                       timeout=30)
    return r.stdout.strip() or r.stderr.strip()


def run(d):
    path = os.path.join(d, "locked.bin")
    with open(path, "wb") as f:
        f.write(b"\0" * (2 << 20))
    seen = {}
    fd = os.open(path, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)  # byte 0, inside the mapping
    fcntl.lockf(fd, fcntl.LOCK_SH, 1, 4096)  # a read lock too
    seen["locked"] = held(path)
    m = mmap.mmap(fd, 2 << 20)
    seen["mapped"] = held(path)
    for i in range(0, 1 << 20, 4096):
        m[i + 1] = 1
    seen["stored"] = held(path)
    m.flush()
    seen["msync"] = held(path)
    ro = mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED, mmap.PROT_READ)
    seen["second_mapping"] = held(path)
    ro.close()
    m.close()
    seen["unmapped"] = held(path)
    # The program's own lock calls still work on the mapped file.
    m = mmap.mmap(fd, 2 << 20)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 8192)
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, 8192)
    seen["lock_while_mapped"] = "ok"
    m.close()
    fd2 = os.open(path, os.O_RDONLY)
    os.close(fd2)  # POSIX: any close of the file drops the process's locks
    seen["after_own_close"] = held(path)
    os.close(fd)
    return seen


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
