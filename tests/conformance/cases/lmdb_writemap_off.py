"""LMDB, writemap off: see lmdb_common.py."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lmdb_common  # noqa: E402

SERVED = [r"/solo/data\.mdb$"]
# lock.mdb is memory LMDB's processes share (its reader table and mutexes): the shim
# declines it even in one process; data.mdb goes to the kernel once two processes use it.
MAY_DECLINE = [r"/pair/data\.mdb$", r"/(solo|pair)/lock\.mdb$"]


def run(d):
    return lmdb_common.run(d, writemap=False)


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
