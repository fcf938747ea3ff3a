#!/usr/bin/env bash
# Two nodes on one GlusterFS volume (docs/consistency.md, docs/operations.md §4): client nodes
# of the testbed (faultinject/gluster/gluster-testbed client-add), each a network, mount and
# UTS namespace of its own that mounts the volume at the same path.
#
#   cluster_test.sh coherence      COHERENCE_WRITER NODE_WRITER UMAP_RECOVER
#       partitioned writers on two nodes: overlapping -> EBUSY at once, naming the holder on
#       the other node; disjoint -> both succeed and the file holds both; read-only refuses a
#       write (SIGSEGV, reason logged); a reader is told its view may be stale; a writer cut
#       off from the volume and back finds its lock lost and writes nothing (ENOLCK)
#   cluster_test.sh node-loss-kill ...   (as root)
#   cluster_test.sh node-loss-cut  ...   (as the user nobody)
#       a writer on node A with its journal on the volume is SIGKILLed (kill) or cut off from
#       the volume while it keeps running (cut); the job restarts on node B: umap-recover,
#       map again: the file is the last committed state, and B writes on. cut: A comes back,
#       its umsync is refused (ESTALE, the log says the journal was taken over), and the
#       file and the journal are left as B left them.
#
# Exit 0 pass, 1 fail, 77 skip (only the testbed's own "cannot run here", with its line).
set -euo pipefail

readonly MODE=$1 CW=$2 NW=$3 RECOVER=$4
TB=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../faultinject/gluster" && pwd)/gluster-testbed
readonly TB
readonly NAME=ucl-${MODE//-/}-$$
readonly NAME_SHORT=${NAME:0:24}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/umap-cluster-test.XXXXXX")
readonly WORK MNT=$WORK/mnt
chmod 0755 "$WORK"
UP=0
FAILED=0
readonly SEED=11 BLOCKS=64 WRITES=24

say() { printf '[%s %s] %s\n' "$(date +%T.%3N)" "$MODE" "$*"; }
fail() {
  FAILED=1
  printf '[%s %s] FAIL: %s\n' "$(date +%T.%3N)" "$MODE" "$*" >&2
  exit 1
}
cleanup() {
  local rc=$?
  if ((UP)); then
    if ((FAILED || rc != 0)); then
      "$TB" down --name "$NAME_SHORT" --keep-logs "$WORK/logs" >/dev/null 2>&1 || true
      say "testbed logs and the run's files kept in $WORK"
    else
      "$TB" down --name "$NAME_SHORT" >/dev/null 2>&1 || true
    fi
  fi
  if ! awk -v m="$MNT" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; then
    ((FAILED == 0 && (rc == 0 || rc == 77))) && rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT

# One storage node and two client nodes. The bricks drop a silent client after about 3 s
# (TCP keepalive and user timeout), and so release its locks, as a real server does after
# its own (longer) timeouts; clients give up on a silent server after 3 s (ping-timeout).
up() {
  local rc=0
  "$TB" up-cluster --name "$NAME_SHORT" --nodes 1 --type distribute --mount "$MNT" \
    --ping-timeout 3 --option server.keepalive-time=1 --option server.keepalive-interval=1 \
    --option server.keepalive-count=2 --option server.tcp-user-timeout=3 \
    >"$WORK/up.out" 2>"$WORK/up.err" || rc=$?
  if ((rc == 77)); then
    grep -m1 -o 'umap-skip: missing .*' "$WORK/up.err" || fail "testbed exit 77 without a reason"
    exit 77
  fi
  UP=1
  ((rc == 0)) || { cat "$WORK/up.err" >&2; fail "bring-up failed ($rc)"; }
  "$TB" client-add --name "$NAME_SHORT" --client a >/dev/null 2>>"$WORK/up.err" ||
    fail "client node a: $(tail -3 "$WORK/up.err")"
  "$TB" client-add --name "$NAME_SHORT" --client b >/dev/null 2>>"$WORK/up.err" ||
    fail "client node b: $(tail -3 "$WORK/up.err")"
}

on() {  # on NODE CMD...: run CMD on client node NODE
  local node=$1; shift
  "$TB" client-exec --name "$NAME_SHORT" --client "$node" -- "$@"
}
as_user() {  # as_user USER CMD...
  local user=$1; shift
  if [[ $user == root ]]; then "$@"; else
    setpriv --reuid="$user" --regid=nogroup --clear-groups env HOME="$WORK" TMPDIR="$WORK" "$@"
  fi
}
# wait_line FILE PATTERN [SECONDS]: until FILE has a line matching PATTERN.
wait_line() {
  local f=$1 pat=$2 end=$((SECONDS + ${3:-60}))
  until grep -qE "$pat" "$f" 2>/dev/null; do
    ((SECONDS < end)) || fail "no '$pat' in $f after ${3:-60}s: $(tail -5 "$f" 2>/dev/null)"
    sleep 0.1
  done
}
expect_in() {  # expect_in FILE TEXT WHAT
  grep -qF -- "$2" "$1" || fail "$3: no '$2' in $1: $(tail -5 "$1")"
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# sum FILE: its SHA-256 as the servers hold it. O_DIRECT: a FUSE client shows its own cached
# pages of a file another node wrote (docs/dfs-testbed.md, trap 15).
sum() { dd if="$1" iflag=direct bs=1M status=none | sha256sum; }
# journal_sums DIR: every file of a journal but its owner record, as the servers hold them.
journal_sums() {
  local f
  for f in "$1"/*; do [[ ${f##*/} == UMAP-OWNER ]] || echo "${f##*/} $(sum "$f")"; done
}

