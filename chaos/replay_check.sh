#!/usr/bin/env bash
# replay_check.sh UMAP_CHAOS FAULTS MUTATION SEED MAX_ITERATIONS [REPLAYS]
#
# A violation replays from its seed bit for bit (docs/chaos.md, "Replayable runs"):
# umap-chaos --replayable with --mutation MUTATION must report a violation within
# MAX_ITERATIONS iterations of FAULTS (it stops at the first); then `--iteration I` of that
# violation (the printed reproduction command) runs
# REPLAYS times (default 3) and must print the very same iteration line (the faults drawn,
# what happened, and a digest of the recovered file) and the very same violations, every time.
# Only the timing in parentheses may differ.
set -uo pipefail
chaos=$1 faults=$2 mutation=$3 seed=$4 max=$5 replays=${6:-3}
work=$(mktemp -d /var/tmp/umap-replay-XXXXXX)
trap 'rm -rf "$work"' EXIT

# The iteration line and the violation lines of iteration $1 in log $2, with the timing
# and the run's work dir $3 (named in the messages' "see LOG") removed.
evidence() {
  awk -v it="[$1]" -v dir="$3" '
    { while ((i = index($0, dir)) > 0) $0 = substr($0, 1, i - 1) "WORK" substr($0, i + length(dir)) }
    index($0, it " ") == 1 { p = 1; sub(/ \([0-9.]+ s\) VIOLATION$/, " VIOLATION"); print; next }
    p && /^  (VIOLATION|reproduce:)/ { print; next }
    p { exit }' "$2"
}

echo "== --replayable --mutation $mutation --faults $faults --seed $seed: the first violation within $max iterations"
nice -n 19 "$chaos" --seed "$seed" --faults "$faults" --iterations "$max" --mutation "$mutation" \
  --replayable --expect-violation --work-dir "$work/find" >"$work/find.log" 2>&1
rc=$?
if [[ $rc -eq 77 ]]; then
  grep -m1 'umap-skip: missing' "$work/find.log"
  exit 77
fi
it=$(grep -m1 -o -- '--iteration [0-9]*' "$work/find.log" | awk '{print $2}')
if [[ $rc -ne 0 || -z $it ]]; then
  cat "$work/find.log"
  echo "FAIL: no violation found (umap-chaos exit $rc)"
  exit 1
fi
evidence "$it" "$work/find.log" "$work/find" >"$work/original"
cat "$work/original"
grep -q 'recovered file fnv1a' "$work/original" || {
  echo "FAIL: the violation's line carries no recovered-file digest"
  exit 1
}
for r in $(seq 1 "$replays"); do
  nice -n 19 "$chaos" --seed "$seed" --faults "$faults" --iteration "$it" --mutation "$mutation" \
    --replayable --work-dir "$work/run-$r" >"$work/replay-$r.log" 2>&1
  evidence "$it" "$work/replay-$r.log" "$work/run-$r" >"$work/replay-$r"
  if ! diff -u "$work/original" "$work/replay-$r" >"$work/diff-$r"; then
    cat "$work/diff-$r"
    echo "FAIL: replay $r of iteration $it differs from the original run"
    exit 1
  fi
  rm -rf "$work/run-$r"
done
echo "PASS: iteration $it of seed $seed (--faults $faults, --mutation $mutation) replayed $replays times, bit for bit"
