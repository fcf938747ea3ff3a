"""LMDB (python3-lmdb), 100,000 keys, used by lmdb_writemap_off.py and lmdb_writemap_on.py.

solo: one process puts the keys in transactions of 1,000 and reads every one back (served
by Umap). pair: a writer puts them while a reader process reads (both under the shim): LMDB
maps data.mdb (read-only, or writable with writemap) and lock.mdb, which is shared memory
between the processes (its reader table and mutexes), so the shim hands both files to the
kernel in both processes (declined, each with its log line). Then a fresh process checks
every key of each environment."""
import hashlib
import json
import os
import subprocess
import sys
import time

KEYS = 100_000

WRITER = r"""
import lmdb, sys
env = lmdb.open(sys.argv[1], map_size=256 << 20, writemap=sys.argv[2] == "1", max_dbs=0)
for t in range(100):
    with env.begin(write=True) as txn:
        for k in range(t * 1000, (t + 1) * 1000):
            txn.put(b"key%08d" % k, b"value%08d-" % (k * 7) + b"x" * (k % 50))
env.close()
print("writer done")
"""

READER = r"""
import lmdb, sys, time, os
env = lmdb.open(sys.argv[1], map_size=256 << 20, writemap=sys.argv[2] == "1", readonly=False)
bad, seen, last = 0, 0, 0
deadline = time.time() + 120
while time.time() < deadline:
    with env.begin() as txn:
        n = txn.stat()["entries"]
        if n < last: bad += 1
        last = n
        for k in range(0, n, max(1, n // 50)):
            v = txn.get(b"key%08d" % k)
            if v != b"value%08d-" % (k * 7) + b"x" * (k % 50): bad += 1
        seen += 1
    if n == 100000: break
    time.sleep(0.01)
env.close()
print(bad, last)
"""

CHECK = r"""
import lmdb, sys, hashlib
env = lmdb.open(sys.argv[1], map_size=256 << 20, readonly=True, lock=False)
h, n, wrong = hashlib.sha256(), 0, 0
with env.begin() as txn:
    for k in range(100000):
        v = txn.get(b"key%08d" % k)
        if v is None: continue
        n += 1
        if v != b"value%08d-" % (k * 7) + b"x" * (k % 50): wrong += 1
        h.update(v)
print(n, wrong, h.hexdigest()[:16])
"""


SOLO = r"""
import lmdb, sys
env = lmdb.open(sys.argv[1], map_size=256 << 20, writemap=sys.argv[2] == "1")
for t in range(100):
    with env.begin(write=True) as txn:
        for k in range(t * 1000, (t + 1) * 1000):
            txn.put(b"key%08d" % k, b"value%08d-" % (k * 7) + b"x" * (k % 50))
bad = 0
with env.begin() as txn:
    for k in range(100000):
        if txn.get(b"key%08d" % k) != b"value%08d-" % (k * 7) + b"x" * (k % 50): bad += 1
env.close()
print(bad)
"""


def check(env):
    c = subprocess.run([sys.executable, "-c", CHECK, env], capture_output=True, text=True,
                       timeout=60)
    k = c.stdout.split()
    return {"keys": int(k[0]) if k else c.stderr.strip()[-300:],
            "wrong_values": int(k[1]) if len(k) > 1 else None,
            "digest": k[2] if len(k) > 2 else None}


def run(d, writemap):
    wm = "1" if writemap else "0"
    solo = os.path.join(d, "solo")
    os.mkdir(solo)
    r = subprocess.run([sys.executable, "-c", SOLO, solo, wm], capture_output=True, text=True,
                       timeout=150)
    out = {"solo_bad_reads": r.stdout.strip() or r.stderr.strip()[-300:],
           "solo": check(solo)}
    out.update(run_pair(d, wm))
    return out


def run_pair(d, wm):
    env = os.path.join(d, "pair")
    os.mkdir(env)
    reader = subprocess.Popen([sys.executable, "-c", READER, env, wm], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    time.sleep(0.2)
    w = subprocess.run([sys.executable, "-c", WRITER, env, wm], capture_output=True, text=True,
                       timeout=150)
    out, err = reader.communicate(timeout=150)
    r = out.split()
    return {"pair_writer": w.stdout.strip() or w.stderr.strip()[-300:],
            "pair_reader_bad_reads": int(r[0]) if r else err.strip()[-300:],
            "pair_reader_last_entries": int(r[1]) if len(r) > 1 else None,
            "pair": check(env)}
