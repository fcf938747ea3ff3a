#!/bin/bash
# umap-bench --memory-limit end to end: every backend in its own memory cgroup, and two
# processes sharing one (each on its own file, and --procs 2 on the same file); every run
# must verify and report a cgroup peak within the limit;
# sixteen syncing writers stay near their cache, and so does one umsync of a large dirty
# set; a corrupted word must still be caught
# when the run happens in a child process.
# Usage: memlimit_smoke.sh UMAP_BENCH DIR
# Exit 77 (skipped) only when this machine cannot make memory cgroups, naming why.
set -u
bench=$1
dir=$2
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: memory cgroups need root here (running as uid $(id -u))"
  exit 77
fi
if ! grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
   [ ! -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
  echo "SKIP: no memory cgroup controller (neither cgroup v2 with memory nor v1 /sys/fs/cgroup/memory)"
  exit 77
fi
fail=0
check_json() {  # check_json FILE RUNS LIMIT: RUNS lines, all verified, 0 < cgroup_peak <= LIMIT
  local n bad
  n=$(grep -c . "$1")
  if [ "$n" != "$2" ]; then echo "FAIL: $1 has $n runs, expected $2"; fail=1; fi
  bad=$(grep -v '"verified":true' "$1")
  if [ -n "$bad" ]; then echo "FAIL: runs that did not verify:"; echo "$bad"; fail=1; fi
  while read -r peak; do
    if [ "$peak" -le 0 ] || [ "$peak" -gt "$3" ]; then
      echo "FAIL: cgroup_peak $peak not in (0, $3]"; fail=1
    fi
  done < <(grep -o '"cgroup_peak":[0-9]*' "$1" | cut -d: -f2)
}
limit=$((64 << 20))
# run_case NAME RUNS ARGS...: umap-bench on the 64 MiB file in a 64 MiB cgroup with ARGS,
# its JSON in $dir/NAME.jsonl and its output in $dir/NAME.log; it must exit 0 and give RUNS
# verified runs within the limit.
run_case() {
  local name=$1 runs=$2 rc
  shift 2
  "$bench" --file "$dir/m.dat" --file-size 64M --memory-limit 64M --threads 2 --ops 300 \
    --repeats 1 "$@" --json "$dir/$name.jsonl" --stall-seconds 120 >"$dir/$name.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: $name: exit $rc"; cat "$dir/$name.log"; fail=1; fi
  check_json "$dir/$name.jsonl" "$runs" $limit
}
# Every backend.
run_case one 32 --cache 8M --pattern random,sequential --access read,write --sync-every 100 \
  --backends umap,umap+4M,mmap,mmap+random,mmap+seq,pread,pread+direct,uring
# Two processes, each on its own file.
run_case two 4 --cache 4M --pattern random --access read --processes 2 --backends umap,mmap
if ! grep -q '"processes":2' "$dir/two.jsonl"; then echo "FAIL: no two-process runs"; fail=1; fi
# --procs 2: two processes on the same file in one cgroup, the ops split between them: one
# JSON line per run with the group's ops (2 threads x 300 ops in all) and both processes.
run_case procs 2 --cache 4M --pattern random --access read --procs 2 --backends umap,mmap
if [ "$(grep -c '"procs":2,"per_process":\[{.*"process":0,.*},{.*"process":1,.*}\]' "$dir/procs.jsonl")" != 2 ] ||
   [ "$(grep -o '^{[^[]*"ops":[0-9]*' "$dir/procs.jsonl" | grep -o '"ops":[0-9]*$' | sort -u)" != '"ops":600' ] ||
   [ "$(grep -c 'process [01]/2 (pid [0-9]*): 300 ops in .*exit 0$' "$dir/procs.log")" != 4 ]; then
  echo "FAIL: --procs 2: not two processes of 300 ops each and 600 in all:"
  cat "$dir/procs.jsonl" "$dir/procs.log"
  fail=1
fi
# Sixteen writers, a umsync every 100 ops each, 64 MiB cache: the whole process stays near
# its cache. The umsync path once left a capture buffer, a commit batch and a copy of every
# image in the malloc arena of each thread that synced (peak RSS 205-256 MiB here, OOM
# kills at a 256 MiB limit); it reuses them now (docs/results/2026-12-03-findings-for-the-runtime.md, 1).
"$bench" --file "$dir/w.dat" --file-size 512M --memory-limit 256M --threads 16 --ops 1500 \
  --repeats 1 --pattern random --access write --sync-every 100 --backends umap+64M \
  --json "$dir/write.jsonl" --stall-seconds 120 >"$dir/write.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then echo "FAIL: sixteen writers: exit $rc"; cat "$dir/write.log"; fail=1; fi
check_json "$dir/write.jsonl" 1 $((256 << 20))
rss=$(grep -o '"peak_rss":[0-9]*' "$dir/write.jsonl" | cut -d: -f2)
if [ -z "$rss" ] || [ "$rss" -gt $((200 << 20)) ]; then
  echo "FAIL: sixteen writers with a 64 MiB cache: peak RSS ${rss:-?} bytes, more than 200 MiB"
  fail=1
fi
# Four writers dirty 64 MiB of random blocks, then one atomic umsync of all of it, in a
# 256 MiB cgroup: the umsync holds one 4 MiB chunk at a time and reserves its journal's
# memory (docs/performance.md "A umsync larger than memory"; 132-135 MiB peak RSS measured
# with a 1 GiB file). It once held the transaction whole several times and was OOM-killed.
"$bench" --file "$dir/w.dat" --file-size 512M --memory-limit 256M --threads 4 --ops 4000 \
  --repeats 1 --pattern random --access write --sync-every 0 --backends umap+64M,umap+lazy \
  --json "$dir/big.jsonl" --stall-seconds 120 >"$dir/big.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then echo "FAIL: one large umsync: exit $rc"; cat "$dir/big.log"; fail=1; fi
check_json "$dir/big.jsonl" 2 $((256 << 20))
while read -r rss; do
  if [ "$rss" -gt $((200 << 20)) ]; then
    echo "FAIL: one umsync of 64 MiB dirty: peak RSS $rss bytes, more than 200 MiB"; fail=1
  fi
done < <(grep -o '"peak_rss":[0-9]*' "$dir/big.jsonl" | cut -d: -f2)
rm -f "$dir/w.dat"
out=$("$bench" --file "$dir/m.dat" --file-size 64M --memory-limit 64M --cache 4M --threads 2 \
  --ops 8192 --repeats 1 --pattern sequential --access read --backends umap,uring \
  --check-reads all --TEST-corrupt-word 12345 2>&1)
rc=$?
if [ $rc -ne 1 ] || [ "$(grep -c 'WRONG DATA READ' <<<"$out")" -lt 2 ]; then
  echo "FAIL: a corrupted word in a child's run: exit $rc, expected 1 and WRONG DATA READ twice:"
  echo "$out"
  fail=1
fi
[ $fail = 0 ] && echo "ok: every backend and two processes in memory cgroups (own files and --procs 2); sixteen writers and one large umsync near their cache; corruption caught"
exit $fail
