#!/usr/bin/env bash
# criu_test.sh MODE BUILD_DIR SOURCE_DIR: a Umap job checkpointed and restored with real
# criu, umap-ctl as its --action-script (docs/operations.md "Checkpoint a job with CRIU").
#
#   restore       the C API writer (atomic policy, signal fault mode): a dump with
#                 --leave-running (the job runs on: the hook's guardian resumed it), a dump
#                 that kills it (the file holds exactly a committed round: the unsynced
#                 round stays out of it), restore, keep writing, SIGKILL, umap-recover: the
#                 file holds exactly the last committed round. Then the older image is
#                 restored: its resume is refused (the journal moved on), the process dies
#                 on its first access, and the file is untouched.
#   relaxed       the same first path in handler fault mode with the relaxed policy (the
#                 quiesce writes unsynced blocks back; checks are per byte).
#   deferred      the same first path with defer_file_sync (the quiesce drains the journal
#                 sink's applier and stops its thread; the resumed job starts it again).
#   preload      an unmodified program (plain mmap/msync) under libumap_preload.so.
#   unprivileged  the job runs as nobody (user-mode-only userfaultfd). As nobody, umap-ctl
#                 quiesces it (no userfaultfd or io_uring left, no progress) and resumes it;
#                 another user (daemon) is refused. Then criu as root, as a site's
#                 checkpoint service would run it, dumps and restores it: that needs root
#                 with CAP_SYS_RESOURCE (criu reads and sets the rlimits of the process it
#                 dumps), else the test ends skipped naming "criu-user-process".
#
# criu 3.17 (Debian 12) fails on kernels >= 6.13; the test-only vvar shim makes it work
# (tests/criu/vvar_shim.c). Exit 77 (skipped) only when root or criu is missing, with the
# probe's line; criu installed but unable to run is a skip that names "criu", which CI
# counts as a failure (docs/testing.md "Skips").
set -uo pipefail
# ctest hands its own log file down as a descriptor above 2. A writer started from here
# would inherit it, and criu refuses to restore a process whose open file changed size
# since the dump: only the standard three go on.
for fd in $(ls /proc/$$/fd); do
  if ((fd > 2)); then eval "exec $fd>&-"; fi
done
mode=${1:?mode}
build=${2:?build dir}
src=${3:?source dir}
probe=$src/faultinject/probe-capability
writer=$build/tests/criu/criu_writer
shim=$build/tests/criu/libumap_criu_vvar_shim.so
umapctl=$build/tools/umap-ctl
recover=$build/tools/umap-recover
preload=$build/runtime/preload/libumap_preload.so
blocks=128  # 512 KiB; the cache below holds 64 blocks, so every round evicts
export PATH=$PATH:/usr/sbin:/sbin

if ! line=$("$probe" root criu); then
  echo "$line"
  exit 77
fi

work=$(mktemp -d /var/tmp/umap-criu-test."$mode".XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  [[ -n ${UMAP_TEST_KEEP:-} ]] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$mode]: $*"
  for f in "$work"/writer.log "$work"/img*/*.out "$work"/img*/dump.log "$work"/img*/restore.log; do
    [[ -f $f ]] && { echo "--- tail of $f"; tail -15 "$f"; }
  done
  exit 1
}
pass() { echo "ok [$mode]: $*"; }

# criu, through the vvar shim when this criu cannot read this kernel's vDSO layout.
criu_env=()
if ! criu check >"$work/check.log" 2>&1; then
  if LD_PRELOAD=$shim criu check >"$work/check.log" 2>&1; then
    criu_env=(env "LD_PRELOAD=$shim")
  else
    echo "umap-skip: missing criu: criu is installed but 'criu check' fails here, even with" \
      "the vvar shim: $(grep -m1 -i error "$work/check.log" || tail -1 "$work/check.log")"
    exit 77
  fi
fi
run_criu() { "${criu_env[@]}" criu "$@"; }

