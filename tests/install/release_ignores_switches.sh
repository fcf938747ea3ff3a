#!/usr/bin/env bash
# The release library carries no test switches: no crash points, no mutations, no test-only
# environment variables (cmake/UmapHelpers.cmake, base/crash_point.h, base/mutation.h).
#
#   release_ignores_switches.sh PROBE PROBE_TESTING RECOVER RECOVER_TESTING BACKLOG_WORKER
#                               ROT LIBUMAP_SO LIBUMAP_A BASE_TESTING_A WORKDIR
#
# PROBE is tests/install/map_write_sync.c linked against libumap.so, PROBE_TESTING the same
# source linked against the testing variant; RECOVER / RECOVER_TESTING are umap-recover and
# umap-recover-testing. Every check on the release side has its twin on the testing side
# that must come out the other way, so a check that cannot fail is caught here too.
set -u  # no pipefail: pipelines end in grep -q or head, judged by their output
probe=$1 probe_testing=$2 recover=$3 recover_testing=$4 backlog_worker=$5 rot=$6
libumap_so=$7 libumap_a=$8 base_testing_a=$9 work=${10}

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

rm -rf "$work" && mkdir -p "$work" || exit 1

# 1. Nothing of the switches is in the release artifacts: no registry, no switch symbols,
#    no environment variable names. The testing artifacts have them (the grep can match).
switch_strings='UMAP_CRASH_AT|UMAP_TEST_MUTATION|TEST MUTATION|journal\.before_commit|journal\.after_commit|apply\.mid_write|apply\.after_sync|gc\.before_delete|recovery\.mid_replay'
switch_symbols='umap::(crash_point|mutation)::'
for f in "$libumap_so" "$libumap_a" "$recover"; do
  if found=$(strings -a "$f" | grep -E "$switch_strings" | sort -u | head -5) && [ -n "$found" ]; then
    fail "$(basename "$f") holds switch strings: $found"
  else
    pass "$(basename "$f"): no crash-point registry, no UMAP_CRASH_AT, no UMAP_TEST_MUTATION"
  fi
  if found=$(nm -C "$f" 2>/dev/null | grep -E "$switch_symbols" | head -5) && [ -n "$found" ]; then
    fail "$(basename "$f") has switch symbols: $found"
  else
    pass "$(basename "$f"): no crash_point:: or mutation:: symbol"
  fi
done
for f in "$base_testing_a" "$recover_testing"; do
  n=$(strings -a "$f" | grep -cE "$switch_strings")
  m=$(nm -C "$f" 2>/dev/null | grep -cE "$switch_symbols")
  if [ "$n" -gt 0 ] && [ "$m" -gt 0 ]; then
    pass "$(basename "$f") (testing variant) has them: $n strings, $m symbols"
  else
    fail "$(basename "$f") (testing variant) shows $n switch strings and $m symbols: the checks above prove nothing"
  fi
done

# 2. UMAP_CRASH_AT kills a testing build at the point, and nothing in a release build.
run_probe() {  # run_probe BINARY NAME ENV...: prints the exit status (128+N for signal N)
  local bin=$1 name=$2
  shift 2
  env "$@" "$bin" "$work/$name.data" "$work/$name.journal" >"$work/$name.log" 2>&1
  echo $?
}
for point in journal.before_commit journal.after_commit apply.mid_write apply.after_sync \
             gc.before_delete; do
  rc=$(run_probe "$probe" "release-$point" "UMAP_CRASH_AT=$point")
  if [ "$rc" = 0 ] && grep -q '^ok ' "$work/release-$point.log"; then
    pass "release library with UMAP_CRASH_AT=$point: survives, bytes verified"
  else
    fail "release library with UMAP_CRASH_AT=$point: exit $rc: $(tail -3 "$work/release-$point.log")"
  fi
done
rc=$(run_probe "$probe_testing" testing-kill UMAP_CRASH_AT=journal.before_commit)
[ "$rc" = 137 ] && pass "testing variant with UMAP_CRASH_AT=journal.before_commit: SIGKILL" ||
  fail "testing variant with UMAP_CRASH_AT=journal.before_commit: exit $rc, expected SIGKILL (137)"
