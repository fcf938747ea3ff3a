"""NumPy's own test_memmap.py (Debian python3-numpy, run with python3-pytest), its
temporary files in the directory the shim serves."""
import json
import os
import re
import subprocess
import sys

SERVED = [r"/pytest-base/"]
TESTS = "/usr/lib/python3/dist-packages/numpy/core/tests/test_memmap.py"


def run(d):
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--basetemp", os.path.join(d, "pytest-base"), TESTS],
                       capture_output=True, text=True, timeout=300, cwd=d)
    tail = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-300:]
    counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|failed|error|skipped)", tail))
    return {"rc": r.returncode, "counts": counts}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
