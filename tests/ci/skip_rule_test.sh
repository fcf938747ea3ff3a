#!/usr/bin/env bash
# skip_rule_test.sh SOURCE_DIR CMAKE CTEST
#
# .ci/run fails when a test was skipped on a machine that has what the skip names. This
# builds a small ctest project with the real pieces (cmake/UmapHelpers.cmake's gtest
# registration, whose gtest_discover_tests reports a GTEST_SKIP as skipped, tests/testing/capability.h, faultinject/probe-capability), runs it the way
# `make test` runs ctest (--output-junit), and checks .ci/check-skips' verdict:
#   genuine      a gtest skip and an exit-77 skip for a capability no machine has: green
#   gtest        a GTEST_SKIP naming a capability this machine has (command:sh): red
#   exit77       an exit-77 test naming command:sh: red
#   unnamed      an exit-77 test naming nothing: red
#   none         no skip at all: green
set -euo pipefail
src=$1 cmake=$2 ctest=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/umap-skip-rule.XXXXXX")
trap 'rm -rf "$work"' EXIT
probe=$src/faultinject/probe-capability
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$work/p"
cat >"$work/p/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(skip_rule CXX)
set(CMAKE_CXX_STANDARD 20)
enable_testing()
find_package(GTest REQUIRED)
include(GoogleTest)
include($src/cmake/UmapHelpers.cmake)
add_library(umap_testing INTERFACE)
target_include_directories(umap_testing INTERFACE $src)
target_compile_definitions(umap_testing INTERFACE UMAP_PROBE_CAPABILITY="$probe")
umap_cc_test(NAME skips SRCS skips.cc)
add_test(NAME exit77_genuine COMMAND sh -c "$probe command:umap-no-such-program-anywhere || exit 77")
add_test(NAME exit77_unexpected COMMAND sh -c "echo 'umap-skip: missing command:sh: pretended'; exit 77")
add_test(NAME exit77_unnamed COMMAND sh -c "echo 'cannot run here'; exit 77")
add_test(NAME passes COMMAND true)
set_tests_properties(exit77_genuine exit77_unexpected exit77_unnamed PROPERTIES SKIP_RETURN_CODE 77)
CMAKE
cat >"$work/p/skips.cc" <<'CC'
#include "tests/testing/capability.h"

TEST(Skips, Genuine) {
  UMAP_SKIP_WITHOUT("command:sh", "command:umap-no-such-program-anywhere");
  FAIL() << "not reached: no machine has that program";
}
TEST(Skips, Unexpected) {
  GTEST_SKIP() << "umap-skip: missing command:sh: pretended";
}
TEST(Skips, ProbeOfPresentCapabilitiesRunsTheTest) {
  UMAP_SKIP_WITHOUT("command:sh");
  SUCCEED();
}
CC
"$cmake" -S "$work/p" -B "$work/b" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configure"; }
"$cmake" --build "$work/b" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build"; }

# verdict NAME REGEX EXPECTED_CHECK_EXIT: run the selected tests, then check-skips.
verdict() {
  local name=$1 regex=$2 want=$3 got=0
  (cd "$work/b" && "$ctest" -R "$regex" --output-junit "$work/$name.xml" >"$work/$name.ctest" 2>&1) ||
    { cat "$work/$name.ctest"; fail "$name: ctest itself failed (a skip must not fail ctest)"; }
  "$src/.ci/check-skips" "$work/$name.xml" >"$work/$name.check" 2>&1 || got=$?
  cat "$work/$name.check"
  [[ $got == "$want" ]] || fail "$name: check-skips exited $got, expected $want"
  echo "ok: $name -> $got"
}

verdict genuine '^(Skips\.Genuine|exit77_genuine|passes|Skips\.ProbeOf.*)$' 0
grep -q 'genuine skip: Skips.Genuine (missing command:umap-no-such-program-anywhere)' "$work/genuine.check" ||
  fail "the genuine gtest skip is not reported as genuine"
grep -q 'genuine skip: exit77_genuine' "$work/genuine.check" || fail "exit77_genuine not reported"
grep -q '2 skipped' "$work/genuine.check" || fail "the report does not count 2 skips"
verdict gtest '^(Skips\.Unexpected|passes)$' 1
grep -q 'UNEXPECTED SKIP: Skips.Unexpected: skipped for lack of .command:sh.' "$work/gtest.check" ||
  fail "the unexpected gtest skip is not named"
verdict exit77 '^(exit77_unexpected|passes)$' 1
verdict unnamed '^(exit77_unnamed|passes)$' 1
grep -q 'exit77_unnamed: skipped without naming a missing capability' "$work/unnamed.check" ||
  fail "the unnamed skip is not explained"
verdict none '^passes$' 0
# Run as the user runs: for an ordinary user the probe says root is missing.
if ((EUID == 0)); then
  line=$(setpriv --reuid 65534 --regid 65534 --clear-groups "$probe" root) && fail "nobody has root?"
else
  line=$("$probe" root) && fail "uid $EUID has root?"
fi
[[ $line == "umap-skip: missing root: running as uid "* ]] || fail "probe root as a user said '$line'"
# A missing or empty report is an error of its own, never a pass.
rc=0; "$src/.ci/check-skips" "$work/no-such.xml" >/dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "a missing report gave $rc, expected 2"
echo "PASS: CI goes red on unexpected skips and stays green on genuine ones"