progress() { local v; v=$(head -c 20 "$work/progress" 2>/dev/null); echo $((10#${v:-0})); }
wait_progress() {  # wait_progress N: until the writer recorded round N
  local want=$1 i
  for ((i = 0; i < 600; i++)); do
    (($(progress) >= want)) && return 0
    sleep 0.05
  done
  fail "the writer did not reach round $want (at $(progress))"
}
alive() { [[ -d /proc/$1 ]] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
wait_gone() {  # until the pid is free again (reaped, not only dead): criu restores into it
  local i
  for ((i = 0; i < 200; i++)); do
    [[ -d /proc/$1 ]] || return 0
    sleep 0.05
  done
  return 1
}

per_byte=()
env_mode=(UMAP_CHECKPOINT=1 "UMAP_JOURNAL_DIR=$work/journal" UMAP_CACHE_BYTES=384K)
run_args=(run "$work/data" "$work/progress" "$blocks")
as_user=()
case $mode in
  restore) ;;
  relaxed)
    env_mode+=(UMAP_FAULT_MODE=handler UMAP_POLICY=relaxed)
    per_byte=(--per-byte) ;;
  deferred)
    env_mode+=(UMAP_DEFER_FILE_SYNC=1) ;;
  preload)
    env_mode+=("LD_PRELOAD=$preload" "UMAP_PATHS=$work")
    run_args+=(--plain) ;;
  unprivileged)
    if ! line=$("$probe" command:setpriv); then echo "$line"; exit 77; fi
    as_user=(setpriv --reuid nobody --regid nogroup --clear-groups)
    chmod 1777 "$work" ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac

"${as_user[@]}" "$writer" init "$work/data" "$blocks" || fail "init"
# Its own session (criu dumps a tree whose session it owns), no terminal, output appended
# to a file (criu checks the size of every other open file at restore).
(cd "$work" && exec setsid "${as_user[@]}" env "${env_mode[@]}" "$writer" "${run_args[@]}" \
  </dev/null >>"$work/writer.log" 2>&1) &
pid=$!
pids+=("$pid")
wait_progress 2
umap_ctl_state=$("$umapctl" state "$pid") || fail "umap-ctl state: $umap_ctl_state"
[[ $umap_ctl_state == *running* ]] || fail "state before the dump: $umap_ctl_state"

undumpable() { ls -l "/proc/$1/fd" 2>/dev/null | grep -E -c '\[(userfaultfd|io_uring)\]'; }
if [[ $mode == unprivileged ]]; then
  # The job's own user quiesces and resumes it; nobody else may.
  "${as_user[@]}" "$umapctl" quiesce "$pid" >"$work/ctl.out" 2>&1 ||
    fail "umap-ctl quiesce as nobody: $(cat "$work/ctl.out")"
  (($(undumpable "$pid") == 0)) || fail "quiesced, but the job still holds a userfaultfd/io_uring"
  at=$(progress)
  sleep 0.5
  (($(progress) <= at + 1)) || fail "quiesced, but the job went on writing ($at -> $(progress))"
  if setpriv --reuid daemon --regid daemon --clear-groups "$umapctl" resume "$pid" \
    >"$work/ctl.out" 2>&1; then
    fail "another user resumed the job"
  fi
  grep -q "may not control" "$work/ctl.out" || fail "another user: $(cat "$work/ctl.out")"
  "${as_user[@]}" "$umapctl" resume "$pid" >"$work/ctl.out" 2>&1 ||
    fail "umap-ctl resume as nobody: $(cat "$work/ctl.out")"
  wait_progress $((at + 3))
  pass "as nobody: quiesced (no userfaultfd or io_uring left, no progress), another user refused, resumed"
  if ! line=$("$probe" criu-user-process); then
    echo "$line"
    exit 77
  fi
fi

