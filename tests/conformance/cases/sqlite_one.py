"""SQLite in mmap mode (PRAGMA mmap_size), one process: the sqlite3 shell builds a
200,000-row table, indexes and updates it with a small page cache (so pages are read back
through the mapping after SQLite wrote them with pwrite), then checks the database."""
import json
import os
import subprocess
import sys

SERVED = [r"/db\.sqlite$"]
NEEDS = ["command:sqlite3"]

SCRIPT = """
PRAGMA mmap_size=1073741824;
PRAGMA cache_size=16;
create table t(id integer primary key, v integer, s text);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<200000)
  INSERT INTO t(v,s) SELECT x, printf('%040d', x * 7919 % 1000003) FROM c;
update t set v = v*2 where id % 3 = 0;
create index iv on t(v);
update t set s = 'zz' where id % 5 = 0;
delete from t where id % 11 = 0;
PRAGMA integrity_check;
select count(*), sum(v), sum(length(s)) from t;
"""


def run(d):
    db = os.path.join(d, "db.sqlite")
    r = subprocess.run(["sqlite3", db], input=SCRIPT, capture_output=True, text=True,
                       timeout=180)
    check = subprocess.run(["sqlite3", db, "PRAGMA integrity_check; select count(*), sum(v) "
                            "from t indexed by iv where v > 0;"],
                           capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]})
    return {"rc": r.returncode, "output": r.stdout.strip().splitlines()[-3:],
            "errors": r.stderr.strip()[-500:],
            "reopened_plainly": check.stdout.strip().splitlines()}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1]), sort_keys=True))
