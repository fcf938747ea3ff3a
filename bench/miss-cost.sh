#!/bin/bash
# The per-miss cost breakdown (docs/performance.md "Cost of a miss"): umap-misscost (every
# timed op is one miss on a block never read before, with the cache full, so every miss also
# evicts) for umap in signal and handler fault modes and for the references, measured four
# ways:
#   1. callgrind: user-space instructions per miss, all threads (the count does not move with
#      the machine's load; `perf stat` cannot count instructions on this VM), and the
#      inclusive cost of the functions a miss goes through;
#   2. strace -f: system calls per miss, by name, between the timed region's two markers;
#   3. getrusage, in a memory cgroup of the same limit for every backend (the kernel's fault
#      path then reclaims as umap evicts): CPU time, context switches and faults per miss,
#      median of REPEATS runs (this one moves with the load: the summary notes it);
#   4. perf record (cpu-clock samples with call stacks, kernel included, timed region only),
#      in the same cgroup: where the CPU time of a miss goes (the I/O system call or the
#      fault's read, the install, the userfaultfd fault and its SIGBUS round trip, eviction
#      or reclaim, context switches, interrupts, user space), as shares of part 3's CPU time
#      per miss. cpu-clock samples that fall where interrupts are off are taken when they
#      come back on, often on the return to user space: "user" includes some of the
#      kernel's exit path.
# Writes OUT/summary.md (the tables) and the raw outputs beside it.
#
# Usage: bench/miss-cost.sh BUILD_DIR [OUT_DIR]
# Knobs (environment): UMAP_MISSCOST_DIR (file directory: /var/tmp), UMAP_MISSCOST_SIZE
#   (file: 512M), UMAP_MISSCOST_CACHE (umap cache: 16M), UMAP_MISSCOST_LIMIT (cgroup: 64M),
#   UMAP_MISSCOST_OPS (timed misses per run: 32768), UMAP_MISSCOST_GRIND_OPS (under callgrind
#   and strace: 4096), UMAP_MISSCOST_THREADS (1,4,16),
#   UMAP_MISSCOST_GRIND_THREADS (1,16), UMAP_MISSCOST_REPEATS (3),
#   UMAP_MISSCOST_BACKENDS (umap,umap-handler,mmap+random,pread+direct,uring),
#   UMAP_MISSCOST_PARTS (callgrind,strace,rusage,perf; perf is skipped without perf(1)).
set -uo pipefail

