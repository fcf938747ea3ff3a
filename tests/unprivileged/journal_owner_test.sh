#!/usr/bin/env bash
# A journal only its owner touches (docs/operations.md, "Who may touch a journal"), with two
# ordinary users: A is nobody, B a uid of its own (no passwd entry needed), and root.
#   journal_owner_test.sh MAP_WRITE_SYNC UMAP_RECOVER
# MAP_WRITE_SYNC (tests/install/map_write_sync.c, release library) maps a file through a
# runtime journaling to its second argument ("-": the automatic location), writes, umsyncs.
set -euo pipefail
mws=$1 recover=$2
capability=$(dirname "$0")/../../faultinject/probe-capability
"$capability" root || exit 77
command -v setpriv >/dev/null || { echo "umap-skip: missing command:setpriv: util-linux's setpriv"; exit 77; }

A=65534 B=61234  # B: a uid no other test uses (its /var/tmp names are this test's)
work=$(mktemp -d /tmp/umap-owner-XXXXXX)
chmod 1777 "$work"  # shared like /tmp: sticky, so neither user can rename the other's entries
cleanup() { rm -rf "$work" /var/tmp/umap-journal-$B /var/tmp/umap-journal-$B.*; }
cleanup_vartmp() { rm -rf /var/tmp/umap-journal-$B /var/tmp/umap-journal-$B.*; }
cleanup_vartmp
trap cleanup EXIT
as() { local uid=$1; shift; setpriv --reuid="$uid" --regid="$uid" --clear-groups env HOME="$work" TMPDIR="$work" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
# refused WHO WANT CMD...: CMD as WHO fails and says WANT (stdout or stderr).
refused() {
  local who=$1 want=$2 out
  shift 2
  if out=$(as "$who" "$@" 2>&1); then fail "accepted as uid $who: $* ($out)"; fi
  [[ $out == *"$want"* ]] || fail "as uid $who: $*: expected '$want', got: $out"
  echo "ok: uid $who refused: $want"
}

# 1. A journal directory of another user, even open to all (0777), is refused: the runtime
#    does not map, umap-recover does not read it.
as $A mkdir -m 0777 "$work/shared"
refused $B "belongs to uid $A, not to uid $B" "$mws" "$work/b1" "$work/shared"
refused $B "belongs to uid $A, not to uid $B" "$recover" -j "$work/shared" status
[[ -z $(ls -A "$work/shared") ]] || fail "B wrote into A's directory"

# 2. B's own directory, writable by group or others, is refused.
as $B mkdir -m 0700 "$work/b-loose"
chmod 0777 "$work/b-loose"
refused $B "has mode 0777: others may write to it" "$mws" "$work/b2" "$work/b-loose"
chmod 0770 "$work/b-loose"
refused $B "has mode 0770" "$recover" -j "$work/b-loose" status

# 3. Reached through a symbolic link of another user: refused. Through B's own link: used.
as $B mkdir -m 0700 "$work/b-journal"
as $A ln -s "$work/b-journal" "$work/a-link"
refused $B "symbolic link $work/a-link of uid $A" "$mws" "$work/b3" "$work/a-link"
as $B ln -s "$work/b-journal" "$work/b-link"
as $B "$mws" "$work/b3" "$work/b-link" >/dev/null || fail "B's own link refused"
echo "ok: B's journal through B's own link"

# 4. The journal's files are 0600 and its directory 0700, even if B left it 0755; A can
#    read none of it.
as $B mkdir -m 0755 "$work/b-open"
as $B "$mws" "$work/b4" "$work/b-open" >/dev/null || fail "B's map into b-open"
[[ $(stat -c %a "$work/b-open") == 700 ]] || fail "b-open is $(stat -c %a "$work/b-open"), not 700"
files=0
for f in "$work"/b-open/* "$work"/b-journal/*; do
  [[ -f $f ]] || continue
  files=$((files + 1))
  [[ $(stat -c '%a %u' "$f") == "600 $B" ]] || fail "$f: $(stat -c '%a %u' "$f"), not 600 $B"
done
((files >= 5)) || fail "only $files journal files"
if as $A cat "$work"/b-open/CURRENT >/dev/null 2>&1; then fail "A read B's journal"; fi
chmod 0755 "$work/b-open"  # loosened again: A still cannot open a file, they are 0600
if as $A cat "$work"/b-open/CURRENT >/dev/null 2>&1; then fail "A read a 0600 journal file"; fi
echo "ok: $files journal files are 0600 $B; A reads none"
chmod 0700 "$work/b-open"

# 5. The automatic location: A takes /var/tmp/umap-journal-B first (a directory, a link, a
#    regular file, a FIFO); B's runtime uses a fresh private directory instead, says so
#    (naming what it found), and writes nothing into A's.
for squat in dir link file fifo; do
  cleanup_vartmp
  case $squat in
    dir) as $A mkdir -m 0777 /var/tmp/umap-journal-$B; what="a directory of uid $A" ;;
    link) as $A mkdir -p -m 0777 "$work/a-trap"
          as $A ln -s "$work/a-trap" /var/tmp/umap-journal-$B; what="a symbolic link of uid $A" ;;
    file) as $A touch /var/tmp/umap-journal-$B; what="a regular file of uid $A" ;;
    fifo) as $A mkfifo /var/tmp/umap-journal-$B; what="a FIFO of uid $A" ;;
  esac
  out=$(as $B "$mws" "$work/b5-$squat" - 2>&1) || fail "B's automatic journal ($squat): $out"
  [[ $out == *"using /var/tmp/umap-journal-$B."* ]] || fail "no warning about the taken name: $out"
  [[ $out == *"/var/tmp/umap-journal-$B is $what"* ]] || fail "the warning does not say what: $out"
  if [[ $squat == dir || $squat == link ]]; then
    [[ -z $(ls -A /var/tmp/umap-journal-$B/) ]] || fail "B wrote into A's /var/tmp/umap-journal-$B"
  fi
  # A clean exit removes the fallback directory with the journal it was made for.
  left=$(compgen -G "/var/tmp/umap-journal-$B.*" || true)
  [[ -z $left ]] || fail "the fallback directory is left behind: $left"
  echo "ok: automatic journal with /var/tmp/umap-journal-$B taken by A ($squat)"
done
cleanup_vartmp
out=$(as $B "$mws" "$work/b6" - 2>&1) || fail "B's automatic journal: $out"
[[ $(stat -c '%a %u' /var/tmp/umap-journal-$B) == "700 $B" ]] || fail "automatic root not 700 $B"
echo "ok: /var/tmp/umap-journal-$B made 0700 for B"

# 6. Root is told that the journal is B's and replays it only with --owner B; B itself
#    needs no flag; A may not use --owner.
refused 0 "belongs to uid $B, not to uid 0" "$recover" -j "$work/b-journal" status
refused 0 "run umap-recover --owner $B" "$recover" -j "$work/b-journal" replay
"$recover" -j "$work/b-journal" --owner $B status >/dev/null || fail "root with --owner $B"
for f in "$work"/b-journal/*; do
  [[ $(stat -c '%a %u' "$f") == "600 $B" ]] || fail "after root's run $f is $(stat -c '%a %u' "$f")"
done
echo "ok: root with --owner $B; the files it made are B's"
as $B "$recover" -j "$work/b-journal" status >/dev/null || fail "B's own umap-recover"
refused $A "only root may work on the journal of another user" \
  "$recover" -j "$work/b-journal" --owner $B status
echo "PASS"