# A malformed value aborts a testing process at start-up; the release library never reads it.
rc=$(run_probe "$probe" release-bad UMAP_CRASH_AT=no.such_point UMAP_TEST_MUTATION=no_such)
[ "$rc" = 0 ] && pass "release library ignores UMAP_CRASH_AT=no.such_point and UMAP_TEST_MUTATION=no_such" ||
  fail "release library with unknown switch names: exit $rc: $(tail -3 "$work/release-bad.log")"
rc=$(run_probe "$probe_testing" testing-bad UMAP_CRASH_AT=no.such_point)
[ "$rc" = 134 ] && pass "testing variant aborts on UMAP_CRASH_AT=no.such_point" ||
  fail "testing variant with UMAP_CRASH_AT=no.such_point: exit $rc, expected SIGABRT (134)"
for m in apply_before_commit gc_before_sync skip_crc; do
  rc=$(run_probe "$probe" "release-$m" "UMAP_TEST_MUTATION=$m")
  [ "$rc" = 0 ] && ! grep -q 'TEST MUTATION' "$work/release-$m.log" &&
    pass "release library with UMAP_TEST_MUTATION=$m: correct bytes, no mutation armed" ||
    fail "release library with UMAP_TEST_MUTATION=$m: exit $rc: $(tail -3 "$work/release-$m.log")"
done

# 3. UMAP_TEST_MUTATION=skip_crc does not turn CRC checks off in the release umap-recover:
#    a journal whose committed block image has one bit flipped below Umap's CRC (RocksDB's
#    own checksums agree) is refused with exit 2 (data loss) and the damaged block is not
#    written (the replay streams in LSN order: the images before the damaged one are in the
#    file, none after it, docs/recovery.md). The testing umap-recover refuses it too, and
#    with skip_crc writes the garbled block.
data=$work/crc.data journal=$work/crc.journal
head -c $((16 * 4096)) /dev/zero >"$data"
"$backlog_worker" backlog "$data" "$journal" 3 >"$work/backlog.log" 2>&1 ||
  fail "backlog worker: exit $?: $(tail -3 "$work/backlog.log")"
if what=$("$rot" "$journal" 7 2>&1); then
  pass "journal rot: $what"
else
  fail "journal rot: $what"
fi
cp "$data" "$work/crc.before"
block_of() {  # the damaged block the refusal names in log $1
  grep -o 'block [0-9]*: journal payload record' "$1" | head -1 | grep -o '[0-9]*' | head -1
}
same_block() {  # same_block N: block N of the file is what it was before any replay
  cmp -s <(dd if="$data" bs=4096 skip="$1" count=1 status=none) \
    <(dd if="$work/crc.before" bs=4096 skip="$1" count=1 status=none)
}
UMAP_TEST_MUTATION=skip_crc "$recover" --journal "$journal" --progress never >"$work/recover.log" 2>&1
rc=$?
bad=$(block_of "$work/recover.log")
if [ "$rc" = 2 ] && [ -n "$bad" ] && same_block "$bad"; then
  pass "release umap-recover with UMAP_TEST_MUTATION=skip_crc: CRC mismatch of block $bad refused (exit 2), the block untouched"
else
  fail "release umap-recover with UMAP_TEST_MUTATION=skip_crc: exit $rc (expected 2), damaged block '${bad}': $(tail -3 "$work/recover.log")"
fi
"$recover_testing" --journal "$journal" --progress never >"$work/recover-testing.log" 2>&1
rc=$?
[ "$rc" = 2 ] && [ -n "$bad" ] && same_block "$bad" &&
  pass "testing umap-recover without a mutation: refused (exit 2)" ||
  fail "testing umap-recover without a mutation: exit $rc, expected 2"
UMAP_TEST_MUTATION=skip_crc "$recover_testing" --journal "$journal" --progress never \
  >"$work/recover-skip.log" 2>&1
rc=$?
if [ "$rc" = 0 ] && [ -n "$bad" ] && ! same_block "$bad"; then
  pass "testing umap-recover with skip_crc: replays the garbled image (exit 0): the switch is live there"
else
  fail "testing umap-recover with skip_crc: exit $rc, block '${bad}' $([ -n "$bad" ] && same_block "$bad" && echo untouched || echo changed); expected exit 0 and the block written"
fi

echo "$failures failed"
[ "$failures" = 0 ]
