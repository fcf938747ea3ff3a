#!/bin/bash
# The standard benchmark matrix (docs/benchmarks.md), within 15 minutes on a 2-vCPU VM:
#   1. local disk: 4 KiB random read and random write, 1/2/4/8/16 threads, umap vs mmap vs
#      pread, file 4x umap's cache, 3 repeats; the locality sweep L = 0..1 (mean merged read
#      size); and the GlusterFS shape (64 MiB file, 16 MiB cache) as the local reference;
#   2. a one-brick GlusterFS volume (faultinject/gluster/gluster-testbed): random read,
#      random write with a umsync/msync every 100 ops, random read with locality L=0.8,
#      1/4/8/16 threads; the locality sweep at 8 threads; random read in a cgroup of half
#      the file; a sequential scan of a 256 MiB file under a cgroup limit of 1/4 of it (skipped, with the reason, only if GlusterFS
#      cannot start here).
# Writes bench/results/<date>/: results.jsonl (one JSON object per run), summary.md (machine,
# commands, ratio tables with min-max), *.png (throughput vs threads per backend), *.log.
#
# Usage: bench/run-standard.sh BUILD_DIR
# Knobs (environment): UMAP_BENCH_OUT (result dir), UMAP_BENCH_REPEATS (3),
#   UMAP_BENCH_LOCAL_OPS (5000 per thread), UMAP_BENCH_GLUSTER_OPS (1500 per thread),
#   UMAP_BENCH_SKIP_GLUSTER=1, UMAP_BENCH_LOCAL_DIR (where the local file goes: /var/tmp).
set -uo pipefail

