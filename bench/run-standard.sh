#!/bin/bash
# The standard benchmark matrix (docs/benchmarks.md), three parts:
#   1. budget (the headline): every backend in its own memory cgroup with the same limit,
#      file 4x the limit, cold caches; umap (cache fitted to the budget), mmap with default
#      advice, mmap+random / mmap+seq, pread+direct (raw device) and uring (raw io_uring
#      O_DIRECT, one request in flight per thread, the depth umap's faulting threads make);
#      random read at L=0 and L=0.8, a sequential scan, random write with a sync every 100
#      ops (umap atomic+data vs mmap+msync vs pwrite+fdatasync); threads 1/4/16 (GlusterFS
#      reads also 8); local ext4 (1 GiB file, 256 MiB limit) and a one-brick GlusterFS
#      volume (512 MiB, 128 MiB).
#   2. lazy (cache sizing): local, 1 GiB file, 256 MiB limit, 4 threads: a scan, random reads
#      with reuse (a 128 MiB working set), a phase change (128 MiB, then 32 MiB), and two
#      processes sharing one cgroup; umap with fixed caches of several sizes, umap+lazy (the
#      runtime sizes its own cache), mmap and mmap+random; peak memory and throughput.
#   3. unlimited (secondary): the earlier regime, no memory limit: mmap may keep the whole
#      file in the page cache, umap's cache is 1/4 of the file.
# Runs that thrash (mmap with default advice under a limit reads ~8 MiB per fault) are
# stopped after UMAP_BENCH_MAX_SECONDS (default 3) and report the rate they reached.
# Writes bench/results/<date>/: results.jsonl (one JSON object per run), summary.md (machine,
# commands, the tables of each part), *.png (throughput vs threads per backend), *.log.
#
# Usage: bench/run-standard.sh BUILD_DIR
# Knobs (environment): UMAP_BENCH_OUT (result dir), UMAP_BENCH_REPEATS (3),
#   UMAP_BENCH_PARTS (budget,lazy,unlimited), UMAP_BENCH_MAX_SECONDS (3),
#   UMAP_BENCH_LOCAL_OPS (3000 per thread), UMAP_BENCH_GLUSTER_OPS (1000 per thread),
#   UMAP_BENCH_LOCAL_SIZE / _LOCAL_LIMIT (1G / 256M), UMAP_BENCH_GLUSTER_SIZE / _GLUSTER_LIMIT
#   (512M / 128M), UMAP_BENCH_SKIP_GLUSTER=1, UMAP_BENCH_LOCAL_DIR (local files: /var/tmp).
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
PARTS=${UMAP_BENCH_PARTS:-budget,lazy,unlimited}
CAP=${UMAP_BENCH_MAX_SECONDS:-3}
LOCAL_SIZE=${UMAP_BENCH_LOCAL_SIZE:-1G}
LOCAL_LIMIT=${UMAP_BENCH_LOCAL_LIMIT:-256M}
GL_SIZE=${UMAP_BENCH_GLUSTER_SIZE:-512M}
GL_LIMIT=${UMAP_BENCH_GLUSTER_LIMIT:-128M}
LOCAL_OPS=${UMAP_BENCH_LOCAL_OPS:-3000}
GL_OPS=${UMAP_BENCH_GLUSTER_OPS:-1000}
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

has_part() { [[ ",$PARTS," == *",$1,"* ]]; }

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
  echo "- ratios are umap/other per repeat, from runs of the same round; the tables give the median and min–max over $REPEATS repeats"
  echo "- parts: $PARTS; runs stopped after $CAP s (\`--max-seconds\`) report the rate they reached"
  echo
} >"$SUMMARY"

failed=0
run() {  # run PART LABEL LOG ARGS...: one umap-bench invocation, logged, commands recorded
  local part=$1 label=$2 log=$3 t0 rc
  shift 3
  t0=$(date +%s)
  echo "- $part/$label: \`umap-bench $*\`" >>"$OUT/commands.md"
  echo "=== $part/$label: $BENCH $*"
  # A stalled runtime is reported by umap-bench's watchdog (--stall-seconds); the timeout is
  # a last resort so that the matrix always ends.
  timeout --kill-after=20 1200 "$BENCH" "$@" --json "$JSON" --markdown "$OUT/$part.md" \
    --plot-dir "$OUT" --label "$label" --stall-seconds 60 2>&1 | tee "$OUT/$log"
  rc=${PIPESTATUS[0]}
  echo "  (took $(( $(date +%s) - t0 )) s)" >>"$OUT/commands.md"
  if [ "$rc" -eq 5 ]; then
    # Every failure was an OOM kill at the memory limit: a result (shown as OOM), not an error.
    echo "run-standard: $part/$label: some runs were OOM-killed at the memory limit (see $OUT/$log)" | tee -a "$OUT/notes.txt"
  elif [ "$rc" -ne 0 ]; then
    echo "run-standard: $part/$label: umap-bench exited $rc (see $OUT/$log)" | tee -a "$OUT/problems.txt" >&2
    failed=1
  fi
}

