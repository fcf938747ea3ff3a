#!/usr/bin/env bash
# End-to-end test of faultinject/gluster/gluster-testbed on real GlusterFS.
#
#   gluster_testbed_test.sh single       one brick: O_DIRECT I/O, delay, EIO,
#                                        stopped brick, abort, clean teardown
#   gluster_testbed_test.sh cluster      2-node replica 2: reads ride through
#                                        a stopped brick, clean teardown
#   gluster_testbed_test.sh small-brick  64 MiB loop-mounted brick: ENOSPC,
#                                        loop device released by teardown
#
# Exit 0 = pass, 1 = fail, 77 = skip, only when the testbed reports that
# GlusterFS cannot run on this machine (its own exit code 77, after its
# capability probe); the skip prints the probe's "umap-skip: missing CAP: WHY"
# line, which CI checks (.ci/check-skips).
set -euo pipefail

readonly MODE=${1:-single}
TB=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../faultinject/gluster" && pwd)/gluster-testbed
readonly TB
readonly NAME=ut-${MODE%%-*}-$$
readonly STATE_ROOT=${UMAP_GLUSTER_STATE:-/run/umap-gluster}
readonly PING=3

WORK=$(mktemp -d "${TMPDIR:-/tmp}/umap-gluster-test.XXXXXX")
readonly WORK
readonly MNT=$WORK/mnt
UP=0
FAILED=0

say() { printf '[%s %s] %s\n' "$(date +%T.%3N)" "$MODE" "$*"; }
fail() {
  FAILED=1
  printf '[%s %s] FAIL: %s\n' "$(date +%T.%3N)" "$MODE" "$*" >&2
  exit 1
}
now_ms() { local t; t=$(date +%s%N); echo $((t / 1000000)); }

# On any exit: tear the testbed down (keeping its logs if we failed), and
# never delete the work directory while something is still mounted there.
cleanup() {
  local rc=$?
  if ((UP)); then
    if ((FAILED || rc != 0)); then
      "$TB" down --name "$NAME" --keep-logs "$WORK/logs" || true
      say "testbed logs kept in $WORK/logs"
    else
      "$TB" down --name "$NAME" || true
    fi
  fi
  if ! awk -v m="$MNT" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; then
    if ((FAILED == 0 && (rc == 0 || rc == 77))); then rm -rf "$WORK"; else rmdir "$MNT" 2>/dev/null || true; fi
  fi
  exit "$rc"
}
trap cleanup EXIT

# up ARGS...: bring the testbed up; skip (77) only if the testbed says
# GlusterFS cannot run here.
up() {
  local rc=0 err=$WORK/up.err
  "$@" --name "$NAME" --mount "$MNT" --ping-timeout "$PING" >"$WORK/up.out" 2>"$err" || rc=$?
  cat "$err" >&2
  if ((rc == 77)); then
    local line
    line=$(grep -m1 -o 'umap-skip: missing .*' "$err") || fail "the testbed exited 77 without naming a missing capability"
    echo "$line"
    exit 77
  fi
  UP=1   # from here on, cleanup runs down (a no-op if nothing is up)
  ((rc == 0)) || fail "bring-up failed with exit code $rc"
  [[ $(cat "$WORK/up.out") == "$MNT" ]] || fail "bring-up printed '$(cat "$WORK/up.out")', not $MNT"
  awk -v m="$MNT" '$2 == m && $3 == "fuse.glusterfs" { f = 1 } END { exit !f }' /proc/mounts ||
    fail "$MNT is not a fuse.glusterfs mount after bring-up"
}

# read_block OFFSET_4K: one O_DIRECT 4 KiB read, stderr to $WORK/read.err.
read_block() {
  timeout 60 dd if="$MNT/data" of=/dev/null bs=4k count=1 skip="$1" iflag=direct \
    status=none 2>"$WORK/read.err"
}

# time_reads N [SKIP]: milliseconds for N O_DIRECT 4 KiB reads in one process
# (one read syscall, so one gluster READ, each); all must succeed. One
# process, because fork+exec per read is noisy on a loaded machine.
time_reads() {
  local t0
  t0=$(now_ms)
  timeout 120 dd if="$MNT/data" of=/dev/null bs=4k count="$1" skip="${2:-0}" iflag=direct \
    status=none 2>"$WORK/read.err" || fail "O_DIRECT reads failed: $(cat "$WORK/read.err")"
  echo $(($(now_ms) - t0))
}

