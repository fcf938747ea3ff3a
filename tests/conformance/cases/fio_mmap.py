"""fio's mmap engine: random writes with crc32c verification, without and with --fsync,
two job processes (fio forks them; a job process ends with _exit, without munmap or
msync); then a second, plain fio run re-reads the file and verifies what the first wrote
(verify_only), so bytes the job processes left unsynced must have reached the file."""
import json
import os
import subprocess
import sys

SERVED = [r"/fio\.(plain|fsync)\.[01]\.0$"]
NEEDS = ["command:fio"]


def fio(d, name, extra, env=None):
    cmd = ["fio", "--name=" + name, "--ioengine=mmap", "--directory=" + d, "--size=16m",
           "--bs=4k", "--rw=randwrite", "--numjobs=2", "--verify=crc32c",
           "--randrepeat=1", "--output-format=terse", "--minimal"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    return r.returncode, (r.stderr.strip().splitlines() or [""])[-1][:300]


def run(d):
    seen = {}
    for name, extra in (("plain", []), ("fsync", ["--fsync=16"])):
        seen[name] = fio(d, "fio." + name, extra)
        # Plain fio (no shim) re-reads the files and checks every block's checksum.
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        seen[name + "_verify_only"] = fio(d, "fio." + name, ["--verify_only"], env)
    return seen


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