BUILD=${1:?usage: bench/run-standard.sh BUILD_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$(cd "$BUILD" && pwd)/bench/umap-bench
TB=$ROOT/faultinject/gluster/gluster-testbed
[ -x "$BENCH" ] || { echo "run-standard: $BENCH not built (cmake --build $BUILD --target umap-bench)" >&2; exit 2; }
command -v gnuplot >/dev/null || echo "run-standard: gnuplot missing: no PNG plots (apt-get install gnuplot-nox)" >&2

STAMP=$(date +%Y-%m-%d-%H%M%S)
OUT=${UMAP_BENCH_OUT:-$ROOT/bench/results/$STAMP}
REPEATS=${UMAP_BENCH_REPEATS:-3}
LOCAL_OPS=${UMAP_BENCH_LOCAL_OPS:-5000}
GL_OPS=${UMAP_BENCH_GLUSTER_OPS:-1500}
LOCAL_DIR=${UMAP_BENCH_LOCAL_DIR:-/var/tmp}/umap-bench-std-$$
GL_NAME=umapbench-$$
GL_ROOT=/var/tmp/umap-bench-gluster-$$
GL_MNT=$GL_ROOT/mnt
gl_up=0
mkdir -p "$OUT" "$LOCAL_DIR" || exit 2

cleanup() {
  local rc=$?
  rm -rf "$LOCAL_DIR"
  if [ $gl_up = 1 ]; then
    echo "run-standard: tearing down GlusterFS testbed $GL_NAME"
    "$TB" down --name "$GL_NAME" >>"$OUT/gluster-testbed.log" 2>&1 ||
      echo "run-standard: '$TB down --name $GL_NAME' failed; see $OUT/gluster-testbed.log" >&2
  fi
  rmdir "$GL_MNT" "$GL_ROOT" 2>/dev/null
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

SUMMARY=$OUT/summary.md
JSON=$OUT/results.jsonl
START=$(date +%s)
{
  echo "# Umap standard benchmark, $STAMP"
  echo
  echo "- machine: $(nproc) vCPU, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r), $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "- local file system: $(df -T "$LOCAL_DIR" | awk 'NR==2 {print $2 " on " $1}')"
  echo "- commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD -- runtime 2>/dev/null || echo ' (runtime/ modified)')"
  echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work shares this machine: quote ratios, not absolute numbers)"
  echo "- ratios are umap/mmap (and umap/pread) per repeat, from runs of the same round; the table gives the median and min–max over $REPEATS repeats"
  echo
} >"$SUMMARY"

failed=0
run() {  # run LABEL LOG ARGS...: one umap-bench invocation, logged, commands recorded
  local label=$1 log=$2 t0
  shift 2
  t0=$(date +%s)
  echo "- $label: \`umap-bench $*\`" >>"$OUT/commands.md"
  echo "=== $label: $BENCH $*"
  # A stalled runtime is reported by umap-bench's watchdog (--stall-seconds); the timeout is
  # a last resort so that the matrix always ends.
  timeout --kill-after=20 900 "$BENCH" "$@" --json "$JSON" --markdown "$OUT/tables.md" \
    --plot-dir "$OUT" --label "$label" 2>&1 | tee "$OUT/$log"
  local rc=${PIPESTATUS[0]}
  echo "  (took $(( $(date +%s) - t0 )) s)" >>"$OUT/commands.md"
  if [ "$rc" -ne 0 ]; then
    echo "run-standard: $label: umap-bench exited $rc (see $OUT/$log)" | tee -a "$OUT/problems.txt" >&2
    failed=1
  fi
}

# --- 1. local disk ---------------------------------------------------------------------
: >"$OUT/commands.md"
: >"$OUT/tables.md"
run local local.log --file "$LOCAL_DIR/bench.dat" --file-size 256M --cache 64M \
  --backends umap,mmap,pread --pattern random --access read,write --threads 1,2,4,8,16 \
  --ops "$LOCAL_OPS" --repeats "$REPEATS" --stall-seconds 60
run local local-locality.log --file "$LOCAL_DIR/bench.dat" --file-size 256M --cache 64M \
  --backends umap,mmap --pattern random --access read --locality 0,0.25,0.5,0.75,0.9,1 \
  --threads 4 --ops 3000 --repeats "$REPEATS" --stall-seconds 60
# The paper's reference: mmap on the local disk, in the GlusterFS part's shape.
run local-ref local-ref.log --file "$LOCAL_DIR/ref.dat" --file-size 64M --cache 16M \
  --backends umap,mmap --pattern random --access read --threads 1,4,8,16 \
  --ops "$GL_OPS" --repeats "$REPEATS" --stall-seconds 60
run local-ref local-ref-write.log --file "$LOCAL_DIR/ref.dat" --file-size 64M --cache 16M \
  --backends umap,mmap --pattern random --access write --sync-every 100 --threads 1,4,8,16 \
  --ops "$GL_OPS" --repeats "$REPEATS" --stall-seconds 60

# --- 2. GlusterFS ----------------------------------------------------------------------
gl_reason=""
if [ "${UMAP_BENCH_SKIP_GLUSTER:-0}" = 1 ]; then
  gl_reason="UMAP_BENCH_SKIP_GLUSTER=1"
elif [ ! -x "$TB" ]; then
  gl_reason="$TB not found"
else
  mkdir -p "$GL_MNT"
  echo "=== starting GlusterFS testbed $GL_NAME at $GL_MNT"
  if "$TB" up-single --name "$GL_NAME" --mount "$GL_MNT" >"$OUT/gluster-testbed.log" 2>&1; then
    gl_up=1
  else
    rc=$?
    gl_reason="gluster-testbed up-single exited $rc ($([ $rc = 77 ] && echo 'GlusterFS cannot run here' || echo 'bring-up failed')): $(tail -3 "$OUT/gluster-testbed.log" | tr '\n' ' ')"
    # It tears down what it built on failure; make sure anyway.
    "$TB" down --name "$GL_NAME" >>"$OUT/gluster-testbed.log" 2>&1
  fi
fi
if [ $gl_up = 1 ]; then
  # --drop-caches: the brick's page cache is this machine's too; drop it before every run.
  run gluster gluster.log --file "$GL_MNT/bench.dat" --file-size 64M --cache 16M \
    --backends umap,mmap,pread --pattern random --access read --threads 1,4,8,16 \
    --ops "$GL_OPS" --repeats "$REPEATS" --drop-caches --stall-seconds 60
  run gluster gluster-write.log --file "$GL_MNT/bench.dat" --file-size 64M --cache 16M \
    --backends umap,mmap,pread --pattern random --access write --sync-every 100 \
    --threads 1,4,8,16 --ops "$GL_OPS" --repeats "$REPEATS" --drop-caches --stall-seconds 60
  run gluster gluster-locality.log --file "$GL_MNT/bench.dat" --file-size 64M --cache 16M \
    --backends umap,mmap,pread --pattern random --access read --locality 0.8 \
    --threads 1,4,8,16 --ops "$GL_OPS" --repeats "$REPEATS" --drop-caches --stall-seconds 60
  run gluster gluster-sweep.log --file "$GL_MNT/bench.dat" --file-size 64M --cache 16M \
    --backends umap,mmap --pattern random --access read --locality 0,0.5,0.8,0.95,1 \
    --threads 8 --ops 1000 --repeats "$REPEATS" --drop-caches --stall-seconds 60
  # Random reads with every backend in a cgroup of half the file (umap's cache: 16 MiB).
  run gluster-memlimit gluster-memlimit.log --file "$GL_MNT/bench.dat" --file-size 64M \
    --cache 16M --memory-limit 32M --backends umap,mmap,pread --pattern random --access read \
    --threads 1,4,8,16 --ops "$GL_OPS" --repeats "$REPEATS" --drop-caches --stall-seconds 60
  # A scan of a whole 256 MiB file (65536 ops of 4 KiB) with the memory limit at 1/4 of it.
  run gluster-memlimit gluster-scan.log --file "$GL_MNT/scan.dat" --file-size 256M --cache 32M \
    --memory-limit 64M --backends umap,mmap --pattern sequential --access read --threads 1 \
    --ops 65536 --repeats "$REPEATS" --drop-caches --stall-seconds 60
else
  echo "run-standard: SKIPPING the GlusterFS part: $gl_reason" | tee -a "$OUT/problems.txt"
fi

# --- plots and summary -------------------------------------------------------------------
if command -v gnuplot >/dev/null; then
  for gp in "$OUT"/*.gp; do
    [ -e "$gp" ] || continue
    gnuplot "$gp" 2>>"$OUT/gnuplot.log" || echo "run-standard: gnuplot $gp failed" >&2
  done
fi
{
  echo "## Commands"
  echo
  cat "$OUT/commands.md"
  echo
  if [ -s "$OUT/problems.txt" ]; then
    echo "## Problems"
    echo
    sed 's/^/- /' "$OUT/problems.txt"
    echo
  fi
  echo "## Results"
  cat "$OUT/tables.md"
  echo
  echo "## Plots"
  echo
  for png in "$OUT"/*.png; do
    [ -e "$png" ] && echo "![$(basename "$png" .png)]($(basename "$png"))"
  done
  echo
  echo "Finished in $(( $(date +%s) - START )) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
} >>"$SUMMARY"
rm -f "$OUT/commands.md" "$OUT/tables.md"
echo "run-standard: results in $OUT (summary.md, results.jsonl, *.png)"
exit $failed