# ------------------------------------------------------------------------------------------
coherence() {
  local d=$MNT/coh f apid t0 ms rc
  mkdir -p "$d"
  f=$d/f
  head -c $((64 * 4096)) /dev/zero | tr '\0' 'o' >"$f"
  sync "$f"

  say "1. overlapping partitioned writers on two nodes"
  on a "$CW" "$f" --mode partitioned-write --range 0:65536 --write 0:65536:A --sync \
    --hold "$WORK/rel1" --journal "$WORK/ja1" >"$WORK/a1.out" 2>"$WORK/a1.err" &
  local job_a=$! job_b
  wait_line "$WORK/a1.out" '^synced'
  apid=$(sed -n 's/^mapped pid \([0-9]*\)$/\1/p' "$WORK/a1.out")
  t0=$(now_ms)
  rc=0
  on b "$CW" "$f" --mode partitioned-write --range 32768:65536 --write 32768:65536:B --sync \
    --journal "$WORK/jb1" >"$WORK/b1.out" 2>"$WORK/b1.err" || rc=$?
  ms=$(($(now_ms) - t0))
  ((rc == 3)) || fail "the overlapping writer on node b exited $rc, not 3 (map refused)"
  expect_in "$WORK/b1.out" "map-error $(errno_of EBUSY)" "node b's umap_ex2"
  expect_in "$WORK/b1.err" "a write lock on bytes [0, 65536) is held by pid $apid on node-a" \
    "the refusal names the holder on node a"
  ((ms < 5000)) || fail "the refusal took $ms ms: not fail-fast"
  say "   refused in $ms ms: $(grep -o 'cannot map.*' "$WORK/b1.err" | head -1)"
  touch "$WORK/rel1"
  wait $job_a || fail "node a's writer failed: $(tail -3 "$WORK/a1.err")"

  say "2. disjoint partitioned writers on two nodes"
  on a "$CW" "$f" --mode partitioned-write --range 0:65536 --write 0:65536:C --sync \
    --hold "$WORK/rel2" --journal "$WORK/ja2" >"$WORK/a2.out" 2>"$WORK/a2.err" &
  job_a=$!
  on b "$CW" "$f" --mode partitioned-write --range 65536:65536 --write 65536:65536:D --sync \
    --hold "$WORK/rel2" --journal "$WORK/jb2" >"$WORK/b2.out" 2>"$WORK/b2.err" &
  job_b=$!
  wait_line "$WORK/a2.out" '^synced'
  wait_line "$WORK/b2.out" '^synced'
  touch "$WORK/rel2"
  wait $job_a || fail "node a's disjoint writer failed: $(tail -3 "$WORK/a2.err")"
  wait $job_b || fail "node b's disjoint writer failed: $(tail -3 "$WORK/b2.err")"
  local want
  want=$( { head -c 65536 /dev/zero | tr '\0' C; head -c 65536 /dev/zero | tr '\0' D;
            head -c $((128 * 1024)) /dev/zero | tr '\0' o; } | sha256sum)
  [[ $(sum "$f") == "$want" ]] || fail "the file does not hold both writers' bytes"
  [[ $(on b dd if="$f" iflag=direct bs=1M status=none | sha256sum) == "$want" ]] ||
    fail "node b does not see both writers' bytes"

  say "3. read-only refuses a write"
  rc=0
  on b "$CW" "$f" --mode read-only --write 8192:10:R --sync >"$WORK/b3.out" 2>"$WORK/b3.err" ||
    rc=$?
  ((rc == 128 + 11)) || fail "the read-only writer exited $rc, not SIGSEGV"
  expect_in "$WORK/b3.err" "(file offset 8192 of $f) was refused: the mapping is read-only" \
    "the SIGSEGV reason"
  [[ $(sum "$f") == "$want" ]] || fail "a read-only mapping changed the file"

  say "4. a reader is told its view may be stale"
  on a "$CW" "$f" --mode partitioned-write --range 0:8192 --sync --hold "$WORK/rel4" \
    --journal "$WORK/ja4" >"$WORK/a4.out" 2>"$WORK/a4.err" &
  job_a=$!
  wait_line "$WORK/a4.out" '^synced'
  apid=$(sed -n 's/^mapped pid \([0-9]*\)$/\1/p' "$WORK/a4.out")
  on b "$CW" "$f" --mode read-only >"$WORK/b4.out" 2>"$WORK/b4.err" ||
    fail "the reader failed: $(tail -3 "$WORK/b4.err")"
  expect_in "$WORK/b4.err" "held by pid $apid on node-a" "the stale-view warning names the writer"
  expect_in "$WORK/b4.err" "view of those bytes may be stale" "the stale-view warning"
  touch "$WORK/rel4"
  wait $job_a || fail "node a's writer (4) failed"

  say "5. a writer cut off from the volume loses its lock and writes nothing more"
  on a "$CW" "$f" --mode partitioned-write --range 0:65536 --write 0:65536:E --sync \
    --hold "$WORK/rel5" --then-write 0:4096:X --journal "$WORK/ja5" \
    >"$WORK/a5.out" 2>"$WORK/a5.err" &
  job_a=$!
  wait_line "$WORK/a5.out" '^synced'
  "$TB" client-cut --name "$NAME_SHORT" --client a --wait-gone 60 >/dev/null 2>&1 ||
    fail "client-cut of node a"
  on b "$CW" "$f" --mode partitioned-write --range 0:65536 --write 0:65536:F --sync \
    --journal "$WORK/jb5" >"$WORK/b5.out" 2>"$WORK/b5.err" ||
    fail "node b could not take node a's range once the bricks dropped a: $(tail -3 "$WORK/b5.err")"
  local bpid
  bpid=$(sed -n 's/^mapped pid \([0-9]*\)$/\1/p' "$WORK/b5.out")
  "$TB" client-heal --name "$NAME_SHORT" --client a >/dev/null 2>&1 || fail "client-heal of node a"
  local before
  before=$(sum "$f")
  touch "$WORK/rel5"
  rc=0
  wait $job_a || rc=$?
  ((rc == 4)) || fail "node a's writer exited $rc, not 4 (its umsync refused): $(cat "$WORK/a5.out")"
  expect_in "$WORK/a5.out" "umsync-error $(errno_of ENOLCK)" "node a's refused umsync"
  expect_in "$WORK/a5.err" "lost its lock on bytes [0, 65536)" "node a says why"
  [[ $(sum "$f") == "$before" ]] || fail "node a wrote into the file after losing its lock"
  say "   node a (back, lock lost to node b's pid $bpid): $(grep -o 'lost its lock.*' "$WORK/a5.err" | head -1 | cut -c1-160)"
}

