#!/usr/bin/env bash
# umap-stat on a job stalled on a hung GlusterFS: a program that knows nothing about Umap
# (plain_mmap scan) maps a file on a real GlusterFS volume through libumap_preload.so
# (chosen by file-system type, UMAP_FSTYPES=fuse.glusterfs), the brick is stopped
# (SIGSTOP), the job faults on the file, and umap-stat must report the stalled read with
# the file's name and its age, within the read's deadline. Then the brick continues and
# the job finishes with the right bytes.
#
#   gluster_stall_test.sh PLAIN_MMAP LIBUMAP_PRELOAD UMAP_STAT
#
# Exit 0 = pass, 1 = fail, 77 = skip, only when the testbed reports that GlusterFS cannot
# run on this machine (its own exit code 77).
set -euo pipefail

readonly PLAIN=$1 PRELOAD=$2 STAT=$3
TB=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../faultinject/gluster" && pwd)/gluster-testbed
readonly TB
readonly NAME=ut-stall-$$
readonly PING=30            # a read on the stopped brick waits (no ENOTCONN) this long
readonly DEADLINE_MS=20000  # the job's I/O deadline (UMAP_IO_TIMEOUT_MS)
readonly SIZE=4194304 SEED=5

WORK=$(mktemp -d "${TMPDIR:-/tmp}/umap-stall-test.XXXXXX")
readonly WORK
readonly MNT=$WORK/mnt
UP=0
JOB_OUT= JOB_IN=
JOB_PID=

say() { printf '[%s stall] %s\n' "$(date +%T.%3N)" "$*"; }
fail() {
  printf '[%s stall] FAIL: %s\n' "$(date +%T.%3N)" "$*" >&2
  exit 1
}
now_ms() { local t; t=$(date +%s%N); echo $((t / 1000000)); }

cleanup() {
  local rc=$?
  if ((UP)); then
    "$TB" cont-brick --name "$NAME" >/dev/null 2>&1 || true
    [[ -n $JOB_PID ]] && kill -9 "$JOB_PID" 2>/dev/null || true
    if ((rc != 0 && rc != 77)); then
      "$TB" down --name "$NAME" --keep-logs "$WORK/logs" || true
      say "testbed logs kept in $WORK/logs; job stderr: $(cat "$WORK/job.err" 2>/dev/null)"
    else
      "$TB" down --name "$NAME" || true
    fi
  fi
  if ! awk -v m="$MNT" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; then
    if ((rc == 0 || rc == 77)); then rm -rf "$WORK"; fi
  fi
  exit "$rc"
}
trap cleanup EXIT

rc=0
"$TB" up-single --name "$NAME" --mount "$MNT" --ping-timeout "$PING" >"$WORK/up.out" \
  2>"$WORK/up.err" || rc=$?
if ((rc == 77)); then
  say "SKIP: GlusterFS cannot run here: $(grep -m1 'error:' "$WORK/up.err" | sed 's/.*error: //')"
  exit 77
fi
UP=1
((rc == 0)) || fail "bring-up failed ($rc): $(tail -5 "$WORK/up.err")"

# The file goes to the volume with O_DIRECT, so that no page cache on this client holds it:
# the job's reads must reach the brick.
"$PLAIN" write "$WORK/m.bin" "$SIZE" "$SEED" || fail "writing the pattern locally"
dd if="$WORK/m.bin" of="$MNT/m.bin" bs=1M oflag=direct conv=fsync status=none ||
  fail "O_DIRECT copy to $MNT failed"

coproc JOB_FDS {
  exec env LD_PRELOAD="$PRELOAD" UMAP_FSTYPES=fuse.glusterfs UMAP_IO_TIMEOUT_MS=$DEADLINE_MS \
    "$PLAIN" scan "$MNT/m.bin" "$SIZE" "$SEED" 2>"$WORK/job.err"
}
JOB_PID=$JOB_FDS_PID
# Our own copies of the coprocess's pipes: bash closes its own as soon as the job exits,
# which may be before its last line has been read.
exec {JOB_OUT}<&"${JOB_FDS[0]}" {JOB_IN}>&"${JOB_FDS[1]}"
read -r -t 60 -u "$JOB_OUT" line || fail "the job did not start: $(cat "$WORK/job.err")"
[[ $line == ready ]] || fail "the job printed '$line'"

# Umap serves the mapping (chosen by file-system type), nothing is stalled yet.
listed=0
for _ in $(seq 50); do
  if "$STAT" "$JOB_PID" >"$WORK/stat0.txt" 2>&1 && grep -qF "    $MNT/m.bin ro " "$WORK/stat0.txt"; then
    listed=1
    break
  fi
  sleep 0.1
done
((listed)) || fail "umap-stat does not list $MNT/m.bin: $(cat "$WORK/stat0.txt")"

"$TB" stop-brick --name "$NAME" || fail "stop-brick"
t0=$(now_ms)
echo go >&"$JOB_IN"
sleep 1.5

src=0
"$STAT" "$JOB_PID" >"$WORK/stat1.txt" 2>&1 || src=$?
"$STAT" --json "$JOB_PID" >"$WORK/stat1.json" 2>&1 || true
elapsed=$(($(now_ms) - t0))
say "umap-stat while the brick is stopped (${elapsed} ms after the first fault):"
sed 's/^/    /' "$WORK/stat1.txt"
((src == 3)) || fail "umap-stat exited $src, not 3 (stalled)"
grep -qF "STALLED    read of $MNT/m.bin offset " "$WORK/stat1.txt" ||
  fail "no STALLED line naming $MNT/m.bin"
python3 - "$WORK/stat1.json" "$MNT/m.bin" "$DEADLINE_MS" <<'PY' || fail "JSON: see above"
import json, sys
doc = json.load(open(sys.argv[1]))
r = doc["runtimes"][0]["in_flight"]["oldest_read"]
assert doc["stalled"] is True, doc["stalled"]
assert r is not None and r["file"] == sys.argv[2], r
assert r["stalled"] is True and 1000 <= r["age_ms"] < int(sys.argv[3]), r
print(f"    oldest read: {r['file']} offset {r['offset']} age {r['age_ms']} ms (deadline {sys.argv[3]} ms)")
PY
((elapsed < DEADLINE_MS)) || fail "the stall was seen only after the deadline (${elapsed} ms)"

"$TB" cont-brick --name "$NAME" >/dev/null || fail "cont-brick"
read -r -t 120 -u "$JOB_OUT" line || fail "the job did not finish after the brick came back"
[[ $line == scanned ]] || fail "the job printed '$line': $(cat "$WORK/job.err")"
exec {JOB_IN}>&-
wait "$JOB_PID" || fail "the job exited with $?: $(cat "$WORK/job.err")"
JOB_PID=
say "PASS: stalled read reported with file and age; the job read every byte once the brick came back"
