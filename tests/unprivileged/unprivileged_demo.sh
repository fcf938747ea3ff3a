#!/usr/bin/env bash
# `make demo` as an ordinary user, in its same-budget regime: a site delegates a memory
# cgroup to the user (here: a cgroup v1 directory owned by nobody), and the demo makes its
# per-backend cgroups below it. The demo must pass its checks and say which regime it used.
#   unprivileged_demo.sh UMAP_DEMO
set -euo pipefail
demo=$1
capability=$(dirname "$0")/../../faultinject/probe-capability
"$capability" root || exit 77
command -v setpriv >/dev/null || { echo "umap-skip: missing command:setpriv: util-linux's setpriv"; exit 77; }
work=$(mktemp -d /tmp/umap-unpriv-demo-XXXXXX)
chmod 1777 "$work"  # sticky: no user may rename or replace what another created in it
parent=""
cleanup() {
  if [[ -n "$parent" ]]; then
    for d in "$parent"/*/; do [[ -d "$d" ]] && rmdir "$d" 2>/dev/null || true; done
    rmdir "$parent" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
args=()
if [[ -d /sys/fs/cgroup/memory ]]; then
  parent=/sys/fs/cgroup/memory/umap-unpriv-$$
  mkdir "$parent"
  chown -R nobody:nogroup "$parent"
  args+=(--cgroup-parent "$parent")
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
  parent=/sys/fs/cgroup/umap-unpriv-$$
  mkdir "$parent"
  echo +memory > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  chown -R nobody:nogroup "$parent"
  args+=(--cgroup-parent "$parent")
fi
log=$work/demo.log
if ! setpriv --reuid=nobody --regid=nogroup --clear-groups env TMPDIR="$work" HOME="$work" \
    "$demo" --dir "$work/demo" --size 256M --memory-limit 64M --repeats 1 --ops 1500 \
    "${args[@]}" > "$log" 2>&1; then
  tail -40 "$log"
  echo "FAIL: umap-demo as nobody"
  exit 1
fi
grep -q "^verdict: PASS" "$log" || { tail -20 "$log"; echo "FAIL: no PASS verdict"; exit 1; }
if [[ -n "$parent" ]]; then
  grep -q "^regime: same memory budget" "$log" ||
    { tail -20 "$log"; echo "FAIL: the delegated cgroup was not used"; exit 1; }
fi
# The demo's cache is lazily sized: as nobody the memory probe reads the cgroup files and
# the machine's PSI, and the capacity it chose is printed.
grep -q "^umap's cache, as lazy sizing chose it" "$log" ||
  { tail -20 "$log"; echo "FAIL: the demo did not report the capacity lazy sizing chose"; exit 1; }
grep -E "^(verdict|regime|conclusion):|^  (random row|sequential scan).*capacity" "$log"
echo "ok: umap-demo passes as nobody"