min() { if (($1 < $2)); then echo "$1"; else echo "$2"; fi; }

write_data() {  # 4 MiB of random data through the mount, O_DIRECT + fsync
  head -c 4M /dev/urandom >"$WORK/data.src"
  dd if="$WORK/data.src" of="$MNT/data" bs=1M oflag=direct conv=fsync status=none ||
    fail "O_DIRECT write through $MNT failed"
}

check_data() {  # whole file back with O_DIRECT, byte for byte
  timeout 120 dd if="$MNT/data" of="$WORK/data.back" bs=1M iflag=direct status=none ||
    fail "O_DIRECT read of $MNT/data failed"
  cmp -s "$WORK/data.src" "$WORK/data.back" || fail "data read back differs from data written"
}

# Everything the testbed runs, before teardown, so we can check it is gone.
snapshot_pids() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep "^ugl-$NAME-" || true); do
    ip netns pids "$ns"
  done | sort -u >"$WORK/pids"
  [[ -s $WORK/pids ]] || fail "no processes found in the testbed's namespaces"
}

down_and_check() {
  local p st left=""
  snapshot_pids
  local data
  data=$(cat "$STATE_ROOT/$NAME/data")
  local t0; t0=$(now_ms)
  "$TB" down --name "$NAME" || fail "down failed"
  UP=0
  say "teardown took $(($(now_ms) - t0)) ms"
  awk -v m="$MNT" '$2 == m { f = 1 } END { exit !f }' /proc/mounts && fail "$MNT still mounted"
  grep -q "$NAME" /proc/mounts && fail "a mount mentioning $NAME is left: $(grep "$NAME" /proc/mounts)"
  ip netns list | grep -q "^ugl-$NAME-" && fail "namespaces left: $(ip netns list | grep "^ugl-$NAME-")"
  while read -r p; do
    [[ -r /proc/$p/stat ]] || continue
    st=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null || echo gone)
    [[ $st == Z || $st == gone ]] && continue   # exited; waiting for init to reap it
    left+=" $p($(cat "/proc/$p/comm" 2>/dev/null))"
  done <"$WORK/pids"
  [[ -z $left ]] || fail "processes of the testbed still alive:$left"
  [[ -e $STATE_ROOT/$NAME ]] && fail "state directory $STATE_ROOT/$NAME left"
  [[ -e $data ]] && fail "brick data $data left"
  losetup -a | grep -qF "$data" && fail "loop device left: $(losetup -a | grep -F "$data")"
  # A second down is a no-op success.
  "$TB" down --name "$NAME" 2>/dev/null || fail "second down failed"
  say "teardown clean: no mount, namespace, process, loop device or state left"
}

