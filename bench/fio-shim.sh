#!/bin/bash
# fio's mmap engine, plainly and under the LD_PRELOAD shim, in the same memory budget
# (docs/benchmarks.md, "An unmodified program: fio"): random 4 KiB reads of a file four
# times the memory cgroup's limit, cold caches (drop_caches before every run), 1 and 4
# jobs, each configuration REPEATS times interleaved; per run the IOPS fio reports and the
# cgroup's peak usage (memory.max_usage_in_bytes: the whole job, page cache included).
#   plain-default: fio with fadvise_hint=0 (the kernel's default read-around)
#   plain-random:  fio's default fadvise_hint=1 (MADV_RANDOM, what a careful user asks)
#   shim:          the same job under libumap_preload.so (Umap serves the file; madvise is
#                  a no-op there)
# Prints one line per run and a table of medians (markdown) at the end.
#
# Usage: bench/fio-shim.sh BUILD_DIR [DIR]
# Knobs: REPEATS (3), SIZE (1g), LIMIT_MB (256), SECONDS_PER_RUN (15), JOBS ("1 4").
set -euo pipefail
build=${1:?usage: bench/fio-shim.sh BUILD_DIR [DIR]}
dir=${2:-/var/tmp/umap-fio-shim}
preload=$build/runtime/preload/libumap_preload.so
repeats=${REPEATS:-3} size=${SIZE:-1g} limit_mb=${LIMIT_MB:-256}
secs=${SECONDS_PER_RUN:-15} jobs_list=${JOBS:-"1 4"}
command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)"; exit 2; }
[[ -f $preload ]] || { echo "no $preload: build first"; exit 2; }
cg=/sys/fs/cgroup/memory/umap-fio-shim.$$
[[ -d /sys/fs/cgroup/memory ]] || { echo "needs the cgroup v1 memory controller"; exit 2; }
mkdir -p "$dir"
trap 'rmdir "$cg" 2>/dev/null; true' EXIT

# The file is laid out once (plainly), then every run reads it.
fio --name=layout --directory="$dir" --filename=data --size="$size" --rw=write --bs=1m \
  --ioengine=psync --end_fsync=1 --output=/dev/null

run() {  # run CONFIG JOBS: prints "iops peak_mib"
  local config=$1 jobs=$2 env=() extra=()
  case $config in
    plain-default) extra=(--fadvise_hint=0) ;;
    plain-random) ;;
    shim) env=("LD_PRELOAD=$preload" "UMAP_PATHS=$dir") ;;
  esac
  rmdir "$cg" 2>/dev/null || true
  mkdir "$cg"
  echo $((limit_mb << 20)) >"$cg/memory.limit_in_bytes"
  sync
  echo 3 >/proc/sys/vm/drop_caches
  local out
  out=$(sh -c 'echo $$ > "$1/tasks"; shift; exec "$@"' sh "$cg" env "${env[@]}" \
    fio --name=r --directory="$dir" --filename=data --size="$size" --rw=randread --bs=4k \
    --ioengine=mmap --numjobs="$jobs" --thread=0 --time_based --runtime="$secs" \
    --group_reporting --output-format=json "${extra[@]}" 2>/dev/null)
  local iops peak
  iops=$(python3 -c 'import json,sys; print(int(json.load(sys.stdin)["jobs"][0]["read"]["iops"]))' <<<"$out")
  peak=$(($(cat "$cg/memory.max_usage_in_bytes") >> 20))
  rmdir "$cg"
  echo "$iops $peak"
}

declare -A results
for jobs in $jobs_list; do
  for ((r = 1; r <= repeats; r++)); do
    for config in plain-default plain-random shim; do
      read -r iops peak < <(run "$config" "$jobs")
      echo "jobs=$jobs run=$r $config: $iops IOPS, cgroup peak $peak MiB"
      results[$config.$jobs]+="$iops:$peak "
    done
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo
echo "| jobs | config | IOPS (median of $repeats) | cgroup peak MiB (median) | vs plain-random |"
echo "|---|---|---|---|---|"
for jobs in $jobs_list; do
  base=$(echo "${results[plain-random.$jobs]}" | tr ' ' '\n' | cut -d: -f1 | tr '\n' ' ' | median)
  for config in plain-default plain-random shim; do
    i=$(echo "${results[$config.$jobs]}" | tr ' ' '\n' | cut -d: -f1 | tr '\n' ' ' | median)
    p=$(echo "${results[$config.$jobs]}" | tr ' ' '\n' | cut -d: -f2 | tr '\n' ' ' | median)
    echo "| $jobs | $config | $i | $p | $(python3 -c "print(f'{$i/$base:.2f}x')") |"
  done
done
