#!/usr/bin/env bash
# mutation_check.sh UMAP_CHAOS MUTATION FAULTS SEED MAX_ITERATIONS
#
# Proves that the chaos suite catches a deliberate protocol bug (docs/chaos.md, "Mutation
# checks"): umap-chaos with --mutation MUTATION must report a violation within
# MAX_ITERATIONS iterations (it stops at the first), and the very same iterations without
# the mutation must pass. A suite that cannot fail, or that fails without the bug, is red.
# Exit 77 (skip) only when umap-chaos skipped for a missing capability it named.
set -uo pipefail
chaos=$1 mutation=$2 faults=$3 seed=$4 max=$5
work=$(mktemp -d /var/tmp/umap-mutation-XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "== with UMAP_TEST_MUTATION=$mutation (must be caught within $max iterations)"
nice -n 19 "$chaos" --seed "$seed" --faults "$faults" --iterations "$max" \
  --mutation "$mutation" --expect-violation --work-dir "$work/mut" | tee "$work/mut.log"
rc=${PIPESTATUS[0]}
if [[ $rc -eq 77 ]]; then
  # umap-chaos printed the missing capability ("umap-skip: missing CAP: WHY") above.
  echo "SKIP: umap-chaos cannot run here (see the umap-skip line above)"
  exit 77
fi
if [[ $rc -ne 0 ]]; then
  echo "FAIL: mutation $mutation was not caught in $max iterations (umap-chaos exit $rc)"
  exit 1
fi
n=$(sed -n 's/^\([0-9][0-9]*\) iterations in .*/\1/p' "$work/mut.log" | tail -1)
if [[ -z $n || $n -lt 1 ]]; then
  echo "FAIL: could not read the iteration count from umap-chaos's output"
  exit 1
fi

echo "== control: the same $n iterations without the mutation must pass"
nice -n 19 "$chaos" --seed "$seed" --faults "$faults" --iterations "$n" --work-dir "$work/ctl"
rc=$?
if [[ $rc -ne 0 ]]; then
  echo "FAIL: seed $seed, $n iterations of $faults fail without the mutation (exit $rc)"
  exit 1
fi
echo "PASS: $mutation caught in $n iterations; the same iterations pass without it"
