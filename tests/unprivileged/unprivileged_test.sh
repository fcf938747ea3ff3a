#!/usr/bin/env bash
# Umap as an ordinary user: the runtime's own test binaries pass as `nobody` (userfaultfd
# through user-mode-only), a program gets the full features once a site grants
# /dev/userfaultfd to its group (docs/operations.md §9), and what each way costs is what the
# docs say (a read(2) into a non-resident buffer: served in handler mode with full access,
# EFAULT in user-mode-only or signal mode).
#   unprivileged_test.sh PROBE BIN_DIR TEST...
set -euo pipefail
probe=$1 bindir=$2
shift 2
capability=$(dirname "$0")/../../faultinject/probe-capability
"$capability" root || exit 77
command -v setpriv >/dev/null || { echo "umap-skip: missing command:setpriv: util-linux's setpriv"; exit 77; }

work=$(mktemp -d /tmp/umap-unpriv-XXXXXX)
chmod 1777 "$work"  # sticky: no user may rename or replace what another created in it
trap 'rm -rf "$work"' EXIT
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups env TMPDIR="$work" HOME="$work" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

# 1. The runtime test binaries, as nobody.
for t in "$@"; do
  log=$work/$(basename "$t").log
  if ! as_nobody "$bindir/$t" > "$log" 2>&1; then
    tail -40 "$log"
    fail "$t as nobody"
  fi
  # A binary that starts a runtime says how it reached userfaultfd: as nobody, user-mode-only.
  if grep -q "userfaultfd through" "$log"; then
    grep -q "userfaultfd through user-mode-only" "$log" || fail "$t: not user-mode-only as nobody"
  fi
  echo "ok: $t passes as nobody"
done

# 2. The access each way gives, and what a read(2) into a non-resident page costs.
expect() {  # expect WANT OUTPUT
  [[ "$2" == *"$1"* ]] || fail "expected '$1', got: $2"
  echo "ok: $1"
}
out=$(as_nobody env UMAP_FAULT_MODE=handler "$probe" "$work/f1" 2>/dev/null) || fail "probe (handler, nobody)"
expect "access=user-mode-only fault_mode=handler kernel_read=EFAULT" "$out"
out=$(as_nobody "$probe" "$work/f2" 2>/dev/null) || fail "probe (signal, nobody)"
expect "access=user-mode-only fault_mode=signal kernel_read=EFAULT" "$out"
out=$(env UMAP_FAULT_MODE=handler "$probe" "$work/f3" 2>/dev/null) || fail "probe (handler, root)"
expect "access=userfaultfd fault_mode=handler kernel_read=ok" "$out"
# A site grants /dev/userfaultfd to a group: here, in a private mount namespace, a device node
# of the group nogroup, mode 0660, bound over /dev/userfaultfd.
if [[ -c /dev/userfaultfd ]]; then
  devno=$(stat -c '%t %T' /dev/userfaultfd)
  out=$(unshare --mount --propagation private bash -c '
    set -e
    mknod "$1/uffd" c $((16#$2)) $((16#$3))
    chown root:nogroup "$1/uffd"; chmod 0660 "$1/uffd"
    mount --bind "$1/uffd" /dev/userfaultfd
    setpriv --reuid=nobody --regid=nogroup --init-groups env TMPDIR="$1" HOME="$1" \
      UMAP_FAULT_MODE=handler "$4" "$1/f4"' _ "$work" $devno "$probe" 2>/dev/null) ||
    fail "probe (handler, nobody with /dev/userfaultfd granted)"
  expect "access=/dev/userfaultfd fault_mode=handler kernel_read=ok" "$out"
else
  echo "note: no /dev/userfaultfd on this kernel (< 6.1): the device grant is not checked"
fi
echo "unprivileged: all checks passed"
