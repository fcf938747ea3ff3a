"""SQLite in mmap mode, a writer and a reader process at once (rollback journal, SQLite's
own fcntl locks): the reader's every read transaction sees a committed state (each commit
keeps sum(v) == 3 * count(*)), the reader follows the writer, and the final database is
whole."""
import json
import os
import sqlite3
import subprocess
import sys
import time

# Declined: a process writes a file another process maps with Umap, and per-process caches
# cannot follow that between any two programs (NodeFiles); the kernel serves both.
SERVED = []
MAY_DECLINE = [r"/pair\.sqlite$"]
TXNS = 150

WRITER = r"""
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
c.execute("PRAGMA mmap_size=268435456")
c.execute("PRAGMA cache_size=16")
for t in range(int(sys.argv[2])):
    c.execute("BEGIN IMMEDIATE")
    c.executemany("insert into t(v, pad) values(3, ?)", ((str(t) * 60,) for _ in range(400)))
    c.execute("update t set v = v + 3 where id = ?", (t * 131 % (400 * (t + 1)) + 1,))
    c.execute("update t set v = v - 3 where id = ?", (t * 277 % (400 * (t + 1)) + 1,))
    c.execute("COMMIT")
    time.sleep(0.005)
print("writer done")
"""

READER = r"""
import sqlite3, sys, time, os
c = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
c.execute("PRAGMA mmap_size=268435456")
c.execute("PRAGMA cache_size=16")
bad, states, errors, last = 0, set(), [], -1
deadline = time.time() + 150
while time.time() < deadline:
    try:
        c.execute("BEGIN")
        n, s = c.execute("select count(*), coalesce(sum(v), 0) from t").fetchone()
        c.execute("COMMIT")
    except sqlite3.Error as e:
        errors.append(str(e)); c.execute("ROLLBACK") if c.in_transaction else None
        continue
    if s != 3 * n: bad += 1
    if n < last: bad += 1
    last = n
    states.add(n)
    if os.path.exists(sys.argv[2]) and n == 400 * int(sys.argv[3]):
        break
print(bad, len(states) > 2, last, len(errors))
"""


def run(d):
    db = os.path.join(d, "pair.sqlite")
    c = sqlite3.connect(db)
    c.execute("create table t(id integer primary key, v integer, pad text)")
    c.commit()
    c.close()
    done = os.path.join(d, "writer.done")
    reader = subprocess.Popen([sys.executable, "-c", READER, db, done, str(TXNS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    w = subprocess.run([sys.executable, "-c", WRITER, db, str(TXNS)], capture_output=True,
                       text=True, timeout=170)
    open(done, "w").close()
    out, err = reader.communicate(timeout=180)
    fields = out.split()
    c = sqlite3.connect(db)
    final = c.execute("select count(*), sum(v) from t").fetchone()
    check = c.execute("PRAGMA integrity_check").fetchone()[0]
    return {"writer": w.stdout.strip() or w.stderr.strip()[-300:],
            "reader_inconsistent_reads": int(fields[0]) if fields else err[-300:],
            "reader_followed": fields[1] if fields else None,
            "reader_last_count": int(fields[2]) if fields else None,
            "final": list(final), "integrity": check}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