BUILD=${1:?usage: bench/miss-cost.sh BUILD_DIR [OUT_DIR]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOL=$(cd "$BUILD" && pwd)/bench/umap-misscost
[ -x "$TOOL" ] || { echo "miss-cost: $TOOL not built (cmake --build $BUILD --target umap-misscost)" >&2; exit 2; }
OUT=${2:-$ROOT/bench/results/misscost-$(date +%Y-%m-%d-%H%M%S)}
DIR=${UMAP_MISSCOST_DIR:-/var/tmp}
FILE=$DIR/umap-misscost.dat
SIZE=${UMAP_MISSCOST_SIZE:-512M}
CACHE=${UMAP_MISSCOST_CACHE:-16M}
LIMIT=${UMAP_MISSCOST_LIMIT:-64M}
OPS=${UMAP_MISSCOST_OPS:-32768}
GRIND_OPS=${UMAP_MISSCOST_GRIND_OPS:-4096}
THREADS=${UMAP_MISSCOST_THREADS:-1,4,16}
GRIND_THREADS=${UMAP_MISSCOST_GRIND_THREADS:-1,16}
REPEATS=${UMAP_MISSCOST_REPEATS:-3}
BACKENDS=${UMAP_MISSCOST_BACKENDS:-umap,umap-handler,mmap+random,pread+direct,uring}
PARTS=${UMAP_MISSCOST_PARTS:-callgrind,strace,rusage,perf}
mkdir -p "$OUT" || exit 2
SUMMARY=$OUT/summary.md
has() { [[ ",$2," == *",$1,"* ]]; }
for t in valgrind callgrind_annotate strace; do
  command -v $t >/dev/null || { echo "miss-cost: $t missing (scripts/install-deps.sh)" >&2; exit 2; }
done

# The limit's bytes, and the warm-up (per thread) that fills it: umap's cache is inside it.
limit_bytes=$(numfmt --from=iec "$LIMIT")
warm_blocks=$(( limit_bytes * 5 / 4 / 4096 ))

# run_tool BACKEND THREADS OPS_PER_THREAD PREFIX...: umap-misscost through PREFIX (a wrapper
# command, may be empty); "umap-handler" is umap with UMAP_FAULT_MODE=handler.
# ACCESS=kernel: the misses are taken inside write(2) (umap-misscost --access).
run_tool() {
  local backend=$1 threads=$2 ops=$3 mode=signal
  shift 3
  if [ "$backend" = umap-handler ]; then backend=umap; mode=handler; fi
  UMAP_FAULT_MODE=$mode "$@" "$TOOL" --file "$FILE" --file-size "$SIZE" --backend "$backend" \
    --cache "$CACHE" --threads "$threads" --ops "$ops" --warmup $(( warm_blocks / threads )) \
    --access "${ACCESS:-user}"
}

# Inclusive instructions per miss of the functions that make up a miss, from
# callgrind_annotate --inclusive=yes on stdin: "name count; ...".
top_functions() {
  awk -v n="$1" '
    BEGIN {
      k = split("OnSigbus HandlerLoop LockMissing AcquireBlock EvictBatch DiscardBatch FillInline ReadBlock InstallBlock PublishFilled MaybePrefetch ContinuesStream ThreadRefs::Touch BeginInlineRead QueueFill PumpChannel Complete Mutex::Lock StatsPublisher::Loop ReadBlocks", want, " ")
    }
    /^ *[0-9,]+ \(/ {
      v = $1; gsub(",", "", v)
      for (i = 1; i <= k; i++) {
        if (!(i in got) && index($0, want[i] "(") > 0) { got[i] = v; break }
      }
    }
    END {
      s = ""
      for (i = 1; i <= k; i++) if (i in got && got[i] / n >= 10) s = s sprintf("%s%s %d", s == "" ? "" : "; ", want[i], got[i] / n)
      print s
    }'
}

# A memory cgroup of LIMIT for one run (v1 or v2), made and removed around it.
CG=""
cg_make() {
  local name=umap-misscost-$$-$1
  if [ -d /sys/fs/cgroup/memory ]; then
    CG=/sys/fs/cgroup/memory/$name
    mkdir "$CG" && echo "$limit_bytes" >"$CG/memory.limit_in_bytes" || return 1
  elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    CG=/sys/fs/cgroup/$name
    mkdir "$CG" && echo "$limit_bytes" >"$CG/memory.max" && echo 0 >"$CG/memory.swap.max" || return 1
  else
    return 1
  fi
}
cg_remove() { [ -n "$CG" ] && rmdir "$CG" 2>/dev/null; CG=""; }
in_cg() { echo $BASHPID >"$CG/cgroup.procs" && exec "$@"; }
trap 'cg_remove' EXIT

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
# section TITLE HEADER ALIGN: a summary section's title and its table's first two rows.
section() { printf '## %s\n\n%s\n%s\n' "$1" "$2" "$3" >>"$SUMMARY"; }

IFS=, read -r -a backends <<<"$BACKENDS"
{
  echo "# Cost of a miss, $(date +%Y-%m-%d\ %H:%M)"
  echo
  echo "- machine: $(nproc) vCPU, kernel $(uname -r); commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD -- runtime 2>/dev/null || echo ' (runtime/ modified)')"
  echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- file $SIZE in $DIR, umap cache $CACHE, warm-up $warm_blocks blocks (5/4 of $LIMIT) before $OPS timed misses ($GRIND_OPS under callgrind and strace)"
  echo
} >"$SUMMARY"
echo "miss-cost: preparing $FILE"
"$TOOL" --file "$FILE" --file-size "$SIZE" --backend pread --ops 1 --warmup 0 >/dev/null || exit 1

# --- 1. callgrind: user-space instructions per miss ---------------------------------------
if has callgrind "$PARTS"; then
  section "User-space instructions per miss (callgrind, all threads)" \
    "| backend | threads | instructions/miss | inclusive instructions/miss of the parts |" \
    "|---|---:|---:|---|"
  IFS=, read -r -a gthreads <<<"$GRIND_THREADS"
  for b in "${backends[@]}"; do
    for t in "${gthreads[@]}"; do
      tag=$(echo "$b-t$t" | tr '+' '_')
      ops=$(( GRIND_OPS / t ))
      echo "=== callgrind $b, $t threads"
      # valgrind runs one thread at a time: a thread blocked in a user-mode fault would keep
      # handler mode's handler threads from ever running, so its misses are kernel accesses.
      ACCESS=user
      [ "$b" = umap-handler ] && ACCESS=kernel
      ACCESS=$ACCESS run_tool "$b" "$t" "$ops" timeout -s KILL 1800 valgrind --tool=callgrind \
        --instr-atstart=no --callgrind-out-file="$OUT/cg-$tag.%p" \
        >"$OUT/cg-$tag.log" 2>&1 || { echo "miss-cost: callgrind $b failed (see $OUT/cg-$tag.log)" >&2; continue; }
      dump=$(ls "$OUT"/cg-"$tag".* 2>/dev/null | head -1)
      [ -n "$dump" ] || { echo "miss-cost: no callgrind profile for $b" >&2; continue; }
      misses=$(( ops * t ))
      total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
      top=$(callgrind_annotate --inclusive=yes --threshold=100 "$dump" 2>/dev/null | top_functions "$misses")
      echo "| $b | $t | $(( total / misses )) | $top |" >>"$SUMMARY"
    done
  done
  echo >>"$SUMMARY"
fi

# --- 2. strace: system calls per miss -------------------------------------------------------
if has strace "$PARTS"; then
  section "System calls per miss (strace -f, timed region)" \
    "| backend | threads | calls/miss | by call |" "|---|---:|---:|---|"
  for b in "${backends[@]}"; do
    t=1
    tag=$(echo "$b-t$t" | tr '+' '_')
    echo "=== strace $b"
    run_tool "$b" $t "$GRIND_OPS" strace -f -qq -o "$OUT/st-$tag.txt" >"$OUT/st-$tag.log" 2>&1 ||
      { echo "miss-cost: strace $b failed (see $OUT/st-$tag.log)" >&2; continue; }
    # The tool marks the timed region with faccessat() of two named paths.
    awk -v n="$GRIND_OPS" '
      /umap-misscost\/timed-start/ {on=1; next}
      /umap-misscost\/timed-end/ {on=0}
      on && /^[0-9]+ +[a-z_0-9]+\(/ {split($2, a, "("); c[a[1]]++; tot++}
      on && /<\.\.\. [a-z_0-9]+ resumed>/ {next}
      END {
        s = ""; for (k in c) if (c[k] / n >= 0.01) s = s sprintf("%s %.2f, ", k, c[k] / n);
        printf "%.2f | %s\n", tot / n, substr(s, 1, length(s) - 2)
      }' "$OUT/st-$tag.txt" | sed "s/^/| $b | $t | /; s/$/ |/" >>"$SUMMARY"
  done
  echo >>"$SUMMARY"
fi

# --- 3. getrusage in a memory cgroup: CPU time and context switches per miss -----------------
if has rusage "$PARTS"; then
  section "CPU time and context switches per miss (getrusage; every run in a $LIMIT memory cgroup; median of $REPEATS)" \
    "| backend | threads | misses/s | CPU µs/miss (user + sys) | context switches/miss (vol + invol) | faults/miss (minor, major) |" \
    "|---|---:|---:|---:|---:|---|"
  IFS=, read -r -a rthreads <<<"$THREADS"
  for t in "${rthreads[@]}"; do
    # Backends interleaved within each repeat, so that a change of load hits them alike.
    for b in "${backends[@]}"; do : >"$OUT/ru-$(echo "$b-t$t" | tr '+' '_').log"; done
    for r in $(seq "$REPEATS"); do
      for b in "${backends[@]}"; do
        tag=$(echo "$b-t$t" | tr '+' '_')
        cg_make "$r" || { echo "miss-cost: cannot make a memory cgroup (root, cgroup memory controller)" >&2; exit 1; }
        echo "=== rusage $b, $t threads, repeat $r"
        ( run_tool "$b" "$t" $(( OPS / t )) in_cg ) >>"$OUT/ru-$tag.log" 2>&1 ||
          echo "miss-cost: $b at $t threads failed (see $OUT/ru-$tag.log)" >&2
        cg_remove
      done
    done
    for b in "${backends[@]}"; do
      tag=$(echo "$b-t$t" | tr '+' '_')
      m() { grep '^per_miss' "$OUT/ru-$tag.log" | grep -o " $1 [0-9.]*" | awk '{print $2}' | median; }
      rate=$(grep -o 'ops_per_s=[0-9]*' "$OUT/ru-$tag.log" | cut -d= -f2 | median)
      echo "| $b | $t | $rate | $(m cpu_us) ($(m user_us) + $(m sys_us)) | $(m vcsw) + $(m ivcsw) | $(m minflt), $(m majflt) |" >>"$SUMMARY"
      m cpu_us >"$OUT/cpu-$tag"
    done
  done
  echo >>"$SUMMARY"
fi
# --- 4. perf: where the CPU time of a miss goes ------------------------------------------------
# Classifies `perf script` samples of the timed region (region_monotonic from the tool) by
# the first matching frame class, innermost-out priority as listed in `classes`.
classify() {
  awk -v from="$1" -v to="$2" '
    function flush() {
      if (!insample) return
      insample = 0
      if (ts < from || ts > to) return
      c = "user"
      if (kernel) {
        c = "other kernel"
        if (st ~ /asm_common_interrupt|asm_sysvec|handle_softirqs|irq_exit/) c = "interrupts"
        else if (st ~ / __schedule /) c = "context switch"
        else if (st ~ /try_to_free_mem_cgroup_pages|shrink_node|shrink_lruvec/) c = "eviction/reclaim"
        else if (st ~ /__x64_sys_pread64|__do_sys_io_uring_enter|filemap_read_folio|ext4_mpage_readpages|submit_bio/) c = "read"
        else if (st ~ /__x64_sys_ioctl|filemap_add_folio|__filemap_get_folio|finish_fault|filemap_map_pages/) c = "install"
        else if (st ~ /process_madvise|__x64_sys_madvise/) c = "eviction/reclaim"
        else if (st ~ /rt_sigreturn|arch_do_signal_or_restart|force_sig|handle_userfault/) c = "uffd fault, SIGBUS"
        else if (st ~ /asm_exc_page_fault/) c = "fault, other"
        else if (st ~ /__x64_sys_futex/) c = "futex"
        else if (st ~ /__x64_sys_poll|do_sys_poll|ksys_read|ksys_write/) c = "hand-off"
      }
      n[c]++; total++
    }
    /^[^ \t]/ { flush(); insample = 1; kernel = 0; st = " "; split($0, f, " "); for (i in f) if (f[i] ~ /^[0-9]+\.[0-9]+:$/) ts = substr(f[i], 1, length(f[i]) - 1) + 0; next }
    /^[ \t]+[0-9a-f]+ / { if (st == " " && $0 ~ /kernel\.kallsyms/) kernel = 1; sym = $2; sub(/\+0x.*/, "", sym); st = st sym " "; next }
    /^$/ { flush() }
    END {
      flush()
      for (c in n) printf "%s\t%.4f\n", c, n[c] / total
    }'
}
if has perf "$PARTS"; then
  if ! command -v perf >/dev/null; then
    echo "miss-cost: perf not installed (linux-perf): no CPU time breakdown" | tee -a "$SUMMARY" >&2
  else
    cols=("read" "install" "uffd fault, SIGBUS" "fault, other" "eviction/reclaim" "context switch" "interrupts" "futex" "hand-off" "user" "other kernel")
    {
      echo "## Where the CPU time of a miss goes (µs per miss: the shares of perf cpu-clock samples of the timed region, same cgroup, times the CPU time per miss of part 3 when it ran, else of the perf run itself)"
      echo
      printf "| backend | threads | CPU µs/miss |"; printf " %s |" "${cols[@]}"; echo
      printf "|---|---:|---:|"; printf -- "---:|%.0s" "${cols[@]}"; echo
    } >>"$SUMMARY"
    IFS=, read -r -a rthreads <<<"$THREADS"
    for t in "${rthreads[@]}"; do
      for b in "${backends[@]}"; do
        tag=$(echo "$b-t$t" | tr '+' '_')
        cg_make perf || { echo "miss-cost: cannot make a memory cgroup" >&2; exit 1; }
        echo "=== perf $b, $t threads"
        ( run_tool "$b" "$t" $(( OPS / t )) in_cg perf record -q -k monotonic -e cpu-clock -F 5000 -g \
            -o "$OUT/perf-$tag.data" ) >"$OUT/perf-$tag.log" 2>&1 ||
          echo "miss-cost: perf $b at $t threads failed (see $OUT/perf-$tag.log)" >&2
        cg_remove
        region=$(grep -o 'region_monotonic=[0-9.,]*' "$OUT/perf-$tag.log" | cut -d= -f2)
        cpu=$(cat "$OUT/cpu-$tag" 2>/dev/null || grep '^per_miss' "$OUT/perf-$tag.log" | grep -o ' cpu_us [0-9.]*' | awk '{print $2}')
        [ -n "$region" ] && [ -n "$cpu" ] || continue
        perf script -i "$OUT/perf-$tag.data" 2>/dev/null | classify "${region%,*}" "${region#*,}" >"$OUT/perf-$tag.shares"
        printf "| %s | %s | %s |" "$b" "$t" "$cpu" >>"$SUMMARY"
        for c in "${cols[@]}"; do
          awk -F'\t' -v c="$c" -v cpu="$cpu" '$1 == c {v = $2 * cpu} END {printf " %.1f |", v}' "$OUT/perf-$tag.shares" >>"$SUMMARY"
        done
        echo >>"$SUMMARY"
      done
    done
    echo >>"$SUMMARY"
  fi
fi
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)." >>"$SUMMARY"
echo "miss-cost: $SUMMARY"
cat "$SUMMARY"