# The same-budget matrix on one file system: LABEL DIR FILE_SIZE LIMIT OPS READ_THREADS
# [EXTRA...]
budget_matrix() {
  local label=$1 dir=$2 size=$3 limit=$4 ops=$5 read_threads=$6
  shift 6
  local common=(--file "$dir/budget.dat" --file-size "$size" --memory-limit "$limit"
                --repeats "$REPEATS" --max-seconds "$CAP" "$@")
  run budget "$label" "$label-read.log" "${common[@]}" --threads "$read_threads" --ops "$ops" \
    --backends umap,mmap,mmap+random,pread+direct,uring --pattern random --access read \
    --locality 0,0.8
  # A scan of the whole file: each thread walks its 1/T of it.
  local blocks=$(( $(numfmt --from=iec "$size") / 4096 )) t
  for t in 1 4 16; do
    run budget "$label" "$label-scan-$t.log" "${common[@]}" --threads "$t" \
      --ops $(( blocks / t )) --backends umap,mmap,mmap+seq,pread+direct,uring \
      --pattern sequential --access read
  done
  run budget "$label" "$label-write.log" "${common[@]}" --threads 1,4,16 \
    --ops $(( ops / 3 )) --backends umap,mmap,pread --pattern random --access write \
    --sync-every 100
}

# Fixed umap caches for the sizing part: 1/16, 1/4 and 5/8 of the limit (16, 64 and 160 MiB
# of 256 MiB); 5/8 is about what the budget fit gives plain umap.
mib() { echo $(( $(numfmt --from=iec "$1") * $2 / $3 >> 20 ))M; }

: >"$OUT/commands.md"

# --- 1. same memory budget, local ----------------------------------------------------------
has_part budget && budget_matrix local "$LOCAL_DIR" "$LOCAL_SIZE" "$LOCAL_LIMIT" "$LOCAL_OPS" 1,4,16

# --- 2. lazy cache sizing, local -----------------------------------------------------------
if has_part lazy; then
  blocks=$(( $(numfmt --from=iec "$LOCAL_SIZE") / 4096 ))
  # The working sets re-visit their blocks several times; these runs get twice the cap.
  lazy=(--file "$LOCAL_DIR/lazy.dat" --file-size "$LOCAL_SIZE" --memory-limit "$LOCAL_LIMIT"
        --threads 4 --repeats "$REPEATS" --max-seconds $(( CAP * 2 )) --access read
        --backends "umap+$(mib "$LOCAL_LIMIT" 1 16),umap+$(mib "$LOCAL_LIMIT" 1 4),umap+$(mib "$LOCAL_LIMIT" 5 8),umap+lazy,mmap,mmap+random")
  run lazy local-lazy lazy-scan.log "${lazy[@]}" --pattern sequential --ops $(( blocks / 4 ))
  # Working set W = 1/8 of the file (half the limit; phase: then 1/32); W ops per thread,
  # so each block of it is visited about 4 times.
  run lazy local-lazy lazy-reuse.log "${lazy[@]}" --pattern reuse,phase --working-set 0.125 \
    --ops $(( blocks / 8 ))
  # Two processes, each on its own file with a working set of 1/16 of it.
  run lazy local-lazy lazy-two.log "${lazy[@]}" --pattern reuse --working-set 0.0625 \
    --ops $(( blocks / 16 )) --processes 2
fi

# --- 3. unlimited page cache, local (secondary) -----------------------------------------------
if has_part unlimited; then
  run unlimited local-unlimited unlimited.log --file "$LOCAL_DIR/unlimited.dat" \
    --file-size 256M --cache 64M --backends umap,mmap,pread --pattern random \
    --access read,write --sync-every 100 --threads 1,4,16 --ops "$LOCAL_OPS" \
    --repeats "$REPEATS"
fi

# --- GlusterFS: parts 1 and 3 ----------------------------------------------------------------
gl_reason=""
if [ "${UMAP_BENCH_SKIP_GLUSTER:-0}" = 1 ]; then
  gl_reason="UMAP_BENCH_SKIP_GLUSTER=1"
elif ! has_part budget && ! has_part unlimited; then
  gl_reason="no GlusterFS part in UMAP_BENCH_PARTS=$PARTS"
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
  # Reads also at 8 threads on GlusterFS (where merging and depth pay most).
  has_part budget && budget_matrix gluster "$GL_MNT" "$GL_SIZE" "$GL_LIMIT" "$GL_OPS" 1,4,8,16 \
    --drop-caches
  if has_part unlimited; then
    run unlimited gluster-unlimited gluster-unlimited.log --file "$GL_MNT/unlimited.dat" \
      --file-size 64M --cache 16M --backends umap,mmap,pread --pattern random \
      --access read,write --locality 0,0.8 --sync-every 100 --threads 1,4,16 --ops "$GL_OPS" \
      --repeats "$REPEATS" --drop-caches
  fi
elif [ -n "$gl_reason" ]; then
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
  for f in problems notes; do
    if [ -s "$OUT/$f.txt" ]; then
      echo "## ${f^}"
      echo
      sed 's/^/- /' "$OUT/$f.txt"
      echo
    fi
  done
  for part in budget lazy unlimited; do
    [ -s "$OUT/$part.md" ] || continue
    case $part in
      budget) echo "## Same memory budget (headline)" ;;
      lazy) echo "## Cache sizing: fixed caches, lazy, mmap under one budget" ;;
      unlimited) echo "## Unlimited page cache (secondary: mmap may cache the whole file)" ;;
    esac
    cat "$OUT/$part.md"
    echo
  done
  echo "## Plots"
  echo
  for png in "$OUT"/*.png; do
    [ -e "$png" ] && echo "![$(basename "$png" .png)]($(basename "$png"))"
  done
  echo
  echo "Finished in $(( $(date +%s) - START )) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
} >>"$SUMMARY"
rm -f "$OUT/commands.md" "$OUT"/{budget,lazy,unlimited}.md
echo "run-standard: results in $OUT (summary.md, results.jsonl, *.png)"
exit $failed