if [[ $mode == deferred ]]; then
  applier_threads() { cat /proc/"$1"/task/*/comm 2>/dev/null | grep -c -x umap-apply; }
  (($(applier_threads "$pid") > 0)) || fail "the deferred job has no applier thread"
  "$umapctl" quiesce "$pid" >"$work/ctl.out" 2>&1 || fail "umap-ctl quiesce: $(cat "$work/ctl.out")"
  (($(applier_threads "$pid") == 0)) || fail "quiesced, but the journal's applier thread runs on"
  "$umapctl" resume "$pid" >"$work/ctl.out" 2>&1 || fail "umap-ctl resume: $(cat "$work/ctl.out")"
  at=$(progress)
  wait_progress $((at + 3))
  (($(applier_threads "$pid") > 0)) || fail "resumed, but no applier thread writes the file"
  pass "quiesced with no applier thread left; resumed, its next commit started it again"
fi

dump() {  # dump IMAGE_DIR [criu options]
  local dir=$1
  shift
  mkdir -p "$dir"
  run_criu dump -t "$pid" -D "$dir" --action-script "$umapctl" -o dump.log -v4 "$@" \
    >"$dir/dump.out" 2>&1 || fail "criu dump $* failed: $(cat "$dir/dump.out")"
}
restore() {  # restore IMAGE_DIR: prints the restored pid
  local dir=$1 rc
  run_criu restore -D "$dir" -d --pidfile "$dir/restored.pid" --action-script "$umapctl" \
    -o restore.log -v4 >"$dir/restore.out" 2>&1
  rc=$?
  echo "$rc $(cat "$dir/restored.pid" 2>/dev/null)"
}

# 1. A dump that leaves the job running: the hook's guardian resumes it once criu exits.
if [[ $mode == restore ]]; then
  dump "$work/img-old" --leave-running
  at=$(progress)
  wait_progress $((at + 3))
  pass "dump --leave-running: the job was resumed and ran on (round $at -> $(progress))"
fi

# 2. The dump that kills the job.
dump "$work/img"
wait "$pid" 2>/dev/null
alive "$pid" && fail "the dumped job is still alive"
at=$(progress)
out=$("$writer" check "$work/data" "$blocks" "$at" $((at + 1)) "${per_byte[@]}") ||
  fail "after the dump the file is not a committed round ($at or $((at + 1))): $out"
pass "dump: job gone, file = $out (progress $at)"
if [[ ${#per_byte[@]} -eq 0 ]]; then
  cp "$work/data" "$work/data.at-dump"
fi

# 3. Restore; it resumes (post-resume) and writes on.
read -r rc rpid < <(restore "$work/img")
((rc == 0)) && [[ -n $rpid ]] || fail "criu restore exit $rc"
pids+=("$rpid")
[[ $rpid == "$pid" ]] || fail "restored as pid $rpid, dumped as $pid"
wait_progress $((at + 3))
umap_ctl_state=$("$umapctl" state "$rpid") || fail "umap-ctl state after restore: $umap_ctl_state"
pass "restore: resumed ($umap_ctl_state), rounds $at -> $(progress)"

# 4. SIGKILL, recover, check.
kill -9 "$rpid"
wait_gone "$rpid" || fail "the restored job did not die"
# Exit 1 is expected: the unsynced round's evicted blocks were staged, and are discarded.
"$recover" --journal "$work/journal" >"$work/recover.log" 2>&1
rc=$?
((rc <= 1)) || fail "umap-recover exit $rc: $(tail -3 "$work/recover.log")"
at=$(progress)
out=$("$writer" check "$work/data" "$blocks" "$at" $((at + 1)) "${per_byte[@]}") ||
  fail "after SIGKILL and umap-recover the file is not the last committed round ($at): $out"
pass "SIGKILL + umap-recover: file = $out (progress $at)"

# 5. The older image (step 1) restored after the job moved on: refused, fenced, harmless.
if [[ $mode == restore ]]; then
  cp "$work/data" "$work/data.final"
  log_before=$(stat -c %s "$work/writer.log")
  read -r rc rpid < <(restore "$work/img-old")
  [[ -n $rpid ]] && pids+=("$rpid")
  # criu 3.17 reports a failed post-resume hook in its log only (exit 0): the tasks run.
  [[ -n $rpid ]] && wait_gone "$rpid" || fail "the stale restored job (pid $rpid) did not die"
  tail -c +$((log_before + 1)) "$work/writer.log" >"$work/stale.log"
  grep -q "resume refused, runtime fenced" "$work/stale.log" ||
    fail "the stale job's log does not say it was fenced"
  # Whoever opened the journal after the dump (the restored job, umap-recover) took it over
  # with a later owner epoch (journal/journal_fence.h).
  grep -q "was taken over by" "$work/stale.log" ||
    fail "the stale job's log does not say why"
  cmp -s "$work/data" "$work/data.final" || fail "the stale job changed the file"
  "$recover" --journal "$work/journal" --dry-run >"$work/recover.log" 2>&1 ||
    fail "umap-recover --dry-run after the stale restore: exit $?, nothing should be left: $(tail -3 "$work/recover.log")"
  pass "older image restored: resume refused ($(grep -m1 -o 'epoch [0-9]*; this process (epoch [0-9]*)' "$work/stale.log")), job died on its first access, file untouched"
fi
exit 0