errno_of() { python3 -c "import errno; print(errno.$1)"; }

# ------------------------------------------------------------------------------------------
# node_loss VARIANT USER
node_loss() {
  local variant=$1 user=$2 d=$MNT/job f j oa ob acked begun rc
  mkdir -p "$d"
  chown "$user" "$d"
  f=$d/data
  j=$d/journal
  oa=$WORK/oracle-a
  ob=$WORK/oracle-b
  chmod 1777 "$WORK"  # others write their oracle files here; sticky, so a journal below it stays private (base/private_dir.h)
  as_user "$user" "$NW" init "$f" "$SEED" "$BLOCKS" || fail "initial file"

  say "job on node a (journal on the volume, as $user)"
  on a setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
    "$NW" write "$f" "$j" "$oa" "$SEED" "$BLOCKS" "$WRITES" 1 \
    >"$WORK/a.out" 2>"$WORK/a.err" &
  local job_a=$! apid
  wait_line "$oa" '^A 8$'
  apid=$(awk '$1 == "M" { print $2 }' "$oa")
  [[ -n $apid ]] || fail "node a's writer did not say its pid"

  if [[ $variant == kill ]]; then
    kill -KILL "$apid"
    wait $job_a || true
    say "node a's job SIGKILLed after round $(awk '$1 == "A" { a = $2 } END { print a }' "$oa")"
  else
    "$TB" client-cut --name "$NAME_SHORT" --client a --wait-gone 60 >/dev/null 2>&1 ||
      fail "client-cut of node a"
    proc_alive "$apid" || fail "node a's job died when cut off (it must keep running)"
    say "node a cut off after round $(awk '$1 == "A" { a = $2 } END { print a }' "$oa"); its job still runs"
  fi
  acked=$(awk '$1 == "A" { a = $2 } END { print a + 0 }' "$oa")
  begun=$(awk '$1 == "B" { b = $2 } END { print b + 0 }' "$oa")

  say "the job restarts on node b: umap-recover, then map again"
  rc=0
  on b setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
    "$RECOVER" --journal "$j" --json replay >"$WORK/recover.json" 2>"$WORK/recover.err" || rc=$?
  ((rc == 0 || rc == 1)) || fail "umap-recover on node b exited $rc: $(tail -5 "$WORK/recover.err")"
  if [[ $variant == cut ]]; then
    expect_in "$WORK/recover.err" "taking over from pid $apid on node-a" \
      "umap-recover on node b names the former owner"
  fi
  on b setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
    "$NW" check "$f" "$SEED" "$BLOCKS" "$WRITES" "$acked" "$begun" >"$WORK/check.out" 2>"$WORK/check.err" ||
    fail "after recovery on node b the file is no committed state in [$acked, $begun]: $(cat "$WORK/check.out")"
  local state
  state=$(sed -n 's/^state \([0-9]*\)$/\1/p' "$WORK/check.out")
  say "   the file is state $state (acknowledged $acked, begun $begun)"
  local from=$((begun + 1))
  on b setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
    "$NW" write "$f" "$j" "$ob" "$SEED" "$BLOCKS" "$WRITES" "$from" 5 \
    >"$WORK/b.out" 2>"$WORK/b.err" || fail "the job on node b failed: $(tail -5 "$WORK/b.err")"
  on b setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
    "$NW" check "$f" "$SEED" "$BLOCKS" "$WRITES" "$state" "$state" "$from" $((from + 4)) \
    >"$WORK/check2.out" 2>"$WORK/check2.err" ||
    fail "node b's rounds are not in the file: $(cat "$WORK/check2.out")"
  say "   node b wrote rounds $from..$((from + 4)) on top of it: the file is exactly that"
  [[ $variant == cut ]] || return 0

  say "node a comes back: it must write nothing and say why"
  local file_before journal_before
  file_before=$(sum "$f")
  journal_before=$(journal_sums "$j")
  "$TB" client-heal --name "$NAME_SHORT" --client a >/dev/null 2>&1 || fail "client-heal of node a"
  wait_line "$oa" '^F ' 60
  rc=0
  wait $job_a || rc=$?
  ((rc == 5)) || fail "node a's job exited $rc, not 5 (fenced): $(tail -5 "$WORK/a.err")"
  grep -q '^F ' "$oa" || fail "node a's job recorded no refused umsync"
  expect_in "$WORK/a.err" "Stale file handle" "node a's umsync errno (ESTALE)"
  grep -qE "journal $j (was taken over by|is no longer this process's)" "$WORK/a.err" ||
    fail "node a does not say its journal was taken over: $(grep -i journal "$WORK/a.err" | tail -3)"
  [[ $(sum "$f") == "$file_before" ]] || fail "node a wrote into the file after the takeover"
  [[ $(journal_sums "$j") == "$journal_before" ]] || fail "node a wrote into the journal after the takeover"
  say "   refused: $(grep -oE "journal $j (was taken over|is no longer)[^;]*" "$WORK/a.err" | head -1 | cut -c1-200)"
  # The journal is whole: the next owner opens it and finds nothing to replay.
  rc=0
  on b setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
    "$RECOVER" --journal "$j" status >"$WORK/status.out" 2>&1 || rc=$?
  ((rc == 0)) || fail "umap-recover status after node a's return exited $rc: $(tail -5 "$WORK/status.out")"
}

proc_alive() { [[ -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat") != Z ]]; }

"$(dirname "$TB")/../probe-capability" root command:setpriv command:python3 || exit 77
up
case $MODE in
  coherence) coherence ;;
  node-loss-kill) node_loss kill root ;;
  node-loss-cut) node_loss cut nobody ;;
  *) fail "unknown mode $MODE" ;;
esac
say "PASS"