test_single() {
  local t0 base slow fast i eio=0 other=0 ms
  t0=$(now_ms)
  up "$TB" up-single --option performance.strict-o-direct=on
  say "up-single took $(($(now_ms) - t0)) ms"

  # Idempotent: a second bring-up is a quick no-op.
  t0=$(now_ms)
  [[ $("$TB" up-single --name "$NAME" --mount "$MNT" --ping-timeout "$PING" 2>/dev/null) == "$MNT" ]] ||
    fail "second up-single did not succeed"
  say "second up-single (no-op) took $(($(now_ms) - t0)) ms"
  "$TB" status --name "$NAME" >/dev/null || fail "status is not healthy after bring-up"

  write_data
  check_data
  say "O_DIRECT write + read back of 4 MiB ok"

  # Latency: 20 reads, each delayed by 50 ms, take at least 1 s, and at least
  # 0.5 s more than without the delay (best of two runs each side).
  base=$(min "$(time_reads 20 0)" "$(time_reads 20 100)")
  "$TB" delay --name "$NAME" --percent 100 --usec 50000 --fops READ || fail "delay on failed"
  slow=$(time_reads 20 200)
  "$TB" delay --name "$NAME" --off || fail "delay off failed"
  fast=$(min "$(time_reads 20 300)" "$(time_reads 20 400)")
  say "20 direct reads: ${base} ms before, ${slow} ms with 50 ms delay per read, ${fast} ms after"
  ((slow >= 1000)) || fail "20 reads delayed by 50 ms each took only ${slow} ms"
  ((slow >= base + 500)) || fail "delay not measurable: ${base} ms -> ${slow} ms"
  ((fast + 500 <= slow)) || fail "delay did not go away: ${slow} ms -> ${fast} ms"

  # Errors: EIO on READ; gluster fails the first matching read, then 1 in 3-44.
  "$TB" errors --name "$NAME" --errno EIO --percent 100 --fops READ || fail "errors on failed"
  for ((i = 0; i < 100; i++)); do
    if ! read_block "$i"; then
      if grep -q 'Input/output error' "$WORK/read.err"; then eio=$((eio + 1)); else other=$((other + 1)); fi
    fi
  done
  "$TB" errors --name "$NAME" --off || fail "errors off failed"
  say "100 direct reads with EIO injection: $eio failed with EIO, $other otherwise"
  ((eio >= 1)) || fail "no read failed with EIO"
  ((other == 0)) || fail "$other reads failed with an error other than EIO"
  time_reads 50 >/dev/null
  say "errors off: 50 reads ok"

  # A stopped brick: a read fails with ENOTCONN after about ping-timeout.
  "$TB" stop-brick --name "$NAME" || fail "stop-brick failed"
  "$TB" status --name "$NAME" >/dev/null && fail "status should report degraded with a stopped brick"
  t0=$(now_ms)
  if read_block 5; then fail "read succeeded with the only brick stopped"; fi
  ms=$(($(now_ms) - t0))
  say "read with stopped brick failed after $ms ms: $(cat "$WORK/read.err")"
  grep -q 'Transport endpoint is not connected' "$WORK/read.err" || fail "expected ENOTCONN"
  ((ms <= (2 * PING + 5) * 1000)) || fail "failure took $ms ms, more than 2 x ping-timeout + 5 s"
  t0=$(now_ms)
  "$TB" cont-brick --name "$NAME" || fail "cont-brick failed"
  say "cont-brick (until reconnected) took $(($(now_ms) - t0)) ms"
  check_data
  say "reads work again after cont-brick"

  # Abort the FUSE connection: ENOTCONN; teardown must still be clean.
  "$TB" abort-fuse --mount "$MNT" || fail "abort-fuse failed"
  if read_block 1; then fail "read succeeded after abort-fuse"; fi
  grep -q 'Transport endpoint is not connected' "$WORK/read.err" || fail "expected ENOTCONN after abort"
  say "abort-fuse: reads fail with ENOTCONN"

  down_and_check
}

test_cluster() {
  local t0 ms
  t0=$(now_ms)
  up "$TB" up-cluster --nodes 2 --type replica2
  say "up-cluster (2 nodes, replica 2) took $(($(now_ms) - t0)) ms"
  "$TB" status --name "$NAME" || fail "status is not healthy after bring-up"
  write_data
  check_data
  "$TB" stop-brick --name "$NAME" --node 1 || fail "stop-brick failed"
  t0=$(now_ms)
  check_data
  ms=$(($(now_ms) - t0))
  say "full O_DIRECT read with node 1's brick stopped: ok in $ms ms (replica rides through)"
  read_block 7 || fail "single read with a stopped replica failed: $(cat "$WORK/read.err")"
  "$TB" cont-brick --name "$NAME" --node 1 || fail "cont-brick failed"
  "$TB" status --name "$NAME" >/dev/null || fail "status not healthy after cont-brick"
  down_and_check
}

test_small_brick() {
  local t0 rc=0
  t0=$(now_ms)
  up "$TB" up-single --small-brick 64M --option performance.strict-o-direct=on
  say "up-single with a 64 MiB brick took $(($(now_ms) - t0)) ms"
  dd if=/dev/zero of="$MNT/fill" bs=1M count=128 oflag=direct conv=fsync status=none \
    2>"$WORK/fill.err" || rc=$?
  ((rc != 0)) || fail "128 MiB fit on a 64 MiB brick"
  grep -q 'No space left on device' "$WORK/fill.err" || fail "expected ENOSPC, got: $(cat "$WORK/fill.err")"
  say "filling the brick: $(head -1 "$WORK/fill.err")"
  down_and_check
}

case $MODE in
  single) test_single ;;
  cluster) test_cluster ;;
  small-brick) test_small_brick ;;
  *) echo "usage: $0 single|cluster|small-brick" >&2; exit 2 ;;
esac
say "PASS"
